package scripts

import (
	"strconv"

	"github.com/redislocker/lock/internal/redis/keys"
)

// ForceRelease is an operator's script, not a step of the lock protocol,
// so not in All: delete the lock only if the holder's fence is the given
// one, then wake the head as release does.
var ForceRelease = load("force_release", "shared")

// ForceReleaseCall returns the KEYS and ARGV of force_release.
func ForceReleaseCall(k keys.ID, fence uint64, purgeLimit int, pub Publish) (keys, args []string) {
	return []string{k.Lock, k.Queue, k.Fence, k.Waiters},
		[]string{strconv.FormatUint(fence, 10), strconv.Itoa(purgeLimit), string(pub)}
}
