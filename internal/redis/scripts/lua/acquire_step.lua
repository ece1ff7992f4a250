-- acquire_step.lua: one id's acquire (fair try, optional enqueue, purge,
-- wake-up), shared by acquire and acquire_many. The scripts package puts
-- it after lib.lua and before those two scripts' own files.
--
-- Keys of the id: lock (string: the lease's fence and owner token, see
-- lock_value; its TTL is the lease), q (zset: waiter token -> ticket), f
-- (the fence key of the id's hash slot, see next_fence), w (hash: the
-- waiter records with their deadlines, see waiter_put; inbox is the
-- requester's, see inbox_arg). Wake-ups go to the waiters' inboxes (see
-- send).
-- The arguments are validated by the caller.
--
-- acquire_step returns {acquired, fence, ttl, holder_ttl, queued, ticket,
-- head} (and, when not acquired, the server's clock in µs) or, when the
-- queue is full, nil and the number of waiters, or, when the id is a
-- shared one in use (see shared.lua), nil, nil and true.

-- try_fast is the fast path, tried before acquire_step: with no lock key
-- and no queue key (no waiter, live or dead), it grants the lock and
-- returns the fence (next_fence; us as there). This is the whole
-- uncontended case: EXISTS of both keys, TIME, SET ... GET of the fence
-- key, SET NX PX. Otherwise it returns nil, having written nothing. ttl_arg
-- is the lease TTL as it came in ARGV (passing a string spares a number
-- formatting). no_q says that the step knows that q does not exist: its
-- EXISTS is skipped and SET NX tells whether the lock is free (a lock held
-- with no queue then skips the fence it took: fences only need to
-- increase).
local function try_fast(lock, q, f, token, ttl_arg, us, no_q)
  if no_q or redis.call('EXISTS', lock, q) == 0 then
    local fence = next_fence(f, us)
    if redis.call('SET', lock, lock_value(fence, token), 'NX', 'PX', ttl_arg) then return fence end
  end
end

-- acquire_args validates the ARGV of acquire and acquire_shared (see
-- acquire.lua): it returns nil and token, the lease TTL, wait (a boolean),
-- the waiter TTL, max waiters, the purge limit and the inbox; or the
-- LOCKBADARG reply.
local function acquire_args()
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
  return nil, token, ttl, wait == '1', wttl, max_waiters, limit, inbox
end

-- [slow path]

-- next_ticket returns a ticket for a new waiter of q: the server's clock
-- in microseconds, or the tail's ticket + 1 when that is not below it.
-- Tickets increase while the queue exists, and after it as long as the
-- clock does not step back. The second result says that q is empty.
local function next_ticket(q, us)
  local tail = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')
  local last = tonumber(tail[2]) or 0
  if last >= us then return last + 1, false end
  return us, #tail == 0
end

-- own_entry reports whether token has a live entry in q at now. One that
-- is past its deadline is dead even if no purge removed it yet: it is
-- removed here, never granted or refreshed, and its owner counts as not
-- queued.
local function own_entry(q, w, token, now)
  local deadline = waiter_parse(redis.call('HGET', w, token))
  if not deadline then return false end
  if deadline > now then return true end
  unqueue(q, w, token)
  return false
end

-- make_room is for a requester with no entry that finds the queue full
-- (max_waiters entries): a bounded sweep of the first entries may make
-- room. It returns false when the queue is still full; otherwise true, and
-- whether the sweep emptied the queue (which deleted its keys: the
-- requester is then the first entry of a new queue).
local function make_room(q, w, now, limit, max_waiters)
  if sweep(q, w, now, limit) == 0 then return false end
  local n = redis.call('ZCARD', q)
  if n >= max_waiters then return false end
  return true, n == 0
end

-- enqueue_behind is acquire_step for a waiting requester of a lock that
-- another token holds (at us, the server's clock in µs; now in ms), the
-- contended case: ZADD NX tells whether the requester has an entry (a new
-- waiter is the common case) instead of a read of its record first.
local function enqueue_behind(lock, q, w, token, ttl, wttl, max_waiters, limit, inbox, us, now)
  local held_ttl = holder_ttl(lock)
  local ticket, created = next_ticket(q, us)
  local is_head = 0
  if created then is_head = 1 end
  if not created and redis.call('ZCARD', q) >= max_waiters and redis.call('HEXISTS', w, token) == 0 then
    -- Full, and the requester has no entry.
    local room, emptied = make_room(q, w, now, limit, max_waiters)
    if not room then return nil, max_waiters end
    if emptied then created, is_head = true, 1 end
  end
  if redis.call('ZADD', q, 'NX', int(ticket), token) == 0 then
    -- The requester has an entry: live, it keeps its ticket (a retry);
    -- past its deadline, it is dead, and the requester queues anew with
    -- the new ticket.
    local deadline = waiter_parse(redis.call('HGET', w, token))
    if deadline and deadline > now then
      ticket = tonumber(redis.call('ZSCORE', q, token))
    else
      redis.call('ZADD', q, int(ticket), token)
    end
    if redis.call('ZRANK', q, token) == 0 then is_head = 1 end
  end
  waiter_put(w, token, now + wttl, ttl, inbox)
  keep_queue(q, w, QUEUE_TTL_FACTOR * wttl, created)
  return {0, 0, 0, held_ttl, 1, ticket, is_head, us}
end

-- enqueue ends a step that did not grant the requester (at us, the
-- server's clock in µs): mine says that it has a live entry; with wait it
-- gets one (or keeps its ticket) with a fresh deadline, and permits (on a
-- shared id) in its record. It returns the requester's ticket, whether it
-- is the head, and whether it is queued (1 or 0); or nil when the queue
-- is full (make_room).
local function enqueue(q, w, token, ttl, wait, wttl, max_waiters, limit, inbox, us, mine, permits)
  local now = math.floor(us / 1000)
  local ticket, is_head = 0, 0
  if mine then
    ticket = tonumber(redis.call('ZSCORE', q, token)) or 0
    if redis.call('ZRANK', q, token) == 0 then is_head = 1 end
  end
  if wait then
    local created = false
    if not mine then
      ticket, created = next_ticket(q, us)
      if not created and redis.call('ZCARD', q) >= max_waiters then
        local room, emptied = make_room(q, w, now, limit, max_waiters)
        if not room then return nil end
        if emptied then created = true end
      end
      redis.call('ZADD', q, int(ticket), token)
      if created then is_head = 1 end
    end
    waiter_put(w, token, now + wttl, ttl, inbox, permits)
    keep_queue(q, w, QUEUE_TTL_FACTOR * wttl, created)
  end
  if wait or mine then return ticket, is_head, 1 end
  return ticket, is_head, 0
end

-- acquire_step is the rest of the step, after try_fast returned nil.
local function acquire_step(lock, q, f, w, token, ttl, wait, wttl, max_waiters, limit, inbox)
  local v = redis.pcall('GET', lock)
  if type(v) == 'table' then
    -- A shared id's lock hash (see shared.lua): in use with a capacity,
    -- unless it is idle.
    if not shared_idle(lock, q, w, now_ms(), limit) then return nil, nil, true end
    v = false
  end
  local holder, held_fence = lock_owner(v)
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

  local us = now_us()
  local now = math.floor(us / 1000)
  if holder and wait then
    return enqueue_behind(lock, q, w, token, ttl, wttl, max_waiters, limit, inbox, us, now)
  end
  local mine = own_entry(q, w, token, now)

  -- At least 1 while the lock is held: 0 means "free, but waiters are
  -- ahead".
  local held_ttl = 0
  if holder then
    held_ttl = holder_ttl(lock)
  else
    local head, httl, hinbox, next, next_inbox = heads(q, w, now, limit)
    if head == nil or head == token then
      -- Nobody live is ahead: the lock is the requester's.
      if mine then unqueue(q, w, token) end
      local fence = next_fence(f, us)
      redis.call('SET', lock, lock_value(fence, token), 'PX', ttl)
      -- The next waiter is the head now: tell it when this lease ends, as
      -- the lease may end without a release.
      if head and next then wake(lock, next, next_inbox, ttl) end
      return {1, fence, ttl, 0, 0, 0, 0}
    end
    if head then
      -- The free lock goes to the live head ahead (a hand-off, which told
      -- the next head): the requester is refused as for a held lock.
      hand_off(lock, q, f, w, head, httl, hinbox, next, next_inbox, us, token)
      held_ttl = httl
    end
  end

  local ticket, is_head, queued = enqueue(q, w, token, ttl, wait, wttl, max_waiters, limit, inbox, us, mine)
  if not ticket then return nil, max_waiters end
  return {0, 0, 0, held_ttl, queued, ticket, is_head, us}
end
