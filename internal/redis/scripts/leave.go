package scripts

import "github.com/redislocker/lock/internal/redis/keys"

// Leave is the leave script: drop the entry, release a raced grant, wake
// the new head (see lua/leave.lua).
var Leave = load("leave", "shared")

// Leave returns the KEYS and ARGV of leave.
func (c Consts) Leave(k keys.ID, token string) (keys, args []string) {
	return []string{k.Lock, k.Queue, k.Fence, k.Waiters}, []string{token, c.purgeLimit, c.pub}
}
