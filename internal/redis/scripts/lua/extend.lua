-- extend: compare-and-set of the lease's expiry to now+ttl; never
-- re-creates an expired lock, keeps the fence (backend checklist item 4).
--
-- KEYS[1] lock
-- ARGV[1] token
-- ARGV[2] lease TTL in ms
--
-- Reply: 1. Error replies: LOCKNOTHELD (nothing changed), LOCKBADARG.
local token = ARGV[1]
if not valid_token(token) then return bad_arg('token', 'must be 1 to 128 bytes') end
local ttl = posint(2)
if not ttl then return bad_arg('ttl', 'must be a positive integer of milliseconds') end

-- A shared id's lock key is a hash (see shared.lua): GET answers
-- WRONGTYPE, and the slow path extends the token's lease of it.
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'table' then
  if lock_owner(v) ~= token then
    return fail('LOCKNOTHELD', 'the token does not hold the lock')
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return 1
end
-- [slow path]
return shared_extend(KEYS[1], token, ttl)
