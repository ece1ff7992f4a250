-- acquire: fair try-acquire, with optional enqueue, in one atomic step
-- (backend checklist items 1, 2 and 7); the step itself is try_fast, then
-- acquire_step.
--
-- KEYS[1] lock       string: "<fence>:<owner token>"; its TTL is the lease
-- KEYS[2] queue      zset: waiter token -> ticket
-- KEYS[3] fence      string: the last fence of the id's hash slot (see next_fence)
-- KEYS[4] waiters    hash: waiter token -> "<deadline>:<lease ttl>:<inbox>" (see waiter_put)
-- ARGV[1] token
-- ARGV[2] lease TTL in ms
-- ARGV[3] wait: "1" enqueues the requester when not granted, "0" does not
-- ARGV[4] waiter TTL in ms (read only when wait is "1")
-- ARGV[5] max waiters per id
-- ARGV[6] purge limit: most expired waiters removed by this step
-- ARGV[7] the Backend's pub/sub command: PUBLISH or SPUBLISH (see publish_cmd)
-- ARGV[8] the requester's inbox, where its wake-ups go while it is
--         queued (see inbox_arg)
--
-- Reply: {acquired, fence, ttl, holder_ttl, queued, ticket, head}, all
-- integers (0/1 for the flags, ms for the TTLs; holder_ttl is at least 1 when
-- the lock is held, 0 when it is free), and, when not acquired, an eighth:
-- the server's clock in µs during the step (for a hand-off's validity).
-- Error replies: LOCKCAPACITY (the id is a shared one in use, see
-- shared.lua; nothing changed), LOCKQUEUEFULL, LOCKBADARG.
local bad, token, ttl, wait, wttl, max_waiters, limit, inbox = acquire_args()
if bad then return bad end

local fence = try_fast(KEYS[1], KEYS[2], KEYS[3], token, ARGV[2])
if fence then return {1, fence, ttl, 0, 0, 0, 0} end
-- [slow path]
local r, full, shared = acquire_step(KEYS[1], KEYS[2], KEYS[3], KEYS[4], token, ttl, wait, wttl,
  max_waiters, limit, inbox)
if shared then return fail('LOCKCAPACITY', 'the id is in use as a shared id, not a mutex') end
if not r then return fail('LOCKQUEUEFULL', 'the queue has ' .. full .. ' waiters') end
return r
