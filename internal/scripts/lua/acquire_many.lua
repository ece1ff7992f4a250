-- acquire_many: acquire (see acquire_step) for many ids in one call, each
-- with its own token, TTLs and wait flag, in order. The ids of one call
-- must share a hash slot on Redis Cluster; a single server takes any. One
-- id's full queue does not stop the others.
--
-- KEYS[5i-4..5i] lock, queue, deadlines, fence, waiter records of the i-th id
-- ARGV[1] max waiters per id
-- ARGV[2] purge limit: most expired waiters removed per id
-- ARGV[3] wake-up command: PUBLISH or SPUBLISH (see publish_cmd)
-- ARGV[5i-1..5i+3] of the i-th id: token, lease TTL in ms, wait ("0"/"1"),
--         waiter TTL in ms (read only when wait is "1"), wake-up channel
-- ARGV[5n+4] (optional) the requesters' inbox (see inbox_arg): the ids of
--         one call share a hash slot on Redis Cluster, and so the inbox
--         (one per slot) of their process
--
-- Reply: 8 integers per id, in order: status (0 done, 1 the queue was full:
-- nothing done for this id) and acquire's 7 reply values. Error reply:
-- LOCKBADARG (for any id; nothing is written then).
local max_waiters = posint(1)
if not max_waiters then return bad_arg('max_waiters', 'must be a positive integer') end
local limit = posint(2, 100000)
if not limit then return bad_arg('purge_limit', 'must be an integer from 1 to 100000') end
local publish, why = publish_cmd(3)
if not publish then return bad_arg('publish', why) end
local n = #KEYS / 5
if n < 1 or n ~= math.floor(n) or (#ARGV ~= 3 + 5 * n and #ARGV ~= 4 + 5 * n) then
  return bad_arg('keys', 'must be 5 keys and 5 arguments per id, for at least one id')
end

local reqs = {}
for i = 1, n do
  local a = 5 * i - 1
  local token = ARGV[a]
  if not valid_token(token) then return bad_arg('token', 'must be 1 to 128 bytes') end
  local ttl = posint(a + 1)
  if not ttl then return bad_arg('ttl', 'must be a positive integer of milliseconds') end
  local wait = ARGV[a + 2]
  if wait ~= '0' and wait ~= '1' then return bad_arg('wait', 'must be 0 or 1') end
  local wttl = 0
  if wait == '1' then
    wttl = posint(a + 3)
    if not wttl then return bad_arg('waiter_ttl', 'must be a positive integer of milliseconds') end
  end
  local channel = ARGV[a + 4]
  if #channel == 0 then return bad_arg('channel', 'must not be empty') end
  reqs[i] = {token, ttl, wait == '1', wttl, channel}
end
local inbox, bad = inbox_arg(5 * n + 4)
if not inbox then return bad_arg('inbox', bad) end

local out = {}
for i = 1, n do
  local k, r = 5 * i, reqs[i]
  local g = acquire_step(KEYS[k - 4], KEYS[k - 3], KEYS[k - 2], KEYS[k - 1], KEYS[k], r[1], r[2], r[3], r[4],
    max_waiters, limit, r[5], publish, inbox)
  if g then
    out[#out + 1] = 0
    for j = 1, 7 do out[#out + 1] = g[j] end
  else
    out[#out + 1] = 1
    for _ = 1, 7 do out[#out + 1] = 0 end
  end
end
return out
