-- acquire: fair try-acquire, with optional enqueue, in one atomic step
-- (backend checklist items 1, 2 and 7).
--
-- KEYS[1] lock       string: the owner token; its TTL is the lease
-- KEYS[2] queue      zset: waiter token -> ticket
-- KEYS[3] deadlines  zset: waiter token -> deadline (ms, server clock)
-- KEYS[4] counters   hash: fence, ticket (no TTL)
-- ARGV[1] token
-- ARGV[2] lease TTL in ms
-- ARGV[3] wait: "1" enqueues the requester when not granted, "0" does not
-- ARGV[4] waiter TTL in ms (read only when wait is "1")
-- ARGV[5] max waiters per id
-- ARGV[6] purge limit: most expired waiters removed by this step
-- ARGV[7] wake-up channel
-- ARGV[8] wake-up command: PUBLISH or SPUBLISH (see publish_cmd)
--
-- Reply: {acquired, fence, ttl, holder_ttl, queued, ticket, head}, all
-- integers (0/1 for the flags, ms for the TTLs; holder_ttl is at least 1 when
-- the lock is held, 0 when it is free). Error replies: LOCKQUEUEFULL,
-- LOCKBADARG.
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
local limit = posint(6, 100000)
if not limit then return bad_arg('purge_limit', 'must be an integer from 1 to 100000') end
local channel = ARGV[7]
if type(channel) ~= 'string' or #channel == 0 then return bad_arg('channel', 'must not be empty') end
local publish, why = publish_cmd(8)
if not publish then return bad_arg('publish', why) end

local lock, q, d, counters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

-- Reading the lock key here, in the same step as the try, is what lets a
-- client-side-caching adapter track it with no gap before an invalidation.
local holder = redis.call('GET', lock)
if holder == token then
  -- A retried grant: report the lease as it is (S6). The fence counter is
  -- written (+0, no change) so that this step writes: a WAIT after it, on
  -- its connection, then waits for the replicas to reach the original
  -- grant too (WAIT counts the replicas that reached the connection's
  -- last write, and a connection that never wrote has nothing to wait for).
  local left = redis.call('PTTL', lock)
  local fence = redis.call('HINCRBY', counters, 'fence', 0)
  return {1, fence, left, 0, 0, 0, 0}
end

-- Fast path: a free lock with no queue key (no waiter, live or dead) is
-- granted at once; this is the whole uncontended case.
if not holder and redis.call('EXISTS', q) == 0 then
  local fence = redis.call('HINCRBY', counters, 'fence', 1)
  redis.call('SET', lock, token, 'PX', ttl)
  redis.call('PTTL', lock) -- keeps a NOLOOP tracking client tracking it (see below)
  return {1, fence, ttl, 0, 0, 0, 0}
end

local head_before = false
if not holder then head_before = head_of(q) end
local now = now_ms()
purge(q, d, now, limit)

local mine = redis.call('ZSCORE', q, token)
if mine then
  -- An entry past its deadline is dead even if the LIMIT left it in place:
  -- it is never granted or refreshed; its owner counts as not queued.
  local deadline = tonumber(redis.call('ZSCORE', d, token))
  if not deadline or deadline <= now then
    redis.call('ZREM', q, token)
    redis.call('ZREM', d, token)
    mine = false
  end
end
local head = head_of(q)
if not holder and (not head or head == token) then
  if mine then
    redis.call('ZREM', q, token)
    redis.call('ZREM', d, token)
  end
  local fence = redis.call('HINCRBY', counters, 'fence', 1)
  redis.call('SET', lock, token, 'PX', ttl)
  -- Read the key again after writing it: a tracking client with NOLOOP is
  -- not told of its own write, and Redis stops tracking the key for it, so
  -- this read is what keeps its other waiters told of the lease's end.
  redis.call('PTTL', lock)
  return {1, fence, ttl, 0, 0, 0, 0}
end

local holder_ttl = 0
if holder then
  -- PTTL is 0 in the last millisecond of a lease: report at least 1, as 0
  -- would mean "free, but waiters are ahead".
  holder_ttl = redis.call('PTTL', lock)
  if holder_ttl < 1 then holder_ttl = 1 end
end

if wait == '1' then
  if not mine then
    if redis.call('ZCARD', q) >= max_waiters then
      return fail('LOCKQUEUEFULL', 'the queue has ' .. max_waiters .. ' waiters')
    end
    mine = redis.call('HINCRBY', counters, 'ticket', 1)
    redis.call('ZADD', q, mine, token)
    if not head then head = token end
  end
  redis.call('ZADD', d, now + wttl, token)
  keep_queue(q, d, QUEUE_TTL_FACTOR * wttl)
end

-- The purge removed the head while the lock is free: wake the new head.
if not holder and head and head ~= head_before and head ~= token then
  redis.call(publish, channel, head)
end

local queued, ticket = 0, 0
if mine then
  queued, ticket = 1, tonumber(mine)
end
local is_head = 0
if queued == 1 and head == token then is_head = 1 end
return {0, 0, 0, holder_ttl, queued, ticket, is_head}
