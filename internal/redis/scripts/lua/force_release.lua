-- force_release: an operator's release of whoever holds the lock, only if
-- the holder's fence is the one given, so that it can never hit a newer
-- holder; then hand the lock off to the live head, as release does.
--
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] fence key (for a hand-off),
-- KEYS[4] waiter records
-- ARGV[1] the holder's fence, as inspect reported it
-- ARGV[2] purge limit
-- ARGV[3] the pub/sub command: PUBLISH or SPUBLISH (see publish_cmd)
--
-- The holder's fence is in the lock key's value (see lock_value). It does
-- not record a release: the holder's own Release afterwards answers
-- LOCKNOTHELD, as it should.
--
-- Reply: 1. Error replies: LOCKNOTHELD (the id is not held, or by another
-- fence; nothing changed), LOCKBADARG.
-- The fence is compared as a string (lock_value writes it in this canonical
-- form), so it may have more digits than a Lua number holds exactly.
local fence = ARGV[1]
if type(fence) ~= 'string' or #fence > 20 or not string.find(fence, '^[1-9][0-9]*$') then
  return bad_arg('fence', 'must be a positive integer')
end
local limit, bad = wake_args(2)
if not limit then return bad end

local lock, q, f, w = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local v = redis.call('GET', lock)
if not v then
  return fail('LOCKNOTHELD', 'the id is not held')
end
local current = lock_fence(v)
if current ~= fence then
  return fail('LOCKNOTHELD', 'the holder has fence ' .. current .. ', not ' .. fence)
end
-- Hand off to a live head, not one that stopped heartbeating; a hand-off
-- overwrites the lock key.
if not wake_live_head(lock, q, f, w, limit) then
  redis.call('DEL', lock)
end
return 1
