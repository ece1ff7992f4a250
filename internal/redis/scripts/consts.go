package scripts

import (
	"strconv"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

// Consts builds the KEYS and ARGV of every script for one Backend, with
// the Backend's constant arguments (max waiters, purge limit, pub/sub
// command) formatted once instead of on every call.
type Consts struct {
	maxWaiters string
	purgeLimit string
	pub        string
}

// NewConsts returns the Consts of a Backend.
func NewConsts(maxWaiters, purgeLimit int, pub Publish) Consts {
	return Consts{
		maxWaiters: strconv.Itoa(maxWaiters),
		purgeLimit: strconv.Itoa(purgeLimit),
		pub:        string(pub),
	}
}

// Strings returns the constant arguments c puts in the scripts' ARGV, for
// an adapter that converts each argument, to convert these once.
func (c Consts) Strings() []string {
	return []string{c.maxWaiters, c.purgeLimit, c.pub}
}

// Acquire returns the KEYS and ARGV of acquire for a requester whose
// wake-ups go to inbox while it is queued (see InboxAddress).
func (c Consts) Acquire(k keys.ID, req backend.AcquireRequest, inbox string) (keys, args []string) {
	wait, wttl := "0", "0"
	if req.Wait {
		wait, wttl = "1", Millis(req.WaiterTTL)
	}
	return []string{k.Lock, k.Queue, k.Deadlines, k.Counters, k.Waiters},
		[]string{req.Token, Millis(req.TTL), wait, wttl, c.maxWaiters, c.purgeLimit, c.pub, inbox}
}

// Release returns the KEYS and ARGV of release.
func (c Consts) Release(k keys.ID, token string) (keys, args []string) {
	return []string{k.Lock, k.Queue, k.Deadlines, k.Counters, k.Waiters}, []string{token, c.purgeLimit, c.pub}
}

// Extend returns the KEYS and ARGV of extend.
func (c Consts) Extend(k keys.ID, token string, ttl time.Duration) (keys, args []string) {
	return []string{k.Lock, k.Counters}, []string{token, Millis(ttl)}
}

// Leave returns the KEYS and ARGV of leave.
func (c Consts) Leave(k keys.ID, token string) (keys, args []string) {
	return []string{k.Lock, k.Queue, k.Deadlines, k.Counters, k.Waiters}, []string{token, c.purgeLimit, c.pub}
}

// Heartbeat returns the KEYS and ARGV of heartbeat for tokens of one id
// (at most MaxHeartbeatBatch).
func (c Consts) Heartbeat(k keys.ID, tokens []string, waiterTTL time.Duration) (keys, args []string) {
	args = make([]string, 0, 3+len(tokens))
	args = append(args, Millis(waiterTTL), c.purgeLimit, c.pub)
	args = append(args, tokens...)
	return []string{k.Lock, k.Queue, k.Deadlines, k.Counters, k.Waiters}, args
}

// InboxKind is how the scripts send a wake-up to a waiter's inbox (see
// keys.Inbox): the first byte of the inbox address a waiter gives when it
// queues ([InboxAddress]).
type InboxKind byte

// The inbox kinds.
const (
	// InboxClassic: PUBLISH on the inbox channel.
	InboxClassic InboxKind = 'P'
	// InboxSharded: SPUBLISH on the inbox channel, which shares the id's
	// hash slot on Redis Cluster.
	InboxSharded InboxKind = 'S'
	// InboxKey: RPUSH to the inbox key (and PEXPIRE it), which shares the
	// id's hash slot on Redis Cluster; its process hears the write by
	// client-side caching.
	InboxKey InboxKind = 'K'
)

// InboxAddress returns the inbox argument of a waiter: kind, then the
// inbox's name.
func InboxAddress(kind InboxKind, name string) string {
	return string(rune(kind)) + name
}
