package memorybackend_test

import (
	"testing"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/conformance"
	"github.com/redislocker/lock/memorybackend"
)

// TestConformance runs the shared suite against the in-memory backend: one
// Store per harness, one Backend per "process".
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return &harness{store: must(memorybackend.NewStore(nil))}
	})
}

type harness struct {
	store *memorybackend.Store
}

var (
	_ conformance.Harness      = (*harness)(nil)
	_ conformance.Expirer      = (*harness)(nil)
	_ conformance.StateChecker = (*harness)(nil)
)

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
