-- leave: remove the token's queue entry and release the lock if the token
-- holds it; if the lock is then free, hand it off to the live head, or
-- tell the new head the holder's TTL if the head changed while the lock
-- is held. Idempotent (backend checklist items 5 and 7,
-- backend.HandOffer).
--
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] fence key (for a hand-off),
-- KEYS[4] waiter records
-- ARGV[1] token
-- ARGV[2] purge limit
-- ARGV[3] the Backend's pub/sub command: PUBLISH or SPUBLISH (see publish_cmd)
--
-- Reply: {left, released}: 1 if an entry was removed, 1 if the lock was
-- released. Error reply: LOCKBADARG.
local token = ARGV[1]
if not valid_token(token) then return bad_arg('token', 'must be 1 to 128 bytes') end
local limit, bad = wake_args(2)
if not limit then return bad end

local lock, q, f, w = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- A shared id's lock key is a hash (see shared.lua): GET answers WRONGTYPE.
local v = redis.pcall('GET', lock)
if type(v) == 'table' then return shared_leave(lock, q, f, w, token, limit) end
local holder = lock_owner(v)
local was_head = redis.call('ZRANK', q, token) == 0
local left = unqueue(q, w, token)
local released = 0
if holder == token then
  redis.call('DEL', lock)
  released = 1
  holder = false
end
if not holder then
  wake_live_head(lock, q, f, w, limit)
elseif was_head then
  -- The head left while the lock is held: tell the new live head when the
  -- lease ends.
  local head, _, inbox = heads(q, w, now_ms(), limit)
  if head then wake(lock, head, inbox, holder_ttl(lock)) end
end
return {left, released}
