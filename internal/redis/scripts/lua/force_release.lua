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
-- On a shared id (see shared.lua) it ends the one lease with that fence.
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
local v = redis.pcall('GET', lock)
if type(v) == 'table' then
  -- A shared id (see shared.lua): end the lease with that fence, and hand
  -- off the permits it frees.
  local us = now_us()
  local now = math.floor(us / 1000)
  local st = shared_load(lock, now)
  for tok, h in pairs(st.holders) do
    if int(h[2]) == fence then
      shared_drop(lock, st, tok)
      shared_hand_off(lock, q, f, w, st, us, limit)
      shared_touch(lock, q, st, now)
      return 1
    end
  end
  return fail('LOCKNOTHELD', 'no lease of the shared id has fence ' .. fence)
end
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
