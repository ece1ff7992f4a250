-- shared.lua: the state and the steps of shared ids (backend.Sharer:
-- semaphores, reader-writer locks), after lib.lua in every script that
-- may meet one.
--
-- The lock key of a shared id is a hash instead of a string: field ""
-- holds the id's capacity (a token is never empty), and each holder's
-- token -> "<expiry ms>:<fence>:<permits>" (the expiry by the server's
-- clock: the lease has ended once the clock reaches it, whatever the
-- key's TTL). The key lives as long as its last lease and as long as the
-- queue keys (shared_touch), so the capacity stays with the id while it
-- has a holder or a waiter. A mutex step that finds the hash (its GET
-- answers WRONGTYPE, which costs no command more) answers LOCKCAPACITY,
-- unless the id is idle (shared_idle); a mutex lease is a string, which
-- a shared step answers LOCKCAPACITY too. The queue is the mutex's: one
-- FIFO of waiters, whose records carry the permits they ask for (see
-- waiter_value). A lease is granted when its permits fit (the live
-- leases' permits and its own add up to at most the capacity) and no live
-- waiter is ahead of it: a head that does not fit holds back everyone
-- behind it.

-- [slow path]

-- holder_value returns a shared id's field value for a lease.
local function holder_value(expiry, fence, permits)
  return int(expiry) .. ':' .. int(fence) .. ':' .. int(permits)
end

-- holder_parse returns the expiry, fence and permits of a holder's field
-- value, or nil when it is malformed.
local function holder_parse(v)
  local e, f, p = string.match(v, '^([0-9]+):([0-9]+):([1-9][0-9]*)$')
  if not e then return nil end
  return tonumber(e), tonumber(f), tonumber(p)
end

-- shared_state returns the state of a shared id at now (ms) from all,
-- the HGETALL reply of its lock hash: {cap = the capacity (0: no key),
-- holders = token -> {expiry, fence, permits}, used = the permits of the
-- live leases}. It removes the fields of the leases that ended (HDEL),
-- unless read_only (inspect).
local function shared_state(lock, all, now, read_only)
  local st = {cap = 0, holders = {}, used = 0}
  local ended = {}
  for i = 1, #all, 2 do
    local k, v = all[i], all[i + 1]
    if k == '' then
      st.cap = tonumber(v) or 0
    else
      local e, f, p = holder_parse(v)
      if e and e > now then
        st.holders[k] = {e, f, p}
        st.used = st.used + p
      else
        ended[#ended + 1] = k
      end
    end
  end
  if #ended > 0 and not read_only then redis.call('HDEL', lock, unpack(ended)) end
  return st
end

-- shared_load reads the lock hash of a shared id at now and returns its
-- state (see shared_state). Cost: HGETALL, and HDEL when a lease ended.
local function shared_load(lock, now)
  return shared_state(lock, redis.call('HGETALL', lock), now)
end

-- shared_first_end returns the remaining TTL (ms, at least 1) of the
-- live lease of st that ends first, or 0 when it has none.
local function shared_first_end(st, now)
  local first
  for _, h in pairs(st.holders) do
    if not first or h[1] < first then first = h[1] end
  end
  if not first then return 0 end
  return math.max(first - now, 1)
end

-- shared_touch sets the TTL of a shared id's lock key to the end of its
-- last lease, or of the queue keys if that is later; with neither left
-- (the id is idle) it deletes the key, so that the capacity is forgotten.
-- Cost: PTTL and PEXPIRE (or DEL).
local function shared_touch(lock, q, st, now)
  local last = now
  for _, h in pairs(st.holders) do
    if h[1] > last then last = h[1] end
  end
  local ttl = math.max(last - now, redis.call('PTTL', q))
  if ttl > 0 then
    redis.call('PEXPIRE', lock, ttl)
  else
    redis.call('DEL', lock)
  end
end

-- shared_grant grants token a lease of permits with ttl (ms) at us (the
-- server's clock in µs) and returns its fence (next_fence: every grant
-- takes a new one). The key's TTL is shared_touch's.
local function shared_grant(lock, f, st, token, ttl, permits, us)
  local expiry = math.floor(us / 1000) + ttl
  local fence = next_fence(f, us)
  redis.call('HSET', lock, token, holder_value(expiry, fence, permits))
  st.holders[token] = {expiry, fence, permits}
  st.used = st.used + permits
  return fence
end

-- shared_drop ends token's lease, if it holds one, and returns 1; else 0.
local function shared_drop(lock, st, token)
  local h = st.holders[token]
  if not h then return 0 end
  redis.call('HDEL', lock, token)
  st.holders[token] = nil
  st.used = st.used - h[3]
  return 1
end

-- shared_hand_off grants the heads of the queue, in ticket order, while
-- their permits fit (the direct hand-off of several waiters in one step:
-- each entry goes, and each wake-up carries its grant), purging dead heads
-- on the way (at most limit per look). self, the step's requester (or
-- nil), is granted like the others but sent nothing: its fence is
-- returned, for its reply. The first live head that does not fit is told
-- the TTL of the lease that ends first when the head changed (a grant, a
-- purge, or told: the caller removed the head), unless it is self.
-- It returns self's fence (or nil) and why it stopped: 'empty' (no live
-- waiter left), 'blocked' (a head that does not fit) or 'limit' (the
-- purge limit).
local function shared_hand_off(lock, q, f, w, st, us, limit, self, told)
  local now = math.floor(us / 1000)
  local mine
  local changed = told
  while true do
    local head, ttl, inbox, nxt, nxt_inbox, removed, permits, nxt_permits = heads(q, w, now, limit)
    if removed then changed = true end
    if head == nil then return mine, 'empty' end
    if head == false then return mine, 'limit' end
    -- A record without permits (a mutex's, written by a step that met
    -- no capacity) asks for all of them.
    if permits == 0 then permits = st.cap end
    if st.used + permits > st.cap then
      if changed and head ~= self then wake(lock, head, inbox, shared_first_end(st, now)) end
      return mine, 'blocked'
    end
    local fence = shared_grant(lock, f, st, head, ttl, permits, us)
    unqueue(q, w, head)
    changed = true
    if head == self then
      mine = fence
    else
      send(lock, inbox, wake_payload(head, nil, {fence, ttl, us}))
    end
    -- What heads read of the entry after head spares another look when
    -- it settles the loop: none (the queue is empty now), or a live one
    -- that does not fit (the new head, told).
    if nxt == false then return mine, 'empty' end
    if nxt_permits then
      if nxt_permits == 0 then nxt_permits = st.cap end
      if st.used + nxt_permits > st.cap then
        if nxt ~= self then wake(lock, nxt, nxt_inbox, shared_first_end(st, now)) end
        return mine, 'blocked'
      end
    end
  end
end

-- shared_idle reports whether the shared id whose lock hash is lock is
-- idle at now (no live lease, no live waiter): it then deletes the hash,
-- and its capacity is forgotten. A mutex step that meets a shared id asks
-- it before it answers LOCKCAPACITY.
local function shared_idle(lock, q, w, now, limit)
  local st = shared_load(lock, now)
  if next(st.holders) ~= nil or heads(q, w, now, limit) ~= nil then return false end
  redis.call('DEL', lock)
  return true
end

-- shared_open returns the state of the shared id of capacity cap (see
-- shared_load) at now, making the lock hash when the id is idle (st.empty
-- then says whether the queue has no live waiter). When the
-- id is in use with another capacity, or as a mutex (a lease, or a live
-- waiter that asked for no permits), it returns nil and what it is.
local function shared_open(lock, q, w, cap, now, limit)
  -- One HGETALL tells the three cases apart: WRONGTYPE (a mutex's string),
  -- no field (no key), or the hash, whose "" field is always there.
  local all = redis.pcall('HGETALL', lock)
  if all['err'] then
    return nil, 'a mutex'
  elseif #all > 0 then
    local st = shared_state(lock, all, now)
    if st.cap == cap then return st end
    if next(st.holders) ~= nil or heads(q, w, now, limit) ~= nil then
      return nil, 'capacity ' .. st.cap
    end
    redis.call('DEL', lock)
  else
    local head, _, _, _, _, _, permits = heads(q, w, now, limit)
    if head == false or (head and permits == 0) then return nil, 'a mutex' end
    redis.call('HSET', lock, '', int(cap))
    -- empty: no live waiter, as heads just found (the step need not look
    -- again).
    return {cap = cap, holders = {}, used = 0, empty = head == nil}
  end
  redis.call('HSET', lock, '', int(cap))
  return {cap = cap, holders = {}, used = 0}
end

-- shared_release is release on a shared id (see release.lua): it ends
-- token's lease and hands the freed permits off. It reports whether token
-- held a lease (release.lua answers).
local function shared_release(lock, q, f, w, token, limit)
  local us = now_us()
  local now = math.floor(us / 1000)
  local st = shared_load(lock, now)
  if shared_drop(lock, st, token) == 0 then return false end
  shared_hand_off(lock, q, f, w, st, us, limit)
  shared_touch(lock, q, st, now)
  return true
end

-- shared_extend is extend on a shared id (see extend.lua): a new expiry
-- for token's live lease, which keeps its fence and permits.
local function shared_extend(lock, token, ttl)
  local now = now_ms()
  local st = shared_load(lock, now)
  local h = st.holders[token]
  if not h then return fail('LOCKNOTHELD', 'the token does not hold a lease of the shared id') end
  redis.call('HSET', lock, token, holder_value(now + ttl, h[2], h[3]))
  if redis.call('PTTL', lock) < ttl then redis.call('PEXPIRE', lock, ttl) end
  return 1
end

-- shared_leave is leave on a shared id (see leave.lua): it removes
-- token's entry and ends its lease, and hands off what that freed.
local function shared_leave(lock, q, f, w, token, limit)
  local us = now_us()
  local now = math.floor(us / 1000)
  local st = shared_load(lock, now)
  local was_head = redis.call('ZRANK', q, token) == 0
  local left = unqueue(q, w, token)
  local released = shared_drop(lock, st, token)
  shared_hand_off(lock, q, f, w, st, us, limit, nil, was_head)
  shared_touch(lock, q, st, now)
  return {left, released}
end
