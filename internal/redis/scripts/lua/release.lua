-- release: compare-and-delete of the lock, then hand it off to the live
-- head, or wake it (backend checklist items 3 and 7, backend.HandOffer).
--
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] deadlines, KEYS[4] fence,
-- KEYS[5] waiter records
-- ARGV[1] token
-- ARGV[2] purge limit
-- ARGV[3] the Backend's pub/sub command: PUBLISH or SPUBLISH (see publish_cmd)
--
-- A release records its token in the fence key (field "rel"), so that
-- the same release sent again (a client that resends a command whose reply
-- was lost, as go-redis does) is answered 1 instead of LOCKNOTHELD: the
-- first one did release. The record lives until the next release, or as
-- long as the fence key. It never touches a lock another token holds, and
-- writes no key without a TTL.
--
-- Reply: 1. Error replies: LOCKNOTHELD (nothing changed), LOCKBADARG.
local token = ARGV[1]
if not valid_token(token) then return bad_arg('token', 'must be 1 to 128 bytes') end
local limit, bad = wake_args(2)
if not limit then return bad end

local lock, q, d, n, w = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if redis.call('GET', lock) ~= token then
  if redis.call('HGET', n, 'rel') == token then return 1 end
  return fail('LOCKNOTHELD', 'the token does not hold the lock')
end
redis.call('DEL', lock)
-- Record the release. A new field may mean a new key (the fence key
-- expired under a lease the extends did not keep it for): give it a TTL.
if redis.call('HSET', n, 'rel', token) == 1 and redis.call('PTTL', n) < 0 then
  redis.call('PEXPIRE', n, FENCE_IDLE)
end
-- Fast path: no queue key, nobody to wake.
if redis.call('EXISTS', q) == 0 then return 1 end
-- [slow path]
-- Hand off to (or wake) a live head, not one that stopped heartbeating.
wake_live_head(lock, q, d, n, w, limit)
return 1
