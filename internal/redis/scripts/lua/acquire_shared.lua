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
local bad, token, ttl, wait, wttl, max_waiters, limit, inbox = acquire_args()
if bad then return bad end
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

local mine = own_entry(q, w, token, now)

local fence, stop = nil, 'empty'
if not st.empty then
  fence, stop = shared_hand_off(lock, q, f, w, st, us, limit, mine and token or nil)
end
if not fence and not mine and stop == 'empty' and st.used + permits <= cap then
  fence = shared_grant(lock, f, st, token, ttl, permits, us)
end
if fence then
  shared_touch(lock, q, st, now)
  return {1, fence, ttl, 0, 0, 0, 0}
end

local ticket, is_head, queued = enqueue(q, w, token, ttl, wait, wttl, max_waiters, limit, inbox, us, mine, permits)
shared_touch(lock, q, st, now)
if not ticket then return fail('LOCKQUEUEFULL', 'the queue has ' .. max_waiters .. ' waiters') end
return {0, 0, 0, shared_first_end(st, now), queued, ticket, is_head, us}
