-- drain: take every message of a process's inbox key (see keys.Inbox),
-- oldest first, and delete the key. Only the process the inbox names runs
-- it, on its tracking connection, when it is told the key was written.
--
-- KEYS[1] the inbox key (a list)
--
-- Reply: the messages, possibly none.
local m = redis.call('LRANGE', KEYS[1], 0, -1)
if #m > 0 then redis.call('DEL', KEYS[1]) end
return m
