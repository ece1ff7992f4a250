-- lib.lua: helpers shared by every script. The scripts package prepends
-- this file to each script's own file, so every script is self-contained
-- on the server; the part past the "[slow path]" line comes after the
-- script's own fast path. Only locals: Redis forbids globals in scripts.

-- Error replies start with a code and a space (Redis adds "ERR " to a reply
-- without a space); the adapters map the codes to the backend's errors.
local function fail(code, msg)
  return redis.error_reply(code .. ' ' .. msg)
end

local function bad_arg(name, msg)
  return fail('LOCKBADARG', name .. ': ' .. msg)
end

-- posint returns ARGV[i] as a positive integer of at most 15 digits (exact
-- as a Lua number) and at most max, or nil.
local function posint(i, max)
  local s = ARGV[i]
  if type(s) ~= 'string' or #s > 15 or not string.find(s, '^[1-9][0-9]*$') then
    return nil
  end
  local n = tonumber(s)
  if max ~= nil and n > max then
    return nil
  end
  return n
end

-- valid_token reports whether s is a non-empty token of at most 128 bytes
-- (backend.MaxTokenLength).
local function valid_token(s)
  return type(s) == 'string' and #s > 0 and #s <= 128
end

-- now_us returns the server's clock in microseconds (about 1.8e15 today,
-- exact as a Lua number until the year 2255).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- now_ms returns the server's clock in milliseconds.
local function now_ms()
  return math.floor(now_us() / 1000)
end

-- int formats an integral Lua number as an integer argument: redis.call
-- would format it with 14 significant digits, which rounds a microsecond
-- clock. '%d' converts to a C long (64 bits), exact to 2^53; '%.0f' is
-- 2-3 times slower (glibc's exact decimal conversion).
local function int(x)
  return string.format('%d', x)
end

-- publish_cmd returns ARGV[i] when it names the pub/sub command of the
-- calling Backend: PUBLISH (classic pub/sub) or SPUBLISH (sharded pub/sub,
-- Redis 7.0 or newer). A wake-up goes by its inbox's own kind (see send):
-- the argument is the Backend's setting, checked here so that a Backend
-- set for SPUBLISH fails every step on an older server. Otherwise it
-- returns nil and the reason, before the script writes anything.
local function publish_cmd(i)
  local c = ARGV[i]
  if c == 'PUBLISH' then return c end
  if c == 'SPUBLISH' then
    if (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x070000 then return c end
    return nil, 'SPUBLISH needs Redis 7.0 or newer'
  end
  return nil, 'must be PUBLISH or SPUBLISH'
end

-- wake_args reads the wake-up arguments at ARGV[i] (purge limit) and
-- ARGV[i+1] (command, see publish_cmd). On bad input it returns nil and
-- the LOCKBADARG reply, before the script writes anything.
local function wake_args(i)
  local limit = posint(i, 100000)
  if not limit then return nil, bad_arg('purge_limit', 'must be an integer from 1 to 100000') end
  local publish, why = publish_cmd(i + 1)
  if not publish then return nil, bad_arg('publish', why) end
  return limit
end

-- The lock key of an id holds "<fence>:<token>": the lease's fence, then
-- its owner token (everything after the first colon; the fence has no
-- colon). The lease's TTL is the key's.

-- lock_value returns the lock key's value for a lease of token with fence.
local function lock_value(fence, token)
  return int(fence) .. ':' .. token
end

-- lock_owner returns the owner token and the fence of v, a lock key's value,
-- or nil when v is false (no key). A value of another shape (written by
-- another wire version) gives true and fence 0: held, by no token.
local function lock_owner(v)
  if not v then return nil end
  local f, tok = string.match(v, '^([0-9]+):(.*)$')
  if not tok then return true, 0 end
  return tok, tonumber(f)
end

-- lock_fence returns the fence of v, a lock key's value, as the digits it
-- was written with (exact beyond a Lua number's precision), or '0' for a
-- value of another shape.
local function lock_fence(v)
  return string.match(v, '^([0-9]+):') or '0'
end

-- FENCE_IDLE is how long, in ms, the fence key of a hash slot lives after
-- the slot's last grant: an hour. While it lives, fences in the slot
-- strictly increase even if the server's clock steps back.
local FENCE_IDLE_ARG = '3600000'

-- SET_GET says that SET takes GET: Redis 7 or newer (SET has GET from 6.2,
-- but a script can read the server's version only from 7.0).
local SET_GET = (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x070000

-- The fence key f of a hash slot is a string: the last fence granted to any
-- id of the slot, so fences strictly increase per slot, and so per id.

-- fences, when a table, makes next_fence keep each fence key's last fence
-- in it (read once, with GET) instead of writing the key on every grant:
-- a call that grants many ids (acquire_many) sets it to {} and writes each
-- key once at its end (fences_flush).
local fences = false

-- fence_set writes fence as the last fence of the slot whose fence key is f.
local function fence_set(f, fence)
  redis.call('SET', f, int(fence), 'PX', FENCE_IDLE_ARG)
end

-- next_fence records and returns the next fence of the slot whose fence
-- key is f: the server's clock in microseconds (us, when this step read it
-- already), or the slot's last fence + 1 when that is not below it. Cost:
-- TIME and SET ... GET (GET and SET before Redis 7), and one more SET when
-- the clock is not past the last fence.
local function next_fence(f, us)
  us = us or now_us()
  if fences then
    local last = fences[f]
    if last == nil then last = tonumber(redis.call('GET', f)) or 0 end
    if last >= us then us = last + 1 end
    fences[f] = us
    return us
  end
  local last
  if SET_GET then
    last = tonumber(redis.call('SET', f, int(us), 'PX', FENCE_IDLE_ARG, 'GET')) or 0
  else
    last = tonumber(redis.call('GET', f)) or 0
    if last < us then fence_set(f, us) end
  end
  if last >= us then
    us = last + 1
    fence_set(f, us)
  end
  return us
end

-- RELEASE_KEEP is how long, in ms, a release record lives after its last
-- write (see release.lua): two periods of the caller's clock (keys.ReleasePeriod).
local RELEASE_KEEP = '60000'

-- fences_flush writes the fences next_fence kept in fences, one SET per key.
local function fences_flush()
  for f, last in pairs(fences) do
    fence_set(f, last)
  end
end

-- INBOX_TTL is how long, in ms, an inbox key lives after a script's last
-- write to it: what a process that stopped reading its inbox leaves.
local INBOX_TTL = 60000

-- inbox_arg returns ARGV[i] as the inbox of the requester, where its
-- wake-ups go while it is queued: its kind ("P" PUBLISH, "S" SPUBLISH, "K"
-- RPUSH to a key) and its name (see send). Every requester names one.
-- Otherwise nil and the reason.
local function inbox_arg(i)
  local v = ARGV[i]
  if type(v) ~= 'string' then return nil, 'is missing' end
  local kind = string.sub(v, 1, 1)
  if #v < 2 or #v > 1024 or not string.find('PSK', kind, 1, true) then
    return nil, 'must be P, S or K and a name of 1 to 1023 bytes'
  end
  if kind == 'S' and (tonumber(redis.REDIS_VERSION_NUM) or 0) < 0x070000 then
    return nil, 'SPUBLISH needs Redis 7.0 or newer'
  end
  return v
end

-- [slow path]
-- The helpers below are created only when a script gets past its fast
-- path (see package scripts: every local function is a closure made anew
-- on each call).

-- holder_ttl returns the remaining TTL of the held lock key, in ms: at
-- least 1, as PTTL is 0 in the last millisecond of a lease.
local function holder_ttl(lock)
  local t = redis.call('PTTL', lock)
  if t < 1 then t = 1 end
  return t
end

-- head_of returns the token with the lowest ticket, or false.
local function head_of(q)
  local h = redis.call('ZRANGE', q, 0, 0)
  return h[1] or false
end

-- The waiter record w is a hash: waiter token -> "<lease ttl ms>:<inbox>",
-- the lease TTL the waiter asked for and where its wake-ups go (see
-- inbox_arg). A token has a record exactly while it is in the queue: the
-- enqueue writes it, and every step that removes a token from q removes
-- its record too.

-- waiter_put records a queued waiter's lease TTL (ms) and inbox.
local function waiter_put(w, token, ttl, inbox)
  redis.call('HSET', w, token, int(ttl) .. ':' .. (inbox or ''))
end

-- waiter_del removes the records of the tokens in list.
local function waiter_del(w, list)
  if #list > 0 then redis.call('HDEL', w, unpack(list)) end
end

-- waiter_get returns a waiter's lease TTL (ms) and inbox, or nil when it
-- has no record (or a malformed one).
local function waiter_get(w, token)
  local v = redis.call('HGET', w, token)
  if not v then return nil end
  local ttl, inbox = string.match(v, '^([1-9][0-9]*):(.*)$')
  if not ttl then return nil end
  return tonumber(ttl), inbox
end

-- unqueue removes token from the queue, its deadline and its record.
local function unqueue(q, d, w, token)
  local n = redis.call('ZREM', q, token)
  redis.call('ZREM', d, token)
  redis.call('HDEL', w, token)
  return n
end

-- send delivers payload, a wake-up of the waiter head of the id whose
-- lock key is lock, where head's record says its process listens: to its
-- inbox, as "<n>:<tag><payload>" (tag: the hash tag of the id's keys, n
-- its length), by PUBLISH or SPUBLISH of the inbox channel, or by RPUSH to
-- the inbox key. A wake-up the inbox refuses (a key of another type, a
-- channel of another slot) is dropped, as a lost message is: the waiter
-- learns from its heartbeat. A head with no record (none is queued
-- without one) is sent nothing.
-- inbox, when given, is head's (read from its record already).
local function send(lock, w, head, payload, inbox)
  if not inbox then
    local _
    _, inbox = waiter_get(w, head)
  end
  local tag = string.match(lock, '{([^}]*)}')
  if not inbox or #inbox < 2 or not tag then return end
  local kind, name = string.sub(inbox, 1, 1), string.sub(inbox, 2)
  local msg = #tag .. ':' .. tag .. payload
  if kind == 'K' then
    if type(redis.pcall('RPUSH', name, msg)) == 'number' then
      redis.call('PEXPIRE', name, INBOX_TTL)
    end
  elseif kind == 'S' then
    redis.pcall('SPUBLISH', name, msg)
  elseif kind == 'P' then
    redis.pcall('PUBLISH', name, msg)
  end
end

-- wake_payload builds the payload of every wake-up, for the waiter head
-- (the one place that does; internal/redis/wakeup parses it):
--   ":<token>"  re-check now;
--   "<holder_ttl>:<token>"  the token became the head while the lock is
--     held, and the lease ends in holder_ttl ms;
--   "g<fence>,<ttl>,<us>:<token>"  the step granted the lock to the token
--     (a hand-off, grant = {fence, ttl, us}): its fence, its lease TTL in
--     ms, and the server's clock in µs at the grant.
local function wake_payload(head, holder_ttl, grant)
  if grant then
    return 'g' .. int(grant[1]) .. ',' .. int(grant[2]) .. ',' .. int(grant[3]) .. ':' .. head
  end
  local ttl = ''
  if holder_ttl then ttl = int(holder_ttl) end
  return ttl .. ':' .. head
end

-- wake sends a wake-up for the waiter head where its process listens (see
-- send and wake_payload).
local function wake(lock, w, head, holder_ttl)
  send(lock, w, head, wake_payload(head, holder_ttl))
end

-- purge removes the waiters whose deadline has passed (deadline <= now),
-- at most limit of them, from both sets and the records, and returns how
-- many it removed.
local function purge(q, d, w, now, limit)
  local dead = redis.call('ZRANGEBYSCORE', d, '-inf', now, 'LIMIT', 0, limit)
  if #dead > 0 then
    redis.call('ZREM', d, unpack(dead))
    redis.call('ZREM', q, unpack(dead))
    waiter_del(w, dead)
  end
  return #dead
end

-- QUEUE_TTL_FACTOR times a waiter TTL is how long the queue keys live at
-- least after an enqueue or a heartbeat: past every deadline they hold.
local QUEUE_TTL_FACTOR = 3

-- hand_off grants the free lock to head, the head of the queue, in the
-- step that found it free (direct hand-off), if head is live at us (the
-- server's clock in µs) and its record holds the lease TTL it asked for.
-- The grant is what acquire's is (SET PX, next_fence), and removes head's
-- entry; head's wake-up carries it (see wake_payload), and the next head,
-- unless it is self (the step's requester, told by its reply), is told
-- the new lease's TTL. It returns true when it granted.
local function hand_off(lock, q, d, f, w, head, us, self)
  local ttl, inbox = waiter_get(w, head)
  local deadline = tonumber(redis.call('ZSCORE', d, head))
  if not ttl or not deadline or deadline <= math.floor(us / 1000) then return false end
  local fence = next_fence(f, us)
  redis.call('SET', lock, lock_value(fence, head), 'PX', int(ttl))
  send(lock, w, head, wake_payload(head, nil, {fence, ttl, us}), inbox)
  unqueue(q, d, w, head)
  local next = head_of(q)
  if next and next ~= self then wake(lock, w, next, ttl) end
  return true
end

-- wake_live_head purges the expired waiters (at most limit) and hands the
-- free lock off to the head that is left, if any, or wakes it (a head
-- that cannot take a hand-off): a lock just freed goes to a live waiter.
local function wake_live_head(lock, q, d, f, w, limit)
  local us = now_us()
  purge(q, d, w, math.floor(us / 1000), limit)
  local head = head_of(q)
  if head and not hand_off(lock, q, d, f, w, head, us) then
    wake(lock, w, head)
  end
end

-- keep_queue makes the queue keys (q, d and the records w) live at least
-- ttl more milliseconds; it never shortens a TTL (another process may use
-- a longer waiter TTL). w is checked on its own: its first record may be
-- newer than the queue's TTL.
local function keep_queue(q, d, w, ttl)
  if redis.call('PTTL', q) < ttl then
    redis.call('PEXPIRE', q, ttl)
    redis.call('PEXPIRE', d, ttl)
  end
  if redis.call('PTTL', w) < ttl then
    redis.call('PEXPIRE', w, ttl)
  end
end
