-- acquire_step.lua: one id's acquire (fair try, optional enqueue, purge,
-- wake-up), shared by acquire and acquire_many. The scripts package puts
-- it after lib.lua and before those two scripts' own files.
--
-- Keys of the id: lock (string: the lease's fence and owner token, see
-- lock_value; its TTL is the lease), q (zset: waiter token -> ticket), d
-- (zset: waiter token -> deadline, ms of the server's clock), f (the fence
-- key of the id's hash slot, see next_fence), w
-- (hash: the waiter records, see waiter_put; inbox is the requester's,
-- see inbox_arg). Wake-ups go to the waiters' inboxes (see send).
-- The arguments are validated by the caller.
--
-- acquire_step returns {acquired, fence, ttl, holder_ttl, queued, ticket,
-- head} (and, when not acquired, the server's clock in µs) or, when the
-- queue is full, nil and the number of waiters.

-- try_fast is the fast path, tried before acquire_step: with no queue key
-- (no waiter, live or dead) and a free lock, it grants the lock and
-- returns the fence (next_fence; us as there). This is the whole
-- uncontended case: EXISTS, TIME, SET ... GET of the fence key, SET NX PX.
-- Otherwise it returns nil, having written nothing but the fence key (a
-- lock held with no queue skips the fence it took: fences only need to
-- increase). ttl_arg is the lease TTL as it came in ARGV (passing a string
-- spares a number formatting). no_q says that the step knows that q does
-- not exist: its EXISTS is skipped.
local function try_fast(lock, q, f, token, ttl_arg, us, no_q)
  if no_q or redis.call('EXISTS', q) == 0 then
    local fence = next_fence(f, us)
    if redis.call('SET', lock, lock_value(fence, token), 'NX', 'PX', ttl_arg) then return fence end
  end
end

-- [slow path]

-- next_ticket returns a ticket for a new waiter of q: the server's clock
-- in microseconds, or the tail's ticket + 1 when that is not below it.
-- Tickets increase while the queue exists, and after it as long as the
-- clock does not step back.
local function next_ticket(q, us)
  local tail = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')
  local last = tonumber(tail[2]) or 0
  if last >= us then return last + 1 end
  return us
end

-- acquire_step is the rest of the step, after try_fast returned nil.
local function acquire_step(lock, q, d, f, w, token, ttl, wait, wttl, max_waiters, limit, inbox)
  local holder, held_fence = lock_owner(redis.call('GET', lock))
  if holder == token then
    -- A retried grant: report the lease as it is (S6). The lock key's TTL
    -- is set again to what is left of it, so that this step writes: a WAIT
    -- after it, on its connection, then waits for the replicas to reach
    -- the original grant too (WAIT counts the replicas that reached the
    -- connection's last write, and a connection that never wrote has
    -- nothing to wait for).
    local left = holder_ttl(lock)
    redis.call('PEXPIRE', lock, left)
    return {1, held_fence, left, 0, 0, 0, 0}
  end

  local head_before = head_of(q)
  local us = now_us()
  local now = math.floor(us / 1000)
  local changed = purge(q, d, w, now, limit) > 0

  local mine = redis.call('ZSCORE', q, token)
  if mine then
    -- An entry past its deadline is dead even if the LIMIT left it in
    -- place: it is never granted or refreshed; its owner counts as not
    -- queued.
    local deadline = tonumber(redis.call('ZSCORE', d, token))
    if not deadline or deadline <= now then
      unqueue(q, d, w, token)
      mine = false
      changed = true
    end
  end
  -- The head is read again only if this step removed an entry.
  local head = head_before
  if changed then head = head_of(q) end
  if not holder and head and head ~= token and hand_off(lock, q, d, f, w, head, us, token) then
    -- The free lock went to the live head ahead (a hand-off, which told
    -- the next head): the requester is refused as for a held lock.
    holder = head
    head = head_of(q)
    head_before = head
  end
  if not holder and (not head or head == token) then
    if mine then unqueue(q, d, w, token) end
    local fence = next_fence(f, us)
    redis.call('SET', lock, lock_value(fence, token), 'PX', ttl)
    -- The next waiter is the head now: tell it when this lease ends, as
    -- the lease may end without a release.
    local next = mine and head_of(q)
    if next then wake(lock, w, next, ttl) end
    return {1, fence, ttl, 0, 0, 0, 0}
  end

  -- At least 1 while the lock is held: 0 would mean "free, but waiters
  -- are ahead".
  local held_ttl = 0
  if holder then held_ttl = holder_ttl(lock) end

  if wait then
    if not mine then
      if redis.call('ZCARD', q) >= max_waiters then
        return nil, max_waiters
      end
      mine = next_ticket(q, us)
      redis.call('ZADD', q, int(mine), token)
      if not head then head = token end
    end
    redis.call('ZADD', d, now + wttl, token)
    waiter_put(w, token, ttl, inbox)
    keep_queue(q, d, w, QUEUE_TTL_FACTOR * wttl)
  end

  -- The purge removed the head: wake the new head, or, while the lock is
  -- held, tell it when the lease ends.
  if head and head ~= head_before and head ~= token then
    wake(lock, w, head, holder and held_ttl)
  end

  local queued, ticket = 0, 0
  if mine then
    queued, ticket = 1, tonumber(mine)
  end
  local is_head = 0
  if queued == 1 and head == token then is_head = 1 end
  return {0, 0, 0, held_ttl, queued, ticket, is_head, us}
end
