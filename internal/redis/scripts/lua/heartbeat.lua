-- heartbeat: refresh the deadlines of the listed waiters of one id that are
-- still queued (never re-adding one that is gone), purge expired waiters,
-- report per waiter, and hand the lock off to the live head if it is free
-- (or wake the head), or tell a new head the holder's TTL if the purge
-- changed the head of a held lock (backend checklist items 6 and 7,
-- backend.HandOffer).
--
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] deadlines, KEYS[4] fence key (for a
-- hand-off), KEYS[5] waiter records
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

local lock, q, d, f, w = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local us = now_us()
local now = math.floor(us / 1000)
local head_before = head_of(q)
purge(q, d, w, now, limit)
local out = {}
local any = false
for i = 4, #ARGV do
  local tok = ARGV[i]
  local r = 0
  if redis.call('ZSCORE', q, tok) then
    local deadline = tonumber(redis.call('ZSCORE', d, tok))
    if deadline and deadline > now then
      redis.call('ZADD', d, now + wttl, tok)
      any = true
      r = 1
    else
      -- Dead even if the LIMIT left it in place: never refreshed.
      unqueue(q, d, w, tok)
    end
  end
  out[#out + 1] = r
end
if any then keep_queue(q, d, w, QUEUE_TTL_FACTOR * wttl) end
local free = redis.call('EXISTS', lock) == 0
local head = head_of(q)
if free and head and hand_off(lock, q, d, f, w, head, us) then
  -- Granted by hand-off; a listed head stays reported queued (1): its
  -- wake-up carries the grant.
  free = false
elseif free and head then
  for i = 4, #ARGV do
    if out[i - 3] == 1 and ARGV[i] == head then out[i - 3] = 3 end
  end
  wake(lock, w, head)
elseif head and head ~= head_before then
  wake(lock, w, head, holder_ttl(lock))
end
return out
