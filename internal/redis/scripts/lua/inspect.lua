-- inspect: a read-only view of one id, for operators. It writes nothing
-- (no purge, no expiry, no wake-up) and never replies a token, only the
-- first 8 hex digits of its SHA-1 (backend.Fingerprint).
--
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] waiter records (see waiter_put)
-- ARGV[1] max waiters to list: 0 to 100
-- ARGV[2] scan limit: most queue entries looked at (dead ones are skipped)
--
-- The holder's fence is in the lock key's value (see lock_value).
--
-- Reply: strings {held (0/1), fence, ttl_ms, holder_fingerprint,
-- queue_len, capacity, holders, then per holder (of a shared id, see
-- shared.lua, in fence order): fence, ttl_ms, fingerprint, permits; then
-- per listed waiter: ticket, deadline_left_ms, fingerprint, permits}.
-- capacity and holders are 0 for a mutex. On a shared id, fence, ttl_ms
-- and holder_fingerprint are the lease granted last's. queue_len counts
-- the live waiters (deadline after now): it reads every waiter record
-- (HVALS), at most the id's max waiters.
-- Error reply: LOCKBADARG.
local maxw = ARGV[1]
if maxw == '0' then
  maxw = 0
else
  maxw = posint(1, 100)
  if not maxw then return bad_arg('max_waiters', 'must be an integer from 0 to 100') end
end
local scan = posint(2, 100000)
if not scan then return bad_arg('scan_limit', 'must be an integer from 1 to 100000') end

local lock, q, w = KEYS[1], KEYS[2], KEYS[3]
local function fp(tok) return string.sub(redis.sha1hex(tok), 1, 8) end

local now = now_ms()
local out = {'0', '0', '0', ''}
local holders = {}
local cap = 0
local v = redis.pcall('GET', lock)
if type(v) == 'table' then
  -- A shared id: its live leases, read only.
  local st = shared_state(lock, redis.call('HGETALL', lock), now, true)
  cap = st.cap
  for tok, h in pairs(st.holders) do holders[#holders + 1] = {h[2], h[1] - now, fp(tok), h[3]} end
  table.sort(holders, function(a, b) return a[1] < b[1] end)
  local last = holders[#holders]
  if last then out = {'1', int(last[1]), int(last[2]), last[3]} end
elseif v then
  local ttl = redis.call('PTTL', lock)
  if ttl < 0 then ttl = 0 end
  local holder = lock_owner(v)
  if type(holder) ~= 'string' then holder = v end
  out = {'1', lock_fence(v), string.format('%d', ttl), fp(holder)}
end
local live = 0
for _, rec in ipairs(redis.call('HVALS', w)) do
  local deadline = waiter_parse(rec)
  if deadline and deadline > now then live = live + 1 end
end
out[5] = string.format('%d', live)
out[6] = int(cap)
out[7] = int(#holders)
for _, h in ipairs(holders) do
  out[#out + 1] = int(h[1])
  out[#out + 1] = int(h[2])
  out[#out + 1] = h[3]
  out[#out + 1] = int(h[4])
end

if maxw > 0 then
  local n = 0
  local entries = redis.call('ZRANGE', q, 0, scan - 1, 'WITHSCORES')
  local toks = {}
  for i = 1, #entries, 2 do toks[#toks + 1] = entries[i] end
  local recs = {}
  if #toks > 0 then recs = redis.call('HMGET', w, unpack(toks)) end
  for i = 1, #entries, 2 do
    local tok = entries[i]
    local deadline, _, _, permits = waiter_parse(recs[(i + 1) / 2])
    if deadline and deadline > now then
      out[#out + 1] = entries[i + 1]
      out[#out + 1] = string.format('%d', deadline - now)
      out[#out + 1] = fp(tok)
      out[#out + 1] = int(permits)
      n = n + 1
      if n >= maxw then break end
    end
  end
end
return out
