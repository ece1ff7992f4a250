package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/redislocker/lock/backend"
)

// Fault hooks for tests (the conformance suite's optional harness
// capabilities). They imitate what a networked store does to a backend;
// none of them changes the store's state.

// DelaySubscriptions makes every later Subscribe on b take d before its
// subscription is registered, like a store whose confirmation of a
// subscription is slow. Subscribe returns only after that, as it must
// (checklist item 8), or with ctx's error. d <= 0 ends the delay.
func (b *Backend) DelaySubscriptions(d time.Duration) {
	b.subDelay.Store(int64(max(d, 0)))
}

// awaitSubscription waits out DelaySubscriptions's delay.
func (b *Backend) awaitSubscription(ctx context.Context) error {
	d := time.Duration(b.subDelay.Load())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return b.check(ctx)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DropNotifier imitates the loss and re-establishment of b's connection
// for wake-ups: every subscription of b gets Wake{ID, All: true}, since
// wake-ups may have been lost meanwhile (checklist item 8). It is called
// from the caller's goroutine, outside every lock.
func (b *Backend) DropNotifier() {
	b.mu.Lock()
	subs := slices.Collect(maps.Keys(b.subs))
	b.mu.Unlock()
	for _, sub := range subs {
		sub.fn(backend.Wake{ID: sub.id, All: true})
	}
}

// Forget deletes id's entry when nothing in it is live any more (a lease
// or waiters past their expiry, which the store otherwise drops lazily),
// as a store that expires state after an idle bound would. The fence and
// ticket counters are store-wide and stay.
func (s *Store) Forget(id string) {
	s.withEntry(id, func(sh *shard, e *entry) {
		now := s.clock.Now()
		if !e.live(now) && !hasLiveWaiter(e, now) {
			sh.drop(id, e)
		}
	})
}

// State describes everything s keeps for id, live or not: each lease (its
// holder, fence, permits on a shared id, and whether it is live, also when it has expired and no step has freed
// it yet), every queue entry (its ticket, and whether it is live, also when it is
// past its deadline and not purged yet), and an entry with neither. It is
// empty when s keeps nothing for id but the store-wide counters. Expired
// state goes with the next step on id, with Forget, or with the sweep of
// its shard; see the package doc.
func (s *Store) State(id string) []string {
	var out []string
	s.withEntry(id, func(_ *shard, e *entry) {
		now := s.clock.Now()
		life := func(alive bool) string {
			if alive {
				return "live"
			}
			return "expired"
		}
		for _, l := range e.leases {
			if e.shared() {
				out = append(out, fmt.Sprintf("lease of %q, fence %d, %d of %d permits, %s", l.token, l.fence, l.permits, e.capacity, life(l.expiry.After(now))))
				continue
			}
			out = append(out, fmt.Sprintf("lease of %q, fence %d, %s", l.token, l.fence, life(l.expiry.After(now))))
		}
		for w := e.head; w != nil; w = w.next {
			out = append(out, fmt.Sprintf("waiter %q, ticket %d, %s", w.token, w.ticket, life(w.deadline.After(now))))
		}
		if len(out) == 0 {
			out = append(out, "an entry with no lease and no waiter")
		}
	})
	return out
}
