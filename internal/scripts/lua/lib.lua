-- lib.lua: helpers shared by every script. The scripts package prepends
-- this file to each script's own file, so every script is self-contained
-- on the server. Only locals: Redis forbids globals in scripts.

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

-- int formats a Lua number as an integer argument: redis.call would
-- format it with 14 significant digits, which rounds a microsecond clock.
local function int(x)
  return string.format('%.0f', x)
end

-- publish_cmd returns ARGV[i] when it names the command that carries
-- wake-ups: PUBLISH (classic pub/sub; on Redis Cluster every node forwards
-- it to every other node) or SPUBLISH (sharded pub/sub, Redis 7.0 or newer:
-- only the node that serves the channel's slot, which is the slot of the
-- id's keys, delivers it). Otherwise it returns nil and the reason, before
-- the script writes anything.
local function publish_cmd(i)
  local c = ARGV[i]
  if c == 'PUBLISH' then return c end
  if c == 'SPUBLISH' then
    if (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x070000 then return c end
    return nil, 'SPUBLISH needs Redis 7.0 or newer'
  end
  return nil, 'must be PUBLISH or SPUBLISH'
end

-- head_of returns the token with the lowest ticket, or false.
local function head_of(q)
  local h = redis.call('ZRANGE', q, 0, 0)
  return h[1] or false
end

-- purge removes the waiters whose deadline has passed (deadline <= now),
-- at most limit of them, from both sets, and returns how many it removed.
local function purge(q, d, now, limit)
  local dead = redis.call('ZRANGEBYSCORE', d, '-inf', now, 'LIMIT', 0, limit)
  if #dead > 0 then
    redis.call('ZREM', d, unpack(dead))
    redis.call('ZREM', q, unpack(dead))
  end
  return #dead
end

-- QUEUE_TTL_FACTOR times a waiter TTL is how long the queue keys live at
-- least after an enqueue or a heartbeat: past every deadline they hold.
local QUEUE_TTL_FACTOR = 3

-- keep_queue makes both queue keys live at least ttl more milliseconds; it
-- never shortens their TTL (another process may use a longer waiter TTL).
local function keep_queue(q, d, ttl)
  if redis.call('PTTL', q) < ttl then
    redis.call('PEXPIRE', q, ttl)
    redis.call('PEXPIRE', d, ttl)
  end
end

-- FENCE_IDLE is how long, in ms, an id's fence key outlives its last grant
-- (or its lease, when that is longer): one hour. While it lives, fences of
-- the id strictly increase even if the server's clock steps back.
local FENCE_IDLE = 3600000

-- SET_GET reports whether SET takes the GET option in a script here
-- (Redis 6.2 does, but only Redis 7.0 tells its version to scripts).
local SET_GET = (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x070000

-- fence_of parses a fence key's value: "<fence>", then a mark per release
-- since the last grant but one, ":<length>:<token>" (a grant keeps only the
-- last mark). It returns the fence (0 for a missing or foreign value) and
-- the last mark's token, or nil.
local function fence_of(v)
  if type(v) ~= 'string' then return 0, nil end
  local f, pos = string.match(v, '^(%d+)()')
  if not f then return 0, nil end
  local tok = nil
  while true do
    local len, at = string.match(v, '^:(%d+):()', pos)
    if not len then break end
    tok = string.sub(v, at, at + tonumber(len) - 1)
    pos = at + tonumber(len)
  end
  return tonumber(f), tok
end

-- mark returns the fence key's mark of a release by token.
local function mark(token)
  return ':' .. #token .. ':' .. token
end

-- read_fence returns the last fence recorded in the fence key n and the
-- token of the release recorded after it, if any. A hash (the counters of
-- an older version of these scripts) yields its "fence" field.
local function read_fence(n)
  local v = redis.pcall('GET', n)
  if type(v) == 'table' and v.err then
    return tonumber(redis.call('HGET', n, 'fence')) or 0, nil
  end
  return fence_of(v)
end

-- next_fence records and returns the id's next fence: the server's clock
-- in microseconds, or the last fence + 1 when that is not below it. The
-- fence key n keeps it for keep ms (FENCE_IDLE, or the lease when that is
-- longer), and keeps the mark of the last release (see release.lua). us,
-- when given, is the clock already read by this step. Cost: TIME and one
-- SET ... GET, one APPEND more after a release, one SET more when the
-- clock is not past the last fence (rare); GET and SET before Redis 7.
local function next_fence(n, keep, us)
  local f = us or now_us()
  if SET_GET then
    local old = redis.pcall('SET', n, int(f), 'PX', keep, 'GET')
    if type(old) ~= 'table' then -- the old value, or false: no key
      local last, rel = fence_of(old)
      if last >= f then
        f = last + 1
        redis.call('SET', n, int(f), 'PX', keep)
      end
      if rel then redis.call('APPEND', n, mark(rel)) end
      return f
    end
    -- An error: n is an older version's hash; SET GET wrote nothing.
  end
  local last, rel = read_fence(n)
  if last >= f then f = last + 1 end
  local v = int(f)
  if rel then v = v .. mark(rel) end
  redis.call('SET', n, v, 'PX', keep)
  return f
end

-- fence_keep returns how long the fence key must live after a grant or
-- an extend with lease TTL ttl (ms): FENCE_IDLE, or ttl when longer, so
-- that the key outlives the lease and a retried grant finds its fence.
local function fence_keep(ttl)
  if ttl > FENCE_IDLE then return ttl end
  return FENCE_IDLE
end

-- flag returns ARGV[i] as a boolean: "1" is true, "0" or no argument is
-- false; anything else is nil (invalid).
local function flag(i)
  local v = ARGV[i]
  if v == nil or v == '0' then return false end
  if v == '1' then return true end
  return nil
end
