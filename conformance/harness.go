package conformance

import (
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// Harness makes backends on one shared store. Run makes a new Harness for
// every subtest, so subtests do not share state unless the store is shared
// (one Redis server); ids are unique per subtest and per run either way.
type Harness interface {
	// NewBackend returns a new, independent backend on the harness's store:
	// a separate "process" that contends with the others on the same ids.
	// The suite closes it (through lock.Locker.Close or Backend.Close).
	NewBackend(t *testing.T) backend.Backend
}

// Expirer is an optional Harness capability: end id's lease now, the way a
// TTL expiry does, with no wake-up sent. Without it, the suite waits for
// short real TTLs instead where it can, and skips where it cannot.
type Expirer interface {
	ExpireNow(t *testing.T, id string)
}

// StateChecker is an optional Harness capability for H2: it returns a
// description of every piece of state the store still keeps for id other
// than keys that expire within a documented bound (e.g. Redis keys), or
// nothing when it is clean.
type StateChecker interface {
	StateLeft(t *testing.T, id string) []string
}

// ClockAdvancer is an optional Harness capability: move the store's clock
// forward by d (for backends with an injectable clock). Lease expiries and
// waiter deadlines are measured on that clock.
type ClockAdvancer interface {
	Advance(t *testing.T, d time.Duration)
}
