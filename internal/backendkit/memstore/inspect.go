package memstore

import (
	"context"

	"github.com/redislocker/lock/backend"
)

var _ backend.Inspector = (*Backend)(nil)

// Inspect returns the state of id by the store's clock: the live lease
// (every live lease of a shared id, in fence order, with its capacity) and
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
	if l := e.last(now); l != nil {
		in.Held, in.Fence, in.TTL = true, l.fence, l.expiry.Sub(now)
		in.Holder = backend.Fingerprint(l.token)
	}
	if e.shared() {
		in.Capacity = e.capacity
		for _, l := range e.leases {
			if l.expiry.After(now) {
				in.Holders = append(in.Holders, backend.HolderInfo{
					Fence: l.fence, TTL: l.expiry.Sub(now), Holder: backend.Fingerprint(l.token), Permits: l.permits,
				})
			}
		}
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
				Permits:   permitsOf(e, w),
			})
		}
	}
	return in, nil
}

// permitsOf returns the permits w asks for on a shared id, 0 on a mutex.
func permitsOf(e *entry, w *waiter) int {
	if e.shared() {
		return w.permits
	}
	return 0
}
