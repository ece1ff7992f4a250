package memstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redislocker/lock/backend"
)

// Backend is one "process" on a Store. It implements backend.Backend,
// backend.Batcher, backend.ExtendBatcher, backend.HandOffer,
// backend.Sharer and backend.Inspector and is goroutine-safe. Create it
// with New or Store.NewBackend.
type Backend struct {
	s        *Store
	closed   atomic.Bool  // written under mu
	subDelay atomic.Int64 // a test hook: see DelaySubscriptions

	mu   sync.Mutex
	subs map[*subscription]struct{}
}

var (
	_ backend.Backend       = (*Backend)(nil)
	_ backend.Batcher       = (*Backend)(nil)
	_ backend.ExtendBatcher = (*Backend)(nil)
	_ backend.HandOffer     = (*Backend)(nil)
	_ backend.Sharer        = (*Backend)(nil)
)

// HandsOff reports whether the Store hands off (backend.HandOffer): true
// unless Options.NoHandOff was set.
func (b *Backend) HandsOff() bool { return b.s.handsOff }

// Shares reports true: the Store keeps shared ids (backend.Sharer,
// checklist item 15).
func (b *Backend) Shares() bool { return true }

// Store returns the Store b runs on.
func (b *Backend) Store() *Store { return b.s }

// check is the start of every step: a closed backend or a done ctx ends it.
func (b *Backend) check(ctx context.Context) error {
	if b.closed.Load() {
		return backend.ErrClosed
	}
	if ctx != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

func checkRequest(req *backend.AcquireRequest) error {
	// The core guarantees these; an empty token would read as "free", and
	// permits out of range would corrupt a shared id's count.
	switch {
	case req.Token == "":
		return &backend.ArgumentError{Arg: "token", Reason: "empty"}
	case req.Capacity < 0:
		return &backend.ArgumentError{Arg: "capacity", Reason: fmt.Sprintf("must not be negative, got %d", req.Capacity)}
	case req.Capacity >= 2 && (req.Permits < 1 || req.Permits > req.Capacity):
		return &backend.ArgumentError{Arg: "permits", Reason: fmt.Sprintf("must be 1 to the capacity %d, got %d", req.Capacity, req.Permits)}
	}
	return nil
}

// Acquire is the fair try-acquire with optional enqueue, in one critical
// section (checklist items 1, 2, 7 and 15). An empty req.Token, a negative
// req.Capacity, or req.Permits outside 1 to a shared req.Capacity, which
// the core never sends, is rejected with a *backend.ArgumentError before
// anything changes. A request whose capacity is not the one the id has
// while it has a holder or a waiter gets backend.ErrCapacity.
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	if err := b.check(ctx); err != nil {
		return backend.Grant{}, err
	}
	if err := checkRequest(&req); err != nil {
		return backend.Grant{}, err
	}
	sh := b.s.shard(req.ID)
	sh.mu.Lock()
	g, wc, err := b.s.acquire(sh, &req, b)
	sh.mu.Unlock()
	wc.fire()
	return g, err
}

// Release deletes the lock if token holds it and wakes the head of the
// queue; otherwise it returns backend.ErrNotHeld and changes nothing.
func (b *Backend) Release(ctx context.Context, id, token string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	sh := b.s.shard(id)
	sh.mu.Lock()
	wc, err := b.s.release(sh, id, token)
	sh.mu.Unlock()
	wc.fire()
	return err
}

// Extend sets the lock's expiry to now+ttl if token holds it and it has not
// expired, keeping the fence; otherwise it returns backend.ErrNotHeld.
func (b *Backend) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	sh := b.s.shard(id)
	sh.mu.Lock()
	wc, err := b.s.extend(sh, id, token, ttl)
	sh.mu.Unlock()
	wc.fire()
	return err
}

// Leave removes token's queue entry and releases the lock if token holds
// it, waking the new head if the lock is then free. It is idempotent and
// returns nil when there was nothing to remove.
func (b *Backend) Leave(ctx context.Context, id, token string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	sh := b.s.shard(id)
	sh.mu.Lock()
	wc := b.s.leave(sh, id, token)
	sh.mu.Unlock()
	wc.fire()
	return nil
}

// Heartbeat refreshes the deadline of each listed waiter that is still
// queued to now+waiterTTL (never re-adding one that is gone), purges expired
// waiters of its id, and reports one result per waiter, in order. It wakes
// the head of every listed id whose lock is free and whose queue is not
// empty. Each waiter is one critical section.
func (b *Backend) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	out := make([]backend.HeartbeatResult, len(waiters))
	var woken map[string]string // id -> head woken by this call
	for i, w := range waiters {
		sh := b.s.shard(w.ID)
		sh.mu.Lock()
		r, wc := b.s.heartbeat(sh, w, waiterTTL)
		sh.mu.Unlock()
		out[i] = r
		if len(wc.subs) == 0 {
			continue
		}
		if tok, plain := wc.plainOnly(); plain && len(waiters) > 1 {
			if woken == nil {
				woken = make(map[string]string)
			}
			if prev, ok := woken[w.ID]; ok && prev == tok {
				continue
			}
			woken[w.ID] = tok
		}
		wc.fire()
	}
	return out, nil
}

// AcquireBatch runs each request as its own Acquire step (one critical
// section each), in order. backend.ErrQueueFull goes in the request's Err.
// Invalid requests fail the whole call before any step.
func (b *Backend) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	for i := range reqs {
		if err := checkRequest(&reqs[i]); err != nil {
			return nil, err
		}
	}
	out := make([]backend.BatchGrant, len(reqs))
	for i := range reqs {
		sh := b.s.shard(reqs[i].ID)
		sh.mu.Lock()
		g, wc, err := b.s.acquire(sh, &reqs[i], b)
		sh.mu.Unlock()
		wc.fire()
		out[i] = backend.BatchGrant{Grant: g, Err: err}
	}
	return out, nil
}

// ExtendBatch runs each request as its own Extend step (one critical
// section each), in order: nil when extended, backend.ErrNotHeld when the
// token does not hold the lock.
func (b *Backend) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]error, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	out := make([]error, len(reqs))
	for i, r := range reqs {
		sh := b.s.shard(r.ID)
		sh.mu.Lock()
		wc, err := b.s.extend(sh, r.ID, r.Token, r.TTL)
		sh.mu.Unlock()
		wc.fire()
		out[i] = err
	}
	return out, nil
}

// LeaveBatch runs Leave for every waiter, one critical section each.
func (b *Backend) LeaveBatch(ctx context.Context, waiters []backend.Waiter) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	for _, w := range waiters {
		sh := b.s.shard(w.ID)
		sh.mu.Lock()
		wc := b.s.leave(sh, w.ID, w.Token)
		sh.mu.Unlock()
		wc.fire()
	}
	return nil
}

// Subscribe registers fn on the Store for the wake-ups of id, from the
// steps of every Backend on the Store, until cancel is called or b is
// closed. A wake-up that names a waiter reaches only the subscriptions of
// the Backend whose Acquire queued it. It returns
// once wake-ups can be delivered. fn is called outside every store lock, from
// the goroutine of the step that wakes; it may still be called briefly after
// cancel. cancel is idempotent.
func (b *Backend) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (cancel func(), err error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, &backend.ArgumentError{Arg: "fn", Reason: "nil"}
	}
	if err := b.awaitSubscription(ctx); err != nil {
		return nil, err
	}
	sub := &subscription{id: id, fn: fn, owner: b}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return nil, backend.ErrClosed
	}
	if b.subs == nil {
		b.subs = make(map[*subscription]struct{})
	}
	b.subs[sub] = struct{}{}
	b.s.addSub(sub)
	return func() { b.unsubscribe(sub) }, nil
}

func (b *Backend) unsubscribe(sub *subscription) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[sub]; !ok {
		return
	}
	delete(b.subs, sub)
	b.s.removeSub(sub)
}

// Close drops b's subscriptions; every later call on b, Close included,
// returns backend.ErrClosed. It does not release locks or queue entries
// (they expire, as a dead process's would) and does not affect other
// Backends on the Store.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return backend.ErrClosed
	}
	b.closed.Store(true)
	for sub := range b.subs {
		b.s.removeSub(sub)
	}
	b.subs = nil
	return nil
}
