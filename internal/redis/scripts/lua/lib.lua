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

-- The waiter record w is a hash: waiter token ->
-- "<deadline ms>:<lease ttl ms>:<inbox>", the waiter's deadline (ms of the
-- server's clock: it is dead once the clock reaches it), the lease TTL it
-- asked for and where its wake-ups go (see inbox_arg); a waiter of a
-- shared id (see shared.lua) adds the permits it asks for to the TTL:
-- "<deadline>:<ttl>/<permits>:<inbox>". A token has a
-- record exactly while it is in the queue q (a zset: token -> ticket): the
-- enqueue writes both, and every step that removes a token from q removes
-- its record too. An entry of q without a well-formed record is dead.
-- The deadlines have no index of their own: the dead entries go when they
-- reach the head (heads), in a bounded sweep of the queue's first entries
-- when it is full (sweep), and with the queue keys' TTL.

-- waiter_value returns the record of a waiter with deadline, lease TTL
-- (ms), inbox and, on a shared id, permits (0 or nil on a mutex).
local function waiter_value(deadline, ttl, inbox, permits)
  local p = ''
  if permits and permits > 0 then p = '/' .. int(permits) end
  return int(deadline) .. ':' .. int(ttl) .. p .. ':' .. (inbox or '')
end

-- waiter_put records a queued waiter (see waiter_value).
local function waiter_put(w, token, deadline, ttl, inbox, permits)
  redis.call('HSET', w, token, waiter_value(deadline, ttl, inbox, permits))
end

-- waiter_parse returns the deadline, lease TTL, inbox and permits (0 on a
-- mutex) of a waiter record v, or nil when v is false or malformed.
local function waiter_parse(v)
  if not v then return nil end
  local deadline, ttl, p, inbox = string.match(v, '^([0-9]+):([1-9][0-9]*)/?([0-9]*):(.*)$')
  if not deadline then return nil end
  return tonumber(deadline), tonumber(ttl), inbox, tonumber(p) or 0
end

-- unqueue removes token from the queue and its record.
local function unqueue(q, w, token)
  local n = redis.call('ZREM', q, token)
  redis.call('HDEL', w, token)
  return n
end

-- drop removes the tokens in list from the queue and their records.
local function drop(q, w, list)
  if #list > 0 then
    redis.call('ZREM', q, unpack(list))
    redis.call('HDEL', w, unpack(list))
  end
end

-- send delivers payload, a wake-up of a waiter, to inbox, where the
-- waiter's record says its process listens, for the id whose lock key is
-- lock: as "<n>:<tag><payload>" (tag: the hash tag of the id's keys, n its
-- length), by PUBLISH or SPUBLISH of the inbox channel, or by RPUSH to the
-- inbox key. A wake-up the inbox refuses (a key of another type, a channel
-- of another slot) is dropped, as a lost message is: the waiter learns from
-- its heartbeat. A waiter with no inbox (no record) is sent nothing.
local function send(lock, inbox, payload)
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

-- wake sends a wake-up to the waiter token at inbox (see send and
-- wake_payload); holder_ttl, when given, is the lease's remaining TTL.
local function wake(lock, token, inbox, holder_ttl)
  send(lock, inbox, wake_payload(token, holder_ttl))
end

-- sweep removes the dead entries (deadline <= now, or no record) among the
-- entries of q from rank from (0: the head) on, looking at limit + from
-- entries at most, so that it removes at most limit, and returns how many
-- it removed. It is the bounded sweep: of a full queue's first entries,
-- and of the entries behind a waiter that heartbeats (so each dead entry
-- goes within a few heartbeats of the live waiter ahead of it, wherever it
-- stands; a dead head goes by heads).
local function sweep(q, w, now, limit, from)
  from = from or 0
  local e = redis.call('ZRANGE', q, from, from + limit - 1)
  if #e == 0 then return 0 end
  local recs = redis.call('HMGET', w, unpack(e))
  local dead = {}
  for i = 1, #e do
    local deadline = waiter_parse(recs[i])
    if not deadline or deadline <= now then dead[#dead + 1] = e[i] end
  end
  drop(q, w, dead)
  return #dead
end

-- heads returns the live head of q at now (its deadline after now) and
-- the entry after it, removing the dead entries ahead of it (the lazy
-- purge: at most limit of them, then a bounded sweep). It returns:
--   head, its lease TTL, its inbox, next (or false), next's inbox, removed,
--   the head's permits (0 on a mutex), next's permits when it is live
--   (else nil)
-- where removed says that it removed an entry; head is nil when the queue
-- holds no live entry, and false when the purge reached its limit before
-- it found one (dead entries are left: the lock is not for the requester
-- of this step either). first, when given, is what ZRANGE q 0 1 replied
-- (the step read it already). Cost: ZRANGE and HMGET of the first two entries;
-- ZREM and HDEL per dead head, and a sweep (ZRANGE, HMGET, ZREM, HDEL)
-- after the first two dead ones.
local function heads(q, w, now, limit, first)
  local removed = 0
  while true do
    local e = first or redis.call('ZRANGE', q, 0, 1)
    first = nil
    if #e == 0 then return nil, nil, nil, false, nil, removed > 0 end
    local recs = redis.call('HMGET', w, unpack(e))
    local deadline, ttl, inbox, permits = waiter_parse(recs[1])
    if deadline and deadline > now then
      local next, next_inbox, next_permits = e[2] or false, nil, nil
      if next then
        local d, _, i, p = waiter_parse(recs[2])
        next_inbox = i
        if d and d > now then next_permits = p end
      end
      return e[1], ttl, inbox, next, next_inbox, removed > 0, permits, next_permits
    end
    if removed >= limit then return false, nil, nil, false, nil, true end
    if removed < 2 then
      unqueue(q, w, e[1])
      removed = removed + 1
    else
      -- Many dead heads (processes gone together): one sweep of the rest
      -- of the limit instead of a round per entry.
      local n = sweep(q, w, now, limit - removed)
      removed = removed + n
      if n == 0 then return false, nil, nil, false, nil, true end
    end
  end
end

-- QUEUE_TTL_FACTOR times a waiter TTL is how long the queue keys live
-- after an enqueue or a heartbeat that sets their TTL (see keep_queue).
local QUEUE_TTL_FACTOR = 3

-- keep_queue makes the queue keys (q and the records w) live at least two
-- thirds of ttl more milliseconds (ttl is QUEUE_TTL_FACTOR waiter TTLs, so
-- past every deadline they hold): it sets both TTLs to ttl when q's is
-- below that, so that most steps pay one PTTL. It never shortens a TTL
-- (another process may use a longer waiter TTL). created says that this
-- step created q (and so w), which then have no TTL yet. Both keys always
-- get the same TTL.
local function keep_queue(q, w, ttl, created)
  if created or redis.call('PTTL', q) < ttl * 2 / 3 then
    redis.call('PEXPIRE', q, ttl)
    redis.call('PEXPIRE', w, ttl)
  end
end

-- hand_off grants the free lock to head, the live head of the queue (see
-- heads; ttl and inbox from its record), in the step that found it free
-- (direct hand-off) at us (the server's clock in µs). The grant is what
-- acquire's is (SET PX, next_fence), and removes head's entry; head's
-- wake-up carries it (see wake_payload), and next, the entry after head
-- (or false), unless it is self (the step's requester, told by its
-- reply), is told the new lease's TTL.
local function hand_off(lock, q, f, w, head, ttl, inbox, next, next_inbox, us, self)
  local fence = next_fence(f, us)
  redis.call('SET', lock, lock_value(fence, head), 'PX', int(ttl))
  send(lock, inbox, wake_payload(head, nil, {fence, ttl, us}))
  unqueue(q, w, head)
  if next and next ~= self then wake(lock, next, next_inbox, ttl) end
end

-- wake_live_head hands the free lock off to the live head of the queue,
-- if any (purging the dead heads, at most limit): a lock just freed goes
-- to a live waiter. first is as for heads. It returns true when it
-- granted.
local function wake_live_head(lock, q, f, w, limit, first)
  local us = now_us()
  local head, ttl, inbox, next, next_inbox = heads(q, w, math.floor(us / 1000), limit, first)
  if not head then return false end
  hand_off(lock, q, f, w, head, ttl, inbox, next, next_inbox, us)
  return true
end
