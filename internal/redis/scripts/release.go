package scripts

import "github.com/redislocker/lock/internal/redis/keys"

// Release is the release script: compare-and-delete, then wake the head
// (see lua/release.lua).
var Release = load("release", "shared")

// Release returns the KEYS and ARGV of release; now and before are the
// release records (keys.Keyspace.Released) of the id's slot for the
// caller's current period and the one before it, and mark is the
// release's keys.ReleaseMark.
func (c Consts) Release(k keys.ID, token, mark, now, before string) (keys, args []string) {
	return []string{k.Lock, k.Queue, k.Fence, k.Waiters, now, before}, []string{token, c.purgeLimit, c.pub, mark}
}
