package memstore

import (
	"context"

	"github.com/redislocker/lock/backend"
)

var _ backend.Inspector = (*Backend)(nil)

// Inspect returns the state of id by the store's clock: the live lease and
// the first live waiters (at most maxWaiters, capped at
// backend.MaxInspectWaiters). It is read-only: it neither expires, purges
// nor wakes. It reports QueuedFor (the store records when each waiter was
// queued) and fingerprints instead of tokens.
func (b *Backend) Inspect(ctx context.Context, id string, maxWaiters int) (backend.Inspection, error) {
	if err := b.check(ctx); err != nil {
		return backend.Inspection{ID: id}, err
	}
	maxWaiters = min(maxWaiters, backend.MaxInspectWaiters)
	in := backend.Inspection{ID: id}
	sh := b.s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.ids[id]
	if e == nil {
		return in, nil
	}
	now := b.s.clock.Now()
	if e.live(now) {
		in.Held, in.Fence, in.TTL = true, e.fence, e.expiry.Sub(now)
		in.Holder = backend.Fingerprint(e.holder)
	}
	for w := e.head; w != nil; w = w.next {
		if !w.deadline.After(now) {
			continue
		}
		in.QueueLen++
		if len(in.Waiters) < maxWaiters {
			in.Waiters = append(in.Waiters, backend.WaiterInfo{
				Ticket:    w.ticket,
				Token:     backend.Fingerprint(w.token),
				QueuedFor: now.Sub(w.since),
				Deadline:  w.deadline.Sub(now),
			})
		}
	}
	return in, nil
}
