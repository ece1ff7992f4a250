-- acquire_many: acquire (try_fast, then acquire_step) for many ids in one
-- call, each with its own token, TTLs and wait flag, in order. The ids of
-- one call must share a hash slot on Redis Cluster; a single server takes
-- any. One id's full queue does not stop the others.
--
-- KEYS[4i-3..4i] lock, queue, fence key (of its hash slot), waiter
--         records of the i-th id
-- ARGV[1] max waiters per id
-- ARGV[2] purge limit: most expired waiters removed per id
-- ARGV[3] the Backend's pub/sub command: PUBLISH or SPUBLISH (see publish_cmd)
-- ARGV[4] the requesters' inbox (see inbox_arg): the ids of one call share
--         a hash slot on Redis Cluster, and so the inbox (one per slot) of
--         their process
-- ARGV[4i+1..4i+4] of the i-th id: token, lease TTL in ms, wait ("0"/"1"),
--         waiter TTL in ms (read only when wait is "1")
--
-- Reply: 8 integers per id, in order: status (0 done, 1 the queue was full,
-- 2 the id is a shared one in use: nothing done for this id) and acquire's
-- 7 reply values. Error reply:
-- LOCKBADARG (for any id; nothing is written then).
local max_waiters = posint(1)
if not max_waiters then return bad_arg('max_waiters', 'must be a positive integer') end
local limit = posint(2, 100000)
if not limit then return bad_arg('purge_limit', 'must be an integer from 1 to 100000') end
local publish, why = publish_cmd(3)
if not publish then return bad_arg('publish', why) end
local inbox, bad = inbox_arg(4)
if not inbox then return bad_arg('inbox', bad) end
local n = #KEYS / 4
if n < 1 or n ~= math.floor(n) or #ARGV ~= 4 + 4 * n then
  return bad_arg('keys', 'must be 4 keys and 4 arguments per id, for at least one id')
end

for i = 1, n do
  local a = 4 * i + 1
  if not valid_token(ARGV[a]) then return bad_arg('token', 'must be 1 to 128 bytes') end
  if not posint(a + 1) then return bad_arg('ttl', 'must be a positive integer of milliseconds') end
  local wait = ARGV[a + 2]
  if wait ~= '0' and wait ~= '1' then return bad_arg('wait', 'must be 0 or 1') end
  if wait == '1' and not posint(a + 3) then
    return bad_arg('waiter_ttl', 'must be a positive integer of milliseconds')
  end
end

-- One TIME for the whole call: every fence it grants is at least this
-- clock reading, which is past every fence granted before the call. Each
-- fence key is read once and written once, at the end (fences).
local us = now_us()
fences = {}
-- One EXISTS for all the queue keys. When none exists (ids nobody waits
-- for), try_fast skips its EXISTS for an id this call has not seen before:
-- only an earlier step of the call could have made its queue. A free id is
-- then one SET NX PX.
local qs = {}
for i = 1, n do
  qs[i] = KEYS[4 * i - 2]
end
local no_q = redis.call('EXISTS', unpack(qs)) == 0
local seen = {}
local out, o = {}, 0
for i = 1, n do
  local k, a = 4 * i, 4 * i + 1
  local token, ttl = ARGV[a], tonumber(ARGV[a + 1])
  local lock = KEYS[k - 3]
  local new = not seen[lock]
  seen[lock] = true
  local fence = try_fast(lock, KEYS[k - 2], KEYS[k - 1], token, ARGV[a + 1], us, no_q and new)
  if fence then
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 0, 1, fence, ttl
    for j = 5, 8 do out[o + j] = 0 end
  else
    local wait = ARGV[a + 2] == '1'
    local g, _, shared = acquire_step(lock, KEYS[k - 2], KEYS[k - 1], KEYS[k], token, ttl, wait,
      wait and tonumber(ARGV[a + 3]) or 0, max_waiters, limit, inbox)
    out[o + 1] = 0
    if shared then
      out[o + 1] = 2 -- the id is a shared one in use
    elseif not g then
      out[o + 1] = 1 -- the queue was full
    end
    for j = 1, 7 do out[o + 1 + j] = g and g[j] or 0 end
  end
  o = o + 8
end
fences_flush()
return out
