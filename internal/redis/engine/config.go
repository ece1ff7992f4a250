package engine

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// Defaults of the options both adapters share.
const (
	DefaultMaxWaiters  = 10000
	DefaultPurgeLimit  = 100
	DefaultWaitTimeout = 100 * time.Millisecond
)

// Config is what the engine needs to know of a Backend: values an adapter
// derives from its own options with ParsePrefix, ParseLimits and
// ParseWait, which check them, fill in the defaults and name a bad one
// "opts.<Field>" in their *backend.ArgumentError.
type Config struct {
	Adapter  string        // names the adapter in error texts, e.g. "redisbackend"
	Keys     keys.Keyspace // the names under the key prefix (ParsePrefix)
	Limits   Limits        // the scripts' per-id limits (ParseLimits)
	Sharded  bool          // wake-ups go by SPUBLISH, not PUBLISH
	Tracking bool          // wake-ups go to inbox keys, heard by client-side caching
	Wait     Wait          // the WAIT after grants and extends; zero: none
	Process  string        // names the Backend's inboxes (NewProcess)
}

// Limits are the scripts' per-id limits.
type Limits struct {
	MaxWaiters int // waiters queued per id, beyond which an enqueue fails with ErrQueueFull
	PurgeLimit int // expired waiters one step removes
}

// Wait is the WAIT that follows every grant and every extend: Replicas
// replicas within Timeout. Replicas 0 means no WAIT.
type Wait struct {
	Replicas int
	Timeout  time.Duration
}

// ParsePrefix returns the Keyspace of the key prefix p; "" means
// keys.DefaultPrefix.
func ParsePrefix(p string) (keys.Keyspace, error) {
	ks, err := keys.New(p)
	if err != nil {
		return keys.Keyspace{}, argErr("opts.Prefix", err.Error())
	}
	return ks, nil
}

// ParseLimits checks the options MaxWaiters and PurgeLimit; 0 means the
// default.
func ParseLimits(maxWaiters, purgeLimit int) (Limits, error) {
	switch {
	case maxWaiters == 0:
		maxWaiters = DefaultMaxWaiters
	case maxWaiters < 0:
		return Limits{}, argErr("opts.MaxWaiters", fmt.Sprintf("must not be negative, got %d", maxWaiters))
	}
	switch {
	case purgeLimit == 0:
		purgeLimit = DefaultPurgeLimit
	case purgeLimit < 0 || purgeLimit > scripts.MaxPurgeLimit:
		return Limits{}, argErr("opts.PurgeLimit", fmt.Sprintf("must be in 1..%d (0 for the default), got %d", scripts.MaxPurgeLimit, purgeLimit))
	}
	return Limits{MaxWaiters: maxWaiters, PurgeLimit: purgeLimit}, nil
}

// ParseWait checks the options WaitReplicas and WaitTimeout; a zero
// timeout means the default. Without replicas the Wait is zero.
func ParseWait(replicas int, timeout time.Duration) (Wait, error) {
	switch {
	case replicas < 0:
		return Wait{}, argErr("opts.WaitReplicas", fmt.Sprintf("must not be negative, got %d", replicas))
	case timeout < 0:
		return Wait{}, argErr("opts.WaitTimeout", fmt.Sprintf("must not be negative, got %v", timeout))
	case replicas == 0:
		return Wait{}, nil
	}
	if timeout == 0 {
		timeout = DefaultWaitTimeout
	}
	if timeout < time.Millisecond {
		return Wait{}, argErr("opts.WaitTimeout", fmt.Sprintf("%v is below WAIT's resolution of 1ms", timeout))
	}
	return Wait{Replicas: replicas, Timeout: timeout}, nil
}

// argErr is the *backend.ArgumentError of a bad option.
func argErr(arg, reason string) error { return &backend.ArgumentError{Arg: arg, Reason: reason} }

// NewProcess returns a random name for one Backend's inboxes: 64 bits
// from crypto/rand, in hex.
func NewProcess() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand's contract since Go 1.24)
	return hex.EncodeToString(b[:])
}
