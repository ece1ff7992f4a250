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
// description of every piece of state the store keeps for id, or nothing
// when it is clean. Everything counts, expired leases and dead queue
// entries a step has not removed yet included, but for the documented
// counters that outlive an id (a fence key that expires within a stated
// bound, a store-wide counter). A check that shows only live state hides
// what a backend leaves behind.
type StateChecker interface {
	StateLeft(t *testing.T, id string) []string
}

// ClockAdvancer is an optional Harness capability: move the store's clock
// forward by d (for backends with an injectable clock). Lease expiries and
// waiter deadlines are measured on that clock.
type ClockAdvancer interface {
	Advance(t *testing.T, d time.Duration)
}

// Forgetter is an optional Harness capability for S3 across an idle
// period: make the store drop at once every piece of id's state that it
// would drop by itself once id is idle (leases and waiters past their
// expiry, and whatever expires after an idle bound), as if that bound had
// passed. Only what the backend documents to stay for ever (e.g. a fence
// counter) may stay. The suite calls it only when id has no live holder
// and no live waiter. Without it, fence-after-idle checks fences across
// releases and expiries only.
type Forgetter interface {
	ForgetIdle(t *testing.T, id string)
}

// NotifierDropper is an optional Harness capability for checklist item 8:
// break the connection (or whatever carries wake-ups) of the notifier of
// b, a backend this harness made, so that b must re-establish it. After
// that b must deliver Wake{ID: id, All: true} for every id it has a
// subscription for. Without it, reconnect-wakes-all is skipped.
type NotifierDropper interface {
	DropNotifier(t *testing.T, b backend.Backend)
}

// SubscribeDelayer is an optional Harness capability for checklist item 8:
// from now on, a subscription of b (a backend this harness made) becomes
// live only d after Subscribe starts it, e.g. because the store's
// confirmation is slow. "Live" is the moment wake-ups for the id start to
// reach the subscriber, whatever makes it: for a backend that subscribes
// one channel in New and makes Subscribe a local registration, delay that
// registration (or the first confirmation of the channel, for a
// Subscribe that waits for it). A correct Subscribe then takes at least d; one
// that returns before its subscription is live loses the wake-ups sent
// right after it returns. d == 0 ends the delay. Without it,
// subscribe-live runs with the store's own speed, which rarely exposes an
// early return.
type SubscribeDelayer interface {
	DelaySubscribe(t *testing.T, b backend.Backend, d time.Duration)
}

// Limiter is an optional Harness capability: the limits and documented
// exceptions of the backends the harness makes, which some properties
// need to know. A harness that is not a Limiter has the zero Limits.
type Limiter interface {
	Limits() Limits
}

// Limits describes the backends of a harness. The zero value means "not
// stated": properties that need a figure are skipped, with the reason.
type Limits struct {
	// MaxWaiters is the cap on waiters per id (H3). waiter-cap fills a
	// queue to it, so keep it small in the harness (at most 5000; e.g.
	// 64), but not below what the suite queues on one id: 16 waiters, and
	// 3 x PurgeLimit + 2 in purge-limit (three limits' worth of dead
	// waiters, a live one, and one of the dead queued anew). With
	// PurgeLimit 8, 64 fits. 0: waiter-cap is skipped.
	MaxWaiters int
	// PurgeLimit is the most expired waiters one step purges per id.
	// purge-limit queues three times as many dead waiters, purge-exact
	// twice as many plus one. 0: they assume 100 (then MaxWaiters must be
	// at least 302).
	PurgeLimit int
	// UnnamedWakes states that the backend cannot name the head (e.g.
	// wake-ups from client-side-caching invalidations, checklist item 8):
	// every process waiting on the id gets Wake{ID} with no token, or
	// Wake{ID, All: true} when its connection was replaced. wake-only-head
	// then checks only the wake-ups that name a token.
	UnnamedWakes bool
	// HeadChangeUnwoken states a documented exception to checklist item
	// 7: a step that removes the head (a Leave, a purge) wakes nobody,
	// whether the lock stays free or held, and the new head finds out by
	// its own heartbeat. wake-new-head then allows those cases the
	// heartbeat bound instead of one notification, and head-after-grant
	// skips the head's Leave under a held lock.
	HeadChangeUnwoken bool
	// WakesEveryProcess states that a wake-up reaches every process that
	// waits on the id, not only the process of the waiter it names
	// (checklist item 7; e.g. one notification channel per id).
	// one-delivery-per-wake is then skipped.
	WakesEveryProcess bool
	// Strict claims full conformance: every property the suite would skip
	// (for a capability the harness or the backend lacks, or for an
	// exception stated above) fails instead, with the reason it would
	// have skipped. Run logs every skip either way, in a summary at its
	// end. The one exception is shared ids: a backend that is not a
	// backend.Sharer (or whose Shares is false) does not offer them, and
	// they have no fallback to check, so the shared-* properties are
	// skipped, and logged, without failing.
	Strict bool
}
