-- acquire_shared: acquire on a shared id (backend.Sharer, backend
-- checklist items 1, 2, 7 and 15; see shared.lua): a fair try for a lease
-- of permits, with optional enqueue, in one atomic step. The heads of the
-- queue that fit are granted first (the requester among them when it is
-- queued); a requester that is not queued is granted only when no live
-- waiter is left ahead and its permits fit.
--
-- KEYS[1] lock       hash: "" -> capacity, holder token -> "<expiry>:<fence>:<permits>"
-- KEYS[2] queue      zset: waiter token -> ticket
-- KEYS[3] fence      string: the last fence of the id's hash slot (see next_fence)
-- KEYS[4] waiters    hash: waiter token -> "<deadline>:<lease ttl>/<permits>:<inbox>"
-- ARGV[1..8] as acquire's: token, lease TTL in ms, wait ("1" or "0"),
--         waiter TTL in ms, max waiters, purge limit, pub/sub command, inbox
-- ARGV[9] the id's capacity: 2 to 1e9
-- ARGV[10] the lease's permits: 1 to the capacity
--
-- Reply: as acquire's. HolderTTL is the remaining TTL of the lease that
-- ends first (0 when none is live). Error replies: LOCKCAPACITY (the id is
-- in use with another capacity, or as a mutex; nothing changed),
-- LOCKQUEUEFULL, LOCKBADARG.
local token = ARGV[1]
if not valid_token(token) then return bad_arg('token', 'must be 1 to 128 bytes') end
local ttl = posint(2)
if not ttl then return bad_arg('ttl', 'must be a positive integer of milliseconds') end
local wait = ARGV[3]
if wait ~= '0' and wait ~= '1' then return bad_arg('wait', 'must be 0 or 1') end
local wttl = 0
if wait == '1' then
  wttl = posint(4)
  if not wttl then return bad_arg('waiter_ttl', 'must be a positive integer of milliseconds') end
end
local max_waiters = posint(5)
if not max_waiters then return bad_arg('max_waiters', 'must be a positive integer') end
local limit, bad = wake_args(6)
if not limit then return bad end
local inbox, why = inbox_arg(8)
if not inbox then return bad_arg('inbox', why) end
local cap = posint(9, 1000000000)
if not cap or cap < 2 then return bad_arg('capacity', 'must be an integer from 2 to 1000000000') end
local permits = posint(10, cap)
if not permits then return bad_arg('permits', 'must be an integer from 1 to the capacity') end

local lock, q, f, w = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local us = now_us()
local now = math.floor(us / 1000)
local st, what = shared_open(lock, q, w, cap, now, limit)
if not st then
  return fail('LOCKCAPACITY', 'the id is in use with ' .. what .. ', not capacity ' .. cap)
end

local h = st.holders[token]
if h then
  -- A retried grant: report the lease as it is (S6). Its field is written
  -- again, so that this step writes (for a WAIT after it; see acquire).
  redis.call('HSET', lock, token, holder_value(h[1], h[2], h[3]))
  return {1, h[2], h[1] - now, 0, 0, 0, 0}
end

-- The requester's own entry: one past its deadline is dead.
local mine = false
local deadline = waiter_parse(redis.call('HGET', w, token))
if deadline then
  if deadline > now then
    mine = true
  else
    unqueue(q, w, token)
  end
end

local fence, stop = shared_hand_off(lock, q, f, w, st, us, limit, mine and token or nil)
if not fence and not mine and stop == 'empty' and st.used + permits <= cap then
  fence = shared_grant(lock, f, st, token, ttl, permits, us)
end
if fence then
  shared_touch(lock, q, st, now)
  return {1, fence, ttl, 0, 0, 0, 0}
end

local ticket, is_head = 0, 0
if mine then
  ticket = tonumber(redis.call('ZSCORE', q, token)) or 0
  if redis.call('ZRANK', q, token) == 0 then is_head = 1 end
end
if wait == '1' then
  local created = false
  if not mine then
    ticket, created = next_ticket(q, us)
    if not created and redis.call('ZCARD', q) >= max_waiters then
      local room, emptied = make_room(q, w, now, limit, max_waiters)
      if not room then
        shared_touch(lock, q, st, now)
        return fail('LOCKQUEUEFULL', 'the queue has ' .. max_waiters .. ' waiters')
      end
      if emptied then created = true end
    end
    redis.call('ZADD', q, int(ticket), token)
    if created then is_head = 1 end
  end
  waiter_put(w, token, now + wttl, ttl, inbox, permits)
  keep_queue(q, w, QUEUE_TTL_FACTOR * wttl, created)
end
shared_touch(lock, q, st, now)

local queued = 0
if wait == '1' or mine then queued = 1 end
return {0, 0, 0, shared_first_end(st, now), queued, ticket, is_head, us}
