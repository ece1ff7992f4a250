package conformance_test

// Deliberately broken backends for the properties of shared ids
// (backend.Sharer, checklist item 15). Each is one kind of a single
// wrapper, sharedBreakage, which offers shared ids, direct hand-off when
// its store hands off, and Inspect, so that every shared property runs
// against it. The self-test runs every shared property against each kind:
// it must fail the ones listed, and no other but those alsoFails lists.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/backendkit/memstore"
)

// sharedKinds are the kinds that sharedBreakage implements, each with the
// properties that must fail on it; what each breaks:
//
//   - shared-over-capacity: a shared id takes one permit more than its
//     Capacity (an off-by-one in "fits"), while Inspect reports the
//     Capacity asked for;
//   - shared-jump: a shared request whose permits fit beside the holders
//     is granted ahead of the waiters before it (it jumps a blocked
//     exclusive head), which are queued anew behind it;
//   - shared-handoff-one: a step that frees permits lets in only the first
//     head that fits: the others are granted by the store but never told;
//   - shared-fence-reuse: a grant beside live holders reports the fence of
//     the earliest live lease, not its own.
var sharedKinds = map[string][]string{
	"shared-over-capacity": {"shared-capacity", "shared-exclusive"},
	"shared-jump":          {"shared-fifo-batch"},
	"shared-handoff-one":   {"shared-fifo-batch", "shared-waiter-release"},
	"shared-fence-reuse":   {"shared-fences"},
}

// sharedHandOffKinds are the shared kinds whose store hands off; the
// others run on a store that wakes (the wake-then-acquire fallback).
var sharedHandOffKinds = map[string]bool{"shared-over-capacity": true, "shared-handoff-one": true}

// sharedPropNames are the suite's shared properties: the self-test runs
// them all against each of sharedKinds.
var sharedPropNames = []string{
	"shared-capacity", "shared-exclusive", "shared-fifo-batch", "shared-fences",
	"shared-waiter-release", "shared-retry", "shared-capacity-conflict", "shared-inspect",
}

func init() {
	for k, props := range sharedKinds {
		brokenKinds[k] = props
	}
	// The model of shared-capacity checks every step: a grant ahead of a
	// waiter, a permit too many, a fence that does not increase.
	// shared-over-capacity: an exclusive waiter fits beside a holder of 1
	// permit, so it is granted at once instead of queued
	// (shared-waiter-release, shared-retry, shared-capacity-conflict), and
	// shared-fifo-batch's S1 beside the exclusive holder.
	alsoFails["shared-over-capacity"] = []string{"shared-fifo-batch", "shared-waiter-release", "shared-retry", "shared-capacity-conflict"}
	// shared-jump: shared-waiter-release's S1 fits beside A and jumps the
	// exclusive head X.
	alsoFails["shared-jump"] = []string{"shared-capacity", "shared-waiter-release"}
	// shared-fence-reuse: the model and the ledger of shared-capacity see
	// the repeated fence, shared-fifo-batch sees S2's fence not above S1's,
	// and shared-inspect lists the store's own fence.
	alsoFails["shared-fence-reuse"] = []string{"shared-capacity", "shared-fifo-batch", "shared-inspect"}
}

// sharedBook is what the sharedBreakage backends of one harness share,
// like their store.
type sharedBook struct {
	mu     sync.Mutex // shared-jump: every step of every backend
	queued map[string]backend.AcquireRequest
	steps  map[string]*stepWakes // shared-handoff-one: by id
}

// stepWakes counts the steps in progress on an id and the wake-ups they
// let through.
type stepWakes struct {
	active, passed int
}

func newSharedBook() *sharedBook {
	return &sharedBook{queued: map[string]backend.AcquireRequest{}, steps: map[string]*stepWakes{}}
}

// sharedBreakage is a memorybackend Backend with one breakage, its kind.
type sharedBreakage struct {
	wrapped
	kind  string
	store *memstore.Store
	book  *sharedBook
}

var (
	_ backend.Batcher   = (*sharedBreakage)(nil)
	_ backend.Inspector = (*sharedBreakage)(nil)
	_ backend.Sharer    = (*sharedBreakage)(nil)
	_ backend.HandOffer = (*sharedBreakage)(nil)
)

// newSharedBreakage returns the sharedBreakage of h's kind over inner, or
// nil when the kind is not one of sharedKinds.
func newSharedBreakage(h *brokenHarness, inner *memstore.Backend) backend.Backend {
	if _, ok := sharedKinds[h.kind]; !ok {
		return nil
	}
	return &sharedBreakage{wrapped: wrapped{inner}, kind: h.kind, store: h.Store, book: h.shared}
}

func (b *sharedBreakage) Shares() bool   { return true }
func (b *sharedBreakage) HandsOff() bool { return b.inner.HandsOff() }

// begin marks a step on id in progress (shared-handoff-one), or takes the
// harness's lock (shared-jump); the returned func ends it.
func (b *sharedBreakage) begin(id string) func() {
	switch b.kind {
	case "shared-jump":
		b.book.mu.Lock()
		return b.book.mu.Unlock
	case "shared-handoff-one":
		b.book.mu.Lock()
		s := b.book.steps[id]
		if s == nil {
			s = &stepWakes{}
			b.book.steps[id] = s
		}
		s.active++
		b.book.mu.Unlock()
		return func() {
			b.book.mu.Lock()
			if s.active--; s.active == 0 {
				delete(b.book.steps, id)
			}
			b.book.mu.Unlock()
		}
	}
	return func() {}
}

// over returns r as the store gets it: shared-over-capacity asks for one
// permit more.
func (b *sharedBreakage) over(r backend.AcquireRequest) backend.AcquireRequest {
	if b.kind == "shared-over-capacity" && r.Capacity >= 2 {
		r.Capacity++
	}
	return r
}

func (b *sharedBreakage) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	defer b.begin(req.ID)()
	g, err := b.inner.Acquire(ctx, b.over(req))
	if err != nil {
		return g, err
	}
	k := fakeKey(req.ID, req.Token)
	switch b.kind {
	case "shared-jump":
		if g.Queued {
			b.book.queued[k] = req
		} else {
			delete(b.book.queued, k)
		}
		if !g.Acquired && req.Capacity >= 2 {
			return b.jump(ctx, req, g)
		}
	case "shared-fence-reuse":
		if g.Acquired && req.Capacity >= 2 {
			in, ierr := b.inner.Inspect(ctx, req.ID, 0)
			if ierr == nil && len(in.Holders) > 1 && in.Holders[0].Holder != backend.Fingerprint(req.Token) {
				g.Fence = in.Holders[0].Fence // the bug
			}
		}
	}
	return g, nil
}

// jump is shared-jump's bug: req, refused, fits beside the holders but
// waiters are ahead: they leave, req is granted, and they queue anew
// behind it. The caller holds the harness's lock, so no other step runs
// meanwhile.
func (b *sharedBreakage) jump(ctx context.Context, req backend.AcquireRequest, g backend.Grant) (backend.Grant, error) {
	in, err := b.inner.Inspect(ctx, req.ID, 0)
	if err != nil {
		return g, nil
	}
	used := 0
	for _, h := range in.Holders {
		used += h.Permits
	}
	if in.Capacity != req.Capacity || used+req.Permits > req.Capacity {
		return g, nil
	}
	var ahead []backend.AcquireRequest
	for _, w := range b.store.Waiters(req.ID) {
		if w == req.Token {
			break
		}
		r, ok := b.book.queued[fakeKey(req.ID, w)]
		if !ok {
			return g, nil // not queued through a shared-jump backend
		}
		ahead = append(ahead, r)
	}
	if len(ahead) == 0 {
		return g, nil
	}
	for _, r := range ahead {
		if err := b.inner.Leave(ctx, r.ID, r.Token); err != nil {
			return backend.Grant{}, err
		}
	}
	g, err = b.inner.Acquire(ctx, req)
	bg := context.WithoutCancel(ctx)
	for _, r := range ahead {
		if rg, rerr := b.inner.Acquire(bg, r); rerr == nil && rg.Acquired {
			_ = b.inner.Leave(bg, r.ID, r.Token) // nobody asked for this grant now
		}
	}
	if err == nil && g.Acquired {
		delete(b.book.queued, fakeKey(req.ID, req.Token))
	}
	return g, err
}

func (b *sharedBreakage) Release(ctx context.Context, id, token string) error {
	defer b.begin(id)()
	return b.inner.Release(ctx, id, token)
}

func (b *sharedBreakage) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	defer b.begin(id)()
	return b.inner.Extend(ctx, id, token, ttl)
}

func (b *sharedBreakage) Leave(ctx context.Context, id, token string) error {
	defer b.begin(id)()
	if b.kind == "shared-jump" {
		delete(b.book.queued, fakeKey(id, token))
	}
	return b.inner.Leave(ctx, id, token)
}

func (b *sharedBreakage) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	out := make([]backend.HeartbeatResult, 0, len(waiters))
	for _, w := range waiters {
		end := b.begin(w.ID)
		r, err := b.inner.Heartbeat(ctx, []backend.Waiter{w}, waiterTTL)
		end()
		if err != nil {
			return nil, err
		}
		out = append(out, r...)
	}
	return out, nil
}

// Inspect reports the store's view, with the capacity asked for.
func (b *sharedBreakage) Inspect(ctx context.Context, id string, maxWaiters int) (backend.Inspection, error) {
	in, err := b.inner.Inspect(ctx, id, maxWaiters)
	if b.kind == "shared-over-capacity" && in.Capacity >= 3 {
		in.Capacity--
	}
	return in, err
}

func (b *sharedBreakage) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (func(), error) {
	if b.kind != "shared-handoff-one" {
		return b.inner.Subscribe(ctx, id, fn)
	}
	return b.inner.Subscribe(ctx, id, func(wk backend.Wake) {
		if wk.Token != "" && !wk.All && wk.HolderTTL == 0 {
			b.book.mu.Lock()
			s := b.book.steps[wk.ID]
			drop := s != nil && s.passed > 0
			if s != nil {
				s.passed++
			}
			b.book.mu.Unlock()
			if drop {
				return // the bug: only the first head of a step hears
			}
		}
		fn(wk)
	})
}

func (b *sharedBreakage) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	return acquireBatch(ctx, b, reqs)
}

func (b *sharedBreakage) LeaveBatch(ctx context.Context, waiters []backend.Waiter) error {
	return leaveBatch(ctx, b, waiters)
}

// ExtendBatch runs the core's fallback over b.
func (b *sharedBreakage) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]error, error) {
	return fallback.ExtendEach(ctx, b, reqs)
}

// TestSharedWrappersMisbehave checks each shared broken backend directly,
// without the suite: it really breaks what it claims to.
func TestSharedWrappersMisbehave(t *testing.T) {
	ctx := context.Background()
	req := func(tok string, capacity, permits int, wait bool) backend.AcquireRequest {
		return backend.AcquireRequest{ID: "s", Token: tok, TTL: time.Minute, Wait: wait, WaiterTTL: time.Minute, Capacity: capacity, Permits: permits}
	}
	acquire := func(t *testing.T, b backend.Backend, r backend.AcquireRequest) backend.Grant {
		t.Helper()
		g, err := b.Acquire(ctx, r)
		if err != nil {
			t.Fatalf("Acquire(%s): %v", r.Token, err)
		}
		return g
	}
	newB := func(t *testing.T, kind string) (*brokenHarness, backend.Backend) {
		h := newBrokenHarness(kind)
		b := h.NewBackend(t)
		t.Cleanup(func() { _ = b.Close() })
		if s, ok := b.(backend.Sharer); !ok || !s.Shares() {
			t.Fatalf("%s: not a Sharer", kind)
		}
		return h, b
	}

	t.Run("shared-over-capacity", func(t *testing.T) {
		_, b := newB(t, "shared-over-capacity")
		acquire(t, b, req("A", 2, 1, false))
		if g := acquire(t, b, req("X", 2, 2, false)); !g.Acquired {
			t.Errorf("X, exclusive beside A: %+v, want granted (the bug)", g)
		}
		if in, err := b.(backend.Inspector).Inspect(ctx, "s", 0); err != nil || in.Capacity != 2 {
			t.Errorf("Inspect: %+v, %v; want capacity 2 reported", in, err)
		}
	})

	t.Run("shared-jump", func(t *testing.T) {
		h, b := newB(t, "shared-jump")
		acquire(t, b, req("A", 3, 1, false))
		if g := acquire(t, b, req("X", 3, 3, true)); g.Acquired || !g.Queued {
			t.Fatalf("X: %+v, want queued", g)
		}
		if g := acquire(t, b, req("S", 3, 1, false)); !g.Acquired {
			t.Errorf("S behind X: %+v, want granted ahead of X (the bug)", g)
		}
		if ws := h.Store.Waiters("s"); len(ws) != 1 || ws[0] != "X" {
			t.Errorf("waiters %v, want [X] queued anew", ws)
		}
	})

	t.Run("shared-handoff-one", func(t *testing.T) {
		h, b := newB(t, "shared-handoff-one")
		var mu sync.Mutex
		var woken []string
		cancel, err := b.Subscribe(ctx, "s", func(wk backend.Wake) {
			mu.Lock()
			woken = append(woken, wk.Token)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		defer cancel()
		acquire(t, b, req("X", 3, 3, false))
		acquire(t, b, req("S1", 3, 1, true))
		acquire(t, b, req("S2", 3, 1, true))
		if err := b.Release(ctx, "s", "X"); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := append([]string(nil), woken...)
		mu.Unlock()
		if len(got) != 1 || got[0] != "S1" {
			t.Errorf("woken %v, want [S1] only (the bug)", got)
		}
		if hs := h.Store.Holders("s"); len(hs) != 2 {
			t.Errorf("holders %v, want S1 and S2 (the store granted both)", hs)
		}
	})

	t.Run("shared-fence-reuse", func(t *testing.T) {
		_, b := newB(t, "shared-fence-reuse")
		ga := acquire(t, b, req("A", 3, 1, false))
		gb := acquire(t, b, req("B", 3, 1, false))
		if !ga.Acquired || !gb.Acquired || gb.Fence != ga.Fence {
			t.Errorf("A %+v, B %+v; want B reported with A's fence (the bug)", ga, gb)
		}
	})
}
