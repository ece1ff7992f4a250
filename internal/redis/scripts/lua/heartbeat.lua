-- heartbeat: refresh the deadlines of the listed waiters of one id that are
-- still queued (never re-adding one that is gone, never reviving one past
-- its deadline), purge the dead heads and the dead entries behind the
-- first live listed waiter (see sweep), report per waiter, and hand the
-- lock off to the live head if it is free, or tell a new head the
-- holder's TTL if the purge changed the head of a held lock (backend
-- checklist items 6 and 7, backend.HandOffer).
--
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] fence key (for a hand-off),
-- KEYS[4] waiter records
-- ARGV[1] waiter TTL in ms
-- ARGV[2] purge limit
-- ARGV[3] the Backend's pub/sub command: PUBLISH or SPUBLISH (see publish_cmd)
-- ARGV[4..] waiter tokens (at least one, at most 10000)
--
-- Reply: one integer per token, in order: 0 gone, 1 queued (deadline
-- refreshed), 3 queued and ready (the lock is free and it is the head).
-- Error reply: LOCKBADARG.
local wttl = posint(1)
if not wttl then return bad_arg('waiter_ttl', 'must be a positive integer of milliseconds') end
local limit, bad = wake_args(2)
if not limit then return bad end
if #ARGV < 4 or #ARGV > 10003 then return bad_arg('tokens', 'must be 1 to 10000 tokens') end
for i = 4, #ARGV do
  if not valid_token(ARGV[i]) then return bad_arg('token', 'must be 1 to 128 bytes') end
end

local lock, q, f, w = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local us = now_us()
local now = math.floor(us / 1000)
local toks = {}
for i = 4, #ARGV do toks[#toks + 1] = ARGV[i] end
local recs = redis.call('HMGET', w, unpack(toks))
local out, live, dead, fresh = {}, {}, {}, {}
for i, tok in ipairs(toks) do
  local deadline, ttl, inbox, permits = waiter_parse(recs[i])
  local r = 0
  if deadline and deadline > now then
    -- A token listed twice is refreshed once.
    if not live[tok] then
      fresh[#fresh + 1] = tok
      fresh[#fresh + 1] = waiter_value(now + wttl, ttl, inbox, permits)
      live[tok] = true
    end
    r = 1
  elseif recs[i] then
    -- Dead even if no purge removed it yet: never refreshed.
    dead[#dead + 1] = tok
  end
  out[i] = r
end
-- The dead listed tokens leave the queue with their records.
drop(q, w, dead)
if #fresh > 0 then
  redis.call('HSET', w, unpack(fresh))
  keep_queue(q, w, QUEUE_TTL_FACTOR * wttl, false)
  -- The sweep behind the first live listed waiter: at most limit dead
  -- entries right behind it go.
  local r = redis.call('ZRANK', q, fresh[1])
  if r then sweep(q, w, now, limit, r + 1) end
end
-- A shared id's lock key is a hash (see shared.lua): the heads that fit
-- are granted.
local kind = redis.call('TYPE', lock)['ok']
if kind == 'hash' then
  local st = shared_load(lock, now)
  shared_hand_off(lock, q, f, w, st, us, limit, nil, #dead > 0)
  shared_touch(lock, q, st, now)
  return out
end
local head, ttl, inbox, next, next_inbox, removed = heads(q, w, now, limit)
if head and kind == 'none' then
  -- Granted by hand-off; a listed head stays reported queued (1): its
  -- wake-up carries the grant.
  hand_off(lock, q, f, w, head, ttl, inbox, next, next_inbox, us)
elseif head and (removed or #dead > 0) then
  -- The purge may have changed the head of the held lock: tell the live
  -- head when the lease ends (a head that already knew re-arms its timer).
  wake(lock, head, inbox, holder_ttl(lock))
end
return out
