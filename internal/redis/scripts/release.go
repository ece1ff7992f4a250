package scripts

import "github.com/redislocker/lock/internal/redis/keys"

// Release is the release script: compare-and-delete, then wake the head
// (see lua/release.lua).
var Release = load("release")

// Release returns the KEYS and ARGV of release.
func (c Consts) Release(k keys.ID, token string) (keys, args []string) {
	return []string{k.Lock, k.Queue, k.Deadlines, k.Counters, k.Waiters}, []string{token, c.purgeLimit, c.pub}
}
