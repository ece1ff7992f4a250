package conformance_test

// More deliberately broken backends: one per planted bug of issue 11 and
// per property of the backend checklist. Each is one flag (the kind) on a
// single wrapper of a memorybackend Backend, stepBreakage, so that each
// breakage stays a few lines where the step it breaks is.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/memstore"
)

// stepKinds are the kinds that stepBreakage implements; what each breaks:
//
//   - wake-every-waiter: a release's wake-up names every waiter, not only
//     the head;
//   - wake-tail: it names the tail of the queue instead of the head;
//   - leave-no-wake: a Leave that removes the head of a free lock wakes
//     nobody;
//   - purge-no-wake: an Acquire whose purge removes the dead head of a free
//     lock wakes nobody;
//   - retry-full-ttl: a retried Acquire by the holder reports the TTL it
//     asks for, not the TTL that is left;
//   - release-after-expiry-nil: Release of an expired lease nobody took
//     since answers nil;
//   - extend-revives: Extend of an expired lease re-creates it;
//   - fence-forgotten: fences come from a per-id counter that the store
//     forgets with the rest of an idle id's state;
//   - no-waiter-cap: the store has no cap, though Limits states one (the
//     harness does it; the wrapper is transparent);
//   - subscribe-early: Subscribe returns before its subscription is live;
//   - no-wake-all: no Wake{All} after the notifier reconnects;
//   - batch-reversed: AcquireBatch runs its requests in reverse order;
//   - refresh-dead-entry: a Heartbeat re-creates an entry that was purged
//     past its deadline and reports it queued;
//   - head-untold: a step that makes a waiter the head of a held lock (a
//     grant with waiters left, the head's Leave) does not tell it.
var stepKinds = map[string]bool{
	"wake-every-waiter": true, "wake-tail": true, "leave-no-wake": true, "purge-no-wake": true,
	"retry-full-ttl": true, "release-after-expiry-nil": true, "extend-revives": true,
	"fence-forgotten": true, "no-waiter-cap": true, "subscribe-early": true, "no-wake-all": true,
	"batch-reversed": true, "refresh-dead-entry": true, "head-untold": true,
}

// stepBreakage is a memorybackend Backend with one breakage, its kind.
type stepBreakage struct {
	wrapped
	kind   string
	store  *memstore.Store
	muted  *muter
	fences *idFences
	book   *stepBook
	closed atomic.Bool
}

// stepBook records, for every backend of a harness, the grants not
// released or left and the enqueues not granted or left.
type stepBook struct {
	mu      sync.Mutex
	granted map[string]bool
	queued  map[string]backend.AcquireRequest
}

// newStepBreakage returns the stepBreakage of h's kind over inner, or nil
// when the kind is not one of stepKinds.
func newStepBreakage(h *brokenHarness, inner *memstore.Backend) backend.Backend {
	if !stepKinds[h.kind] {
		return nil
	}
	return &stepBreakage{wrapped: wrapped{inner}, kind: h.kind, store: h.Store, muted: h.muted, fences: h.fences, book: h.book}
}

// note records the outcome of an Acquire step of req.
func (b *stepBreakage) note(req backend.AcquireRequest, g backend.Grant) {
	k := fakeKey(req.ID, req.Token)
	b.book.mu.Lock()
	defer b.book.mu.Unlock()
	switch {
	case g.Acquired:
		b.book.granted[k] = true
		delete(b.book.queued, k)
	case g.Queued && req.Wait:
		b.book.queued[k] = req
	}
}

// drop forgets (id, token)'s grant and entry; it reports whether there
// was a grant.
func (b *stepBreakage) drop(id, token string) bool {
	k := fakeKey(id, token)
	b.book.mu.Lock()
	defer b.book.mu.Unlock()
	had := b.book.granted[k]
	delete(b.book.granted, k)
	delete(b.book.queued, k)
	return had
}

// expiredGrant reports whether token was granted id by this backend, never
// released, and nobody holds id now: its lease expired.
func (b *stepBreakage) expiredGrant(id, token string) bool {
	b.book.mu.Lock()
	had := b.book.granted[fakeKey(id, token)]
	b.book.mu.Unlock()
	_, held := b.store.Holder(id)
	return had && !held
}

func (b *stepBreakage) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	wasHolder := false
	switch b.kind {
	case "retry-full-ttl":
		tok, ok := b.store.Holder(req.ID)
		wasHolder = ok && tok == req.Token
	case "purge-no-wake":
		b.muted.add(req.ID)
		defer b.muted.done(req.ID)
	}
	g, err := b.inner.Acquire(ctx, req)
	if err != nil {
		return g, err
	}
	b.note(req, g)
	switch {
	case b.kind == "retry-full-ttl" && g.Acquired && wasHolder:
		g.TTL = req.TTL // the bug
	case b.kind == "fence-forgotten" && g.Acquired:
		g.Fence = b.fences.outer(req.ID, g.Fence)
	}
	return g, nil
}

func (b *stepBreakage) Release(ctx context.Context, id, token string) error {
	if b.kind == "release-after-expiry-nil" && b.expiredGrant(id, token) {
		b.drop(id, token)
		return nil // the bug
	}
	err := b.inner.Release(ctx, id, token)
	if err == nil {
		b.drop(id, token)
	}
	return err
}

func (b *stepBreakage) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	err := b.inner.Extend(ctx, id, token, ttl)
	if b.kind == "extend-revives" && errors.Is(err, backend.ErrNotHeld) && b.expiredGrant(id, token) {
		// The bug: a SET where a compare-and-set belongs.
		if g, aerr := b.inner.Acquire(ctx, backend.AcquireRequest{ID: id, Token: token, TTL: ttl}); aerr == nil && g.Acquired {
			return nil
		}
	}
	return err
}

func (b *stepBreakage) Leave(ctx context.Context, id, token string) error {
	if b.kind == "leave-no-wake" {
		b.muted.add(id)
		defer b.muted.done(id)
	}
	b.drop(id, token)
	return b.inner.Leave(ctx, id, token)
}

func (b *stepBreakage) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	res, err := b.inner.Heartbeat(ctx, waiters, waiterTTL)
	if err != nil || b.kind != "refresh-dead-entry" {
		return res, err
	}
	for i, r := range res {
		if r.Queued || i >= len(waiters) {
			continue
		}
		b.book.mu.Lock()
		req, ok := b.book.queued[fakeKey(waiters[i].ID, waiters[i].Token)]
		b.book.mu.Unlock()
		if !ok {
			continue
		}
		// The bug: the purged entry is put back and reported queued.
		req.WaiterTTL = waiterTTL
		if g, err := b.inner.Acquire(ctx, req); err == nil && g.Queued {
			res[i] = backend.HeartbeatResult{Queued: true}
		}
	}
	return res, nil
}

func (b *stepBreakage) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (func(), error) {
	deliver := func(wk backend.Wake) {
		named := wk.Token != "" && !wk.All
		switch b.kind {
		case "wake-every-waiter":
			if named {
				for _, w := range b.store.Waiters(wk.ID) {
					fn(backend.Wake{ID: wk.ID, Token: w})
				}
				return
			}
		case "wake-tail":
			if ws := b.store.Waiters(wk.ID); named && len(ws) > 0 {
				wk.Token = ws[len(ws)-1]
			}
		case "no-wake-all":
			if wk.All {
				return
			}
		case "leave-no-wake", "purge-no-wake":
			if b.muted.has(wk.ID) {
				return
			}
		case "head-untold":
			if wk.HolderTTL > 0 {
				return
			}
		}
		fn(wk)
	}
	if b.kind != "subscribe-early" {
		return b.inner.Subscribe(ctx, id, deliver)
	}
	if b.closed.Load() {
		return nil, backend.ErrClosed
	}
	// The bug: the subscription is made in the background.
	ready := make(chan func(), 1)
	go func() {
		cancel, err := b.inner.Subscribe(context.WithoutCancel(ctx), id, deliver)
		if err != nil {
			cancel = func() {}
		}
		ready <- cancel
	}()
	var once sync.Once
	return func() { once.Do(func() { go func() { (<-ready)() }() }) }, nil
}

func (b *stepBreakage) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	if b.kind != "batch-reversed" {
		return acquireBatch(ctx, b, reqs)
	}
	out := make([]backend.BatchGrant, len(reqs))
	for i := len(reqs) - 1; i >= 0; i-- {
		g, err := b.Acquire(ctx, reqs[i])
		if err != nil && !errors.Is(err, backend.ErrQueueFull) {
			return nil, err
		}
		out[i] = backend.BatchGrant{Grant: g, Err: err}
	}
	return out, nil
}

func (b *stepBreakage) Close() error {
	b.closed.Store(true)
	return b.inner.Close()
}

func (b *stepBreakage) LeaveBatch(ctx context.Context, waiters []backend.Waiter) error {
	return leaveBatch(ctx, b, waiters)
}

// muter counts the steps in progress per id whose wake-ups are dropped.
type muter struct {
	mu  sync.Mutex
	ids map[string]int
}

func (m *muter) add(id string) {
	m.mu.Lock()
	m.ids[id]++
	m.mu.Unlock()
}

func (m *muter) done(id string) {
	m.mu.Lock()
	if m.ids[id]--; m.ids[id] <= 0 {
		delete(m.ids, id)
	}
	m.mu.Unlock()
}

func (m *muter) has(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ids[id] > 0
}

// idFences maps the store's fences to a per-id counter, as a store that
// keeps the fence counter with the rest of an id's state would.
type idFences struct {
	mu   sync.Mutex
	byID map[string]*idFence
}

type idFence struct {
	last    uint64
	byInner map[uint64]uint64
}

// outer returns the per-id fence of the store's fence inner.
func (f *idFences) outer(id string, inner uint64) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	x := f.byID[id]
	if x == nil {
		x = &idFence{byInner: make(map[uint64]uint64)}
		f.byID[id] = x
	}
	if o, ok := x.byInner[inner]; ok {
		return o
	}
	x.last++
	x.byInner[inner] = x.last
	return x.last
}

// forget drops id's counter: its next fence is 1 again.
func (f *idFences) forget(id string) {
	f.mu.Lock()
	delete(f.byID, id)
	f.mu.Unlock()
}
