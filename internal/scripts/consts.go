package scripts

import (
	"strconv"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/keys"
)

// Consts builds the KEYS and ARGV of every script for one Backend, with
// the Backend's constant arguments (max waiters, purge limit, wake-up
// command, tracking) formatted once instead of on every call.
type Consts struct {
	maxWaiters string
	purgeLimit string
	pub        string
	tracking   string
}

// NewConsts returns the Consts of a Backend. tracking is true only for a
// client-side-caching connection whose waiters learn of a lease's end by
// the invalidation of the lock key (rueidis in tracking mode): the scripts
// then read the lock key again after writing it, one command more per
// grant and per extend.
func NewConsts(maxWaiters, purgeLimit int, pub Publish, tracking bool) Consts {
	t := "0"
	if tracking {
		t = "1"
	}
	return Consts{
		maxWaiters: strconv.Itoa(maxWaiters),
		purgeLimit: strconv.Itoa(purgeLimit),
		pub:        string(pub),
		tracking:   t,
	}
}

// Acquire returns the KEYS and ARGV of acquire.
func (c Consts) Acquire(k keys.ID, req backend.AcquireRequest) (keys, args []string) {
	wait, wttl := "0", "0"
	if req.Wait {
		wait, wttl = "1", Millis(req.WaiterTTL)
	}
	return []string{k.Lock, k.Queue, k.Deadlines, k.Counters, k.Waiters},
		[]string{req.Token, Millis(req.TTL), wait, wttl, c.maxWaiters, c.purgeLimit, k.Channel, c.pub, c.tracking}
}

// Release returns the KEYS and ARGV of release.
func (c Consts) Release(k keys.ID, token string) (keys, args []string) {
	return []string{k.Lock, k.Queue, k.Deadlines, k.Counters, k.Waiters}, []string{token, c.purgeLimit, k.Channel, c.pub}
}

// Extend returns the KEYS and ARGV of extend.
func (c Consts) Extend(k keys.ID, token string, ttl time.Duration) (keys, args []string) {
	return []string{k.Lock, k.Counters}, []string{token, Millis(ttl), c.tracking}
}

// Leave returns the KEYS and ARGV of leave.
func (c Consts) Leave(k keys.ID, token string) (keys, args []string) {
	return []string{k.Lock, k.Queue, k.Deadlines, k.Counters, k.Waiters}, []string{token, c.purgeLimit, k.Channel, c.pub}
}

// Heartbeat returns the KEYS and ARGV of heartbeat for tokens of one id
// (at most MaxHeartbeatBatch).
func (c Consts) Heartbeat(k keys.ID, tokens []string, waiterTTL time.Duration) (keys, args []string) {
	args = make([]string, 0, 4+len(tokens))
	args = append(args, Millis(waiterTTL), c.purgeLimit, k.Channel, c.pub)
	args = append(args, tokens...)
	return []string{k.Lock, k.Queue, k.Deadlines, k.Counters, k.Waiters}, args
}
