-- wire: the check of the wire protocol version that the processes of a
-- prefix speak (see keys.SuffixWire). A Backend runs it before its first
-- step, and again before a step when its last check is keys.WireRefresh
-- old or more.
--
-- KEYS[1] the prefix's marker: "<prefix>wire" (no hash tag)
-- ARGV[1] the version the caller speaks: a positive integer
-- ARGV[2] the marker's TTL in ms
--
-- An absent marker is set to ARGV[1] with the TTL; a marker that holds
-- ARGV[1] gets the TTL again. A marker that holds anything else is left
-- as it is.
--
-- Reply: 1. Error replies: LOCKWIRE followed by what the marker holds
-- (another version; nothing written), LOCKBADARG.
if not posint(1) then return bad_arg('version', 'must be a positive integer') end
local ttl = posint(2)
if not ttl then return bad_arg('ttl', 'must be a positive integer of milliseconds') end
local found = redis.call('GET', KEYS[1])
if found and found ~= ARGV[1] then
  return fail('LOCKWIRE', found)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
