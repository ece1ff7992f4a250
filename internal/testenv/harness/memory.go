package harness

import (
	"fmt"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/conformance"
	"github.com/redislocker/lock/internal/backendkit/memstore"
)

// Memory is the harness of memorybackend: backends on one Store, one
// Backend per "process". The conformance package's self-test wraps it in
// its deliberately broken backends.
type Memory struct {
	Store *memstore.Store
	// Unwrap, when set, returns the memorybackend Backend inside a backend
	// that NewBackend of an embedding harness made.
	Unwrap func(t *testing.T, b backend.Backend) *memstore.Backend

	noHandOff bool
}

// NewMemory returns a harness on a new Store with the harness's limits;
// uncapped leaves the Store's waiter cap at its default, far above what
// Limits states (for a backend that fails to enforce it). With noHandOff
// the Store does not hand off (the wake-then-acquire fallback, see
// backend.HandOffer).
func NewMemory(uncapped, noHandOff bool) *Memory {
	opts := &memstore.Options{MaxWaiters: MaxWaiters, PurgeLimit: PurgeLimit, NoHandOff: noHandOff}
	if uncapped {
		opts.MaxWaiters = 0
	}
	store, err := memstore.NewStore(opts)
	if err != nil {
		panic(fmt.Sprintf("harness: %v", err)) // the options above are valid
	}
	return &Memory{Store: store, noHandOff: noHandOff}
}

// NewBackend returns a Backend of its own on the Store.
func (h *Memory) NewBackend(t *testing.T) backend.Backend { return h.Store.NewBackend() }

// Limits states the Store's caps. A wake-up reaches only the Backend
// whose waiter it names. A Store that hands off has every capability the
// suite knows, so its harness claims full conformance (Strict): a property
// skipped after a refactoring fails. Without hand-off the hand-off
// properties are skipped.
func (h *Memory) Limits() conformance.Limits {
	return conformance.Limits{MaxWaiters: MaxWaiters, PurgeLimit: PurgeLimit, Strict: !h.noHandOff}
}

// ExpireNow ends id's lease with no wake-up, like a Redis key expiring.
func (h *Memory) ExpireNow(t *testing.T, id string) { h.Store.ExpireNow(id) }

// ForgetIdle drops id's entry if nothing in it is live.
func (h *Memory) ForgetIdle(t *testing.T, id string) { h.Store.Forget(id) }

// StateLeft reports everything the Store keeps for id (Store.State),
// expired state included: the fence and ticket counters are store-wide,
// the documented state that stays.
func (h *Memory) StateLeft(t *testing.T, id string) []string { return h.Store.State(id) }

// DropNotifier imitates a reconnect of b's wake-ups.
func (h *Memory) DropNotifier(t *testing.T, b backend.Backend) { h.memory(t, b).DropNotifier() }

// DelaySubscribe delays b's subscriptions.
func (h *Memory) DelaySubscribe(t *testing.T, b backend.Backend, d time.Duration) {
	h.memory(t, b).DelaySubscriptions(d)
}

// memory returns the memorybackend Backend that b is or wraps.
func (h *Memory) memory(t *testing.T, b backend.Backend) *memstore.Backend {
	if h.Unwrap != nil {
		return h.Unwrap(t, b)
	}
	m, ok := b.(*memstore.Backend)
	if !ok {
		t.Fatalf("not a memorybackend Backend: %T", b)
	}
	return m
}
