-- release: compare-and-delete of the lock, then hand it off to the live
-- head (backend checklist items 3 and 7, backend.HandOffer).
--
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] fence key (for a hand-off),
-- KEYS[4] waiter records, KEYS[5] the release record of the caller's
-- current period, KEYS[6] that of the period before
-- ARGV[1] token
-- ARGV[2] purge limit
-- ARGV[3] the Backend's pub/sub command: PUBLISH or SPUBLISH (see publish_cmd)
-- ARGV[4] the release's mark: a digest of the id and the token (1 to 32
--         bytes, see keys.ReleaseMark)
--
-- A release adds its mark to the release record of the period (a set per
-- hash slot and period of the caller's clock, see package keys), which
-- lives RELEASE_KEEP after its last write: the same release sent again (a
-- client that resends a command whose reply was lost, as go-redis does)
-- within a period finds its mark in one of the two records and is
-- answered 1 instead of LOCKNOTHELD, whatever grants and releases of the
-- id came in between: the first one did release. It never touches a lock
-- another token holds, and writes no key without a TTL.
--
-- Reply: 1. Error replies: LOCKNOTHELD (nothing changed), LOCKBADARG.
local token = ARGV[1]
if not valid_token(token) then return bad_arg('token', 'must be 1 to 128 bytes') end
local limit, bad = wake_args(2)
if not limit then return bad end
local mark = ARGV[4]
if type(mark) ~= 'string' or #mark < 1 or #mark > 32 then return bad_arg('mark', 'must be 1 to 32 bytes') end

-- answer is the release's reply, for the mutex and a shared id alike:
-- when the token released, its mark goes in the period's record and the
-- reply is 1; otherwise 1 when the mark is in either record (a resent
-- release), else LOCKNOTHELD.
local function answer(released)
  if released then
    redis.call('SADD', KEYS[5], mark)
    redis.call('PEXPIRE', KEYS[5], RELEASE_KEEP)
    return 1
  end
  if redis.call('SISMEMBER', KEYS[5], mark) == 1 or redis.call('SISMEMBER', KEYS[6], mark) == 1 then
    return 1
  end
  return fail('LOCKNOTHELD', 'the token does not hold the lock')
end

local lock, q = KEYS[1], KEYS[2]
-- A shared id's lock key is a hash (see shared.lua): GET answers
-- WRONGTYPE, and the slow path releases the token's lease of it.
local v = redis.pcall('GET', lock)
local shared = type(v) == 'table'
local first
if not shared then
  if lock_owner(v) ~= token then return answer(false) end
  answer(true)
  -- Fast path: no queue, nobody to hand the lock to.
  first = redis.call('ZRANGE', q, 0, 1)
  if #first == 0 then
    redis.call('DEL', lock)
    return 1
  end
end
-- [slow path]
if shared then
  return answer(shared_release(lock, q, KEYS[3], KEYS[4], token, limit))
end
-- Hand off to a live head, not one that stopped heartbeating; a hand-off
-- overwrites the lock key.
if not wake_live_head(lock, q, KEYS[3], KEYS[4], limit, first) then
  redis.call('DEL', lock)
end
return 1
