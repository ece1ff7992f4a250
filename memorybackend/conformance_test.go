package memorybackend_test

import (
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/conformance"
	"github.com/redislocker/lock/memorybackend"
)

// TestConformance runs the shared suite against the in-memory backend: one
// Store per harness, one Backend per "process".
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return &harness{store: must(memorybackend.NewStore(&memorybackend.Options{MaxWaiters: maxWaiters, PurgeLimit: purgeLimit}))}
	})
}

// The harness's small limits, so that waiter-cap and purge-limit can fill
// a queue; the suite's largest queue has 16 waiters.
const (
	maxWaiters = 64
	purgeLimit = 8
)

type harness struct {
	store *memorybackend.Store
}

var (
	_ conformance.Harness          = (*harness)(nil)
	_ conformance.Expirer          = (*harness)(nil)
	_ conformance.StateChecker     = (*harness)(nil)
	_ conformance.Forgetter        = (*harness)(nil)
	_ conformance.NotifierDropper  = (*harness)(nil)
	_ conformance.SubscribeDelayer = (*harness)(nil)
	_ conformance.Limiter          = (*harness)(nil)
)

// Limits states the Store's caps.
func (h *harness) Limits() conformance.Limits {
	return conformance.Limits{MaxWaiters: maxWaiters, PurgeLimit: purgeLimit, WakesEveryProcess: true}
}

// ForgetIdle drops id's entry if nothing in it is live.
func (h *harness) ForgetIdle(t *testing.T, id string) { h.store.Forget(id) }

// DropNotifier imitates a reconnect of b's wake-ups.
func (h *harness) DropNotifier(t *testing.T, b backend.Backend) {
	b.(*memorybackend.Backend).DropNotifier()
}

// DelaySubscribe delays b's subscriptions.
func (h *harness) DelaySubscribe(t *testing.T, b backend.Backend, d time.Duration) {
	b.(*memorybackend.Backend).DelaySubscriptions(d)
}

func (h *harness) NewBackend(t *testing.T) backend.Backend { return h.store.NewBackend() }

// ExpireNow ends id's lease with no wake-up, like a Redis key expiring.
func (h *harness) ExpireNow(t *testing.T, id string) { h.store.ExpireNow(id) }

// StateLeft reports id's live holder and waiters; the fence and ticket
// counters are the documented ones that stay.
func (h *harness) StateLeft(t *testing.T, id string) []string {
	var left []string
	if tok, ok := h.store.Holder(id); ok {
		left = append(left, "holder "+tok)
	}
	for _, w := range h.store.Waiters(id) {
		left = append(left, "waiter "+w)
	}
	return left
}
