-- leave: remove the token's queue entry and release the lock if the token
-- holds it; if the lock is then free, hand it off to the live head (or
-- wake the new head), or tell it the holder's TTL if the head changed
-- while the lock is held. Idempotent (backend checklist items 5 and 7,
-- backend.HandOffer).
--
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] deadlines, KEYS[4] fence key (for a
-- hand-off), KEYS[5] waiter records
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

local lock, q, d, f, w = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local holder = lock_owner(redis.call('GET', lock))
local head_before = head_of(q)
local left = unqueue(q, d, w, token)
local released = 0
if holder == token then
  redis.call('DEL', lock)
  released = 1
  holder = false
end
local us = now_us()
purge(q, d, w, math.floor(us / 1000), limit)
local head = head_of(q)
if not holder then
  if head and not hand_off(lock, q, d, f, w, head, us)
      and (released == 1 or head ~= head_before) then
    wake(lock, w, head)
  end
elseif head and head ~= head_before then
  wake(lock, w, head, holder_ttl(lock))
end
return {left, released}
