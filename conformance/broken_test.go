package conformance_test

// Deliberately broken backends, for the self-test of the suite
// (TestSuiteCatchesBrokenBackends): each one wraps a memorybackend Store and breaks
// exactly one guarantee, so that the suite must fail under that property's
// name. They implement backend.Batcher through the core's fallbacks over
// the wrapper itself, so the breakage applies to batched steps too.

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/conformance"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/backendkit/memstore"
	"github.com/redislocker/lock/internal/testenv/harness"
)

// brokenEnv names the broken backend that TestBrokenBackend runs the suite
// against. It is set only by TestSuiteCatchesBrokenBackends for its
// subprocesses.
const brokenEnv = "LOCK_CONFORMANCE_BROKEN"

// controlName is the brokenEnv value of the control: the unbroken
// memorybackend, through the same harness.
const controlName = "none"

// brokenKinds maps each broken backend to the properties that must catch
// it (each of them must fail). The first four break so much that the
// self-test runs only these properties against them; the others run the
// whole suite and must fail nowhere else (but in alsoFails).
var brokenKinds = map[string][]string{
	"double-grant": {"mutual-exclusion"},
	"queue-jump":   {"fifo-order", "try-acquire-fair"},
	"drop-wakeups": {"wake-on-release"},
	"repeat-fence": {"fencing"},
	// One per planted bug of issue 11 and per property of the contract.
	"wake-every-waiter":        {"wake-only-head"},
	"wake-tail":                {"wake-only-head"},
	"leave-no-wake":            {"wake-new-head"},
	"purge-no-wake":            {"wake-new-head"},
	"retry-full-ttl":           {"retry-remaining-ttl"},
	"release-after-expiry-nil": {"not-held-after-expiry"},
	"extend-revives":           {"extend-never-revives"},
	"fence-forgotten":          {"fence-after-idle"},
	"no-waiter-cap":            {"waiter-cap"},
	"subscribe-early":          {"subscribe-live"},
	"no-wake-all":              {"reconnect-wakes-all"},
	"batch-reversed":           {"batch-order"},
	"refresh-dead-entry":       {"purge-limit"},
	"head-untold":              {"head-after-grant"},
}

// alsoFails lists, per broken backend, the other properties that its
// breakage may fail too, because they exercise the same step.
var alsoFails = map[string][]string{
	// model drives AcquireBatch with several requests on one id.
	"batch-reversed": {"model"},
	// owner-only and lost-lease-signalled extend a lease the store ended
	// (Expirer) through the core, which then calls the backend's Extend.
	// extend-batch asks to extend a lease that ended.
	"extend-revives": {"owner-only", "lost-lease-signalled", "extend-batch"},
	// extend-batch reads what is left of a lease through the holder's
	// retried Acquire.
	"retry-full-ttl": {"extend-batch"},
	// The copies of a wake-up, one per waiter, all reach the head's
	// process: more than one-delivery-per-wake allows.
	"wake-every-waiter": {"one-delivery-per-wake"},
	// batch-order puts an ErrQueueFull in a batch, on a full queue.
	"no-waiter-cap": {"batch-order"},
	// wake-new-head's heartbeat case has a waiter behind the new head;
	// head-after-grant's told wake-up then names the tail, not the head.
	// The head's process gets the wake-up renamed, and one-delivery-per-wake's
	// head is not woken.
	// subscribe-scoped's release wakes the head through its process's
	// remaining subscription; the tail's process gets it instead.
	"wake-tail": {"wake-new-head", "head-after-grant", "one-delivery-per-wake", "subscribe-scoped"},
	// Their muted steps also tell the new head of a held lock:
	// head-after-grant's Leave (leave-no-wake) and grant (purge-no-wake,
	// which mutes every wake-up of an Acquire step).
	"leave-no-wake": {"head-after-grant"},
	"purge-no-wake": {"head-after-grant"},
	// A subscription made in the background may miss wake-new-head's
	// wake-up even without a delay (a race the property may lose).
	// subscribe-scoped releases right after Subscribe returned.
	"subscribe-early": {"wake-new-head", "subscribe-scoped"},
}

// TestBrokenBackend runs the conformance suite against the backend named by
// $LOCK_CONFORMANCE_BROKEN. It is meant to fail: it runs only as a
// subprocess of TestSuiteCatchesBrokenBackends, which checks that it fails
// under the expected property.
func TestBrokenBackend(t *testing.T) {
	kind, ok := os.LookupEnv(brokenEnv)
	if !ok {
		t.Skip("runs only as a subprocess of TestSuiteCatchesBrokenBackends")
	}
	if _, known := brokenKinds[kind]; !known && kind != controlName {
		t.Fatalf("%s=%q: unknown broken backend", brokenEnv, kind)
	}
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return newBrokenHarness(kind)
	})
}

// brokenHarness makes backends on one memorybackend Store, each wrapped in
// the named breakage (or not, for the control). It has every capability of
// the embedded harness.Memory, which states them.
type brokenHarness struct {
	*harness.Memory
	kind   string
	fakes  *fakeGrants // double-grant's fake leases, shared like the store
	jump   sync.Mutex  // serializes the steps of queue-jump's backends
	muted  *muter      // leave-no-wake's muted ids
	fences *idFences   // fence-forgotten's per-id counters
	book   *stepBook   // the grants and entries stepBreakage tracks
	ledger *ledger     // the grants and entries ledgerBreakage tracks
	shared *sharedBook // what the sharedBreakage backends share
}

func newBrokenHarness(kind string) *brokenHarness {
	// no-waiter-cap's store has the default cap, far above what Limits
	// states. The breakages are of the wake-then-acquire protocol: the
	// store does not hand off (the wrappers are no backend.HandOffer), but
	// for the shared kinds that break a hand-off (sharedHandOffKinds).
	mh := harness.NewMemory(kind == "no-waiter-cap", !sharedHandOffKinds[kind])
	if kind == "purge-slow" {
		// The store purges one dead entry per step; Limits states more.
		store, err := memstore.NewStore(&memstore.Options{MaxWaiters: harness.MaxWaiters, PurgeLimit: 1, NoHandOff: true})
		if err != nil {
			panic(err)
		}
		mh.Store = store
	}
	mh.Unwrap = memoryOf
	return &brokenHarness{
		Memory: mh,
		kind:   kind,
		fakes:  &fakeGrants{byKey: make(map[string]*fakeGrant)},
		muted:  &muter{ids: make(map[string]int)},
		fences: &idFences{byID: make(map[string]*idFence)},
		book:   &stepBook{granted: make(map[string]bool), queued: make(map[string]backend.AcquireRequest)},
		ledger: newLedger(),
		shared: newSharedBook(),
	}
}

func (h *brokenHarness) NewBackend(t *testing.T) backend.Backend {
	inner := h.Store.NewBackend()
	if b := newStepBreakage(h, inner); b != nil {
		return b
	}
	if b := newLedgerBreakage(h, inner); b != nil {
		return b
	}
	if b := newSharedBreakage(h, inner); b != nil {
		return b
	}
	switch h.kind {
	case controlName:
		return inner
	case "double-grant":
		return batched{&doubleGrant{wrapped: wrapped{inner}, fakes: h.fakes}}
	case "queue-jump":
		return batched{&queueJump{wrapped: wrapped{inner}, store: h.Store, mu: &h.jump}}
	case "drop-wakeups":
		return batched{&dropWakeups{wrapped: wrapped{inner}}}
	case "repeat-fence":
		return batched{&repeatFence{wrapped: wrapped{inner}}}
	}
	t.Fatalf("unknown broken backend %q", h.kind)
	return nil
}

// ForgetIdle drops id's idle entry; fence-forgotten forgets its counter.
// Limits, from the embedded harness, states the store's limits (for
// no-waiter-cap, the limit the store fails to enforce).
func (h *brokenHarness) ForgetIdle(t *testing.T, id string) {
	h.Memory.ForgetIdle(t, id)
	h.fences.forget(id)
}

// memoryOf returns the memorybackend Backend inside b.
func memoryOf(t *testing.T, b backend.Backend) *memstore.Backend {
	switch b := b.(type) {
	case *memstore.Backend:
		return b
	case interface{ memory() *memstore.Backend }:
		return b.memory()
	}
	t.Fatalf("not a backend of the broken harness: %T", b)
	return nil
}

// ExpireNow ends id's lease in the store and double-grant's fake one.
func (h *brokenHarness) ExpireNow(t *testing.T, id string) {
	h.Memory.ExpireNow(t, id)
	h.fakes.expire(id)
}

// wrapped passes every step through to a memorybackend Backend. The
// broken backends embed it and override the step they break, and get
// backend.Batcher with the core's fallbacks over themselves (batched).
type wrapped struct {
	inner *memstore.Backend
}

func (w wrapped) memory() *memstore.Backend { return w.inner }

func (w wrapped) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	return w.inner.Acquire(ctx, req)
}

func (w wrapped) Release(ctx context.Context, id, token string) error {
	return w.inner.Release(ctx, id, token)
}

func (w wrapped) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	return w.inner.Extend(ctx, id, token, ttl)
}

func (w wrapped) Leave(ctx context.Context, id, token string) error {
	return w.inner.Leave(ctx, id, token)
}

func (w wrapped) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	return w.inner.Heartbeat(ctx, waiters, waiterTTL)
}

func (w wrapped) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (func(), error) {
	return w.inner.Subscribe(ctx, id, fn)
}

func (w wrapped) Close() error { return w.inner.Close() }

// acquireBatch and leaveBatch run the core's fallbacks over b, one step
// at a time: b's own Batcher would recurse.
func acquireBatch(ctx context.Context, b backend.Backend, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	return fallback.AcquireEach(ctx, b, reqs)
}

func leaveBatch(ctx context.Context, b backend.Backend, waiters []backend.Waiter) error {
	return fallback.LeaveEach(ctx, b, waiters)
}

// brokenBackend is a broken backend that wraps a memorybackend Backend.
type brokenBackend interface {
	backend.Backend
	memory() *memstore.Backend
}

// batched gives a broken backend backend.Batcher through the core's
// fallbacks over the broken backend itself, so that its breakage applies
// to batched steps too.
type batched struct{ brokenBackend }

func (b batched) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	return acquireBatch(ctx, b.brokenBackend, reqs)
}

func (b batched) LeaveBatch(ctx context.Context, waiters []backend.Waiter) error {
	return leaveBatch(ctx, b.brokenBackend, waiters)
}

// ---------------------------------------------------------------------------
// double-grant: Acquire reports a grant even when the lock is held by
// someone else (S1, "mutual-exclusion").

// doubleGrant grants every Acquire: when the store refuses, it removes the
// requester's queue entry and reports a fake grant (fresh fence, req.TTL),
// and then honours the fake lease in Release, Extend and Leave so that
// nothing but the exclusion is broken.
type doubleGrant struct {
	wrapped
	fakes *fakeGrants
}

type fakeGrants struct {
	mu    sync.Mutex
	fence uint64 // fences of fake grants: above every real one of the Store
	byKey map[string]*fakeGrant
}

type fakeGrant struct {
	fence  uint64
	expiry time.Time
}

func fakeKey(id, token string) string { return id + "\x00" + token }

// grant returns the fake lease of (id, token), new or retried.
func (f *fakeGrants) grant(id, token string, ttl time.Duration) backend.Grant {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if g := f.byKey[fakeKey(id, token)]; g != nil && g.expiry.After(now) {
		return backend.Grant{Acquired: true, Fence: g.fence, TTL: g.expiry.Sub(now)}
	}
	f.fence++
	// Above every fence of the Store (the wall clock in µs), so a fake
	// grant never has a lower fence than the real grants before it (a real
	// grant after it does).
	fence := 1<<62 + f.fence
	f.byKey[fakeKey(id, token)] = &fakeGrant{fence: fence, expiry: now.Add(ttl)}
	return backend.Grant{Acquired: true, Fence: fence, TTL: ttl}
}

// take reports whether token holds a live fake lease on id, and applies fn
// to it while locked.
func (f *fakeGrants) take(id, token string, fn func(k string, g *fakeGrant)) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := fakeKey(id, token)
	g := f.byKey[k]
	if g == nil {
		return false
	}
	if !g.expiry.After(time.Now()) {
		delete(f.byKey, k)
		return false
	}
	fn(k, g)
	return true
}

func (f *fakeGrants) expire(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.byKey {
		if strings.HasPrefix(k, id+"\x00") {
			delete(f.byKey, k)
		}
	}
}

func (b *doubleGrant) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	if b.fakes.take(req.ID, req.Token, func(string, *fakeGrant) {}) {
		return b.fakes.grant(req.ID, req.Token, req.TTL), nil
	}
	g, err := b.inner.Acquire(ctx, req)
	if err != nil || g.Acquired {
		return g, err
	}
	// The bug: the lock is held (or others wait), and we grant anyway.
	if g.Queued {
		if err := b.inner.Leave(ctx, req.ID, req.Token); err != nil {
			return backend.Grant{}, err
		}
	}
	return b.fakes.grant(req.ID, req.Token, req.TTL), nil
}

func (b *doubleGrant) Release(ctx context.Context, id, token string) error {
	if b.fakes.take(id, token, func(k string, _ *fakeGrant) { delete(b.fakes.byKey, k) }) {
		return nil
	}
	return b.inner.Release(ctx, id, token)
}

func (b *doubleGrant) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	if b.fakes.take(id, token, func(_ string, g *fakeGrant) { g.expiry = time.Now().Add(ttl) }) {
		return nil
	}
	return b.inner.Extend(ctx, id, token, ttl)
}

func (b *doubleGrant) Leave(ctx context.Context, id, token string) error {
	b.fakes.take(id, token, func(k string, _ *fakeGrant) { delete(b.fakes.byKey, k) })
	return b.inner.Leave(ctx, id, token)
}

// ---------------------------------------------------------------------------
// queue-jump: whoever asks while the lock is free gets it, whatever the
// queue says, and a release's wake-up names the newest waiter, not the head
// (L2, "fifo-order"; TryAcquire jumps the queue too, "try-acquire-fair").

// queueJump grants an Acquire whenever the lock is free: if the store
// refuses because waiters are ahead of the requester, it moves them to the
// tail of the queue (Leave, then re-enqueue with new tickets) and acquires
// again. Its wake-ups name the tail of the queue instead of the head (in
// the head's process, which the store wakes).
//
// Every step of every queueJump backend of a harness runs under one shared
// mutex, so that the jump's several inner steps are atomic with respect to
// the other clients: it only reorders the queue, and never releases a lock
// that someone holds (the exclusion itself stays intact).
type queueJump struct {
	wrapped
	store *memstore.Store
	mu    *sync.Mutex // shared by every backend of the harness
}

func (b *queueJump) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.inner.Acquire(ctx, req)
	if err != nil || g.Acquired {
		return g, err
	}
	if _, held := b.store.Holder(req.ID); held {
		return g, nil
	}
	// The lock is free but others are queued ahead: the bug moves them
	// behind the requester. None of them holds the lock (it is free, and
	// no other step runs meanwhile), so Leave only removes their entries.
	var ahead []string
	for _, w := range b.store.Waiters(req.ID) {
		if w == req.Token {
			break
		}
		ahead = append(ahead, w)
	}
	if len(ahead) == 0 {
		return g, nil
	}
	for _, w := range ahead {
		if err := b.inner.Leave(ctx, req.ID, w); err != nil {
			return backend.Grant{}, err
		}
	}
	g, err = b.inner.Acquire(ctx, req)
	ttl := req.WaiterTTL
	if ttl <= 0 {
		ttl = time.Minute
	}
	bg := context.WithoutCancel(ctx)
	for _, w := range ahead {
		r := backend.AcquireRequest{ID: req.ID, Token: w, TTL: req.TTL, Wait: true, WaiterTTL: ttl}
		if rg, rerr := b.inner.Acquire(bg, r); rerr == nil && rg.Acquired {
			// The requester's grant already ended (it was not granted
			// or its TTL ran out): nobody asked for this grant, give it
			// back.
			_ = b.inner.Leave(bg, req.ID, w)
		}
	}
	return g, err
}

func (b *queueJump) Release(ctx context.Context, id, token string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inner.Release(ctx, id, token)
}

func (b *queueJump) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inner.Extend(ctx, id, token, ttl)
}

func (b *queueJump) Leave(ctx context.Context, id, token string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inner.Leave(ctx, id, token)
}

func (b *queueJump) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inner.Heartbeat(ctx, waiters, waiterTTL)
}

func (b *queueJump) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (func(), error) {
	return b.inner.Subscribe(ctx, id, func(wk backend.Wake) {
		if wk.Token == "" || wk.All {
			fn(wk)
			return
		}
		// Wake the newest waiter instead of the head.
		if ws := b.store.Waiters(wk.ID); len(ws) > 0 {
			wk.Token = ws[len(ws)-1]
		}
		fn(wk)
	})
}

// ---------------------------------------------------------------------------
// drop-wakeups: Subscribe succeeds but never delivers a wake-up (L1,
// "wake-on-release"). Waiters are left with the core's fallbacks (the
// holder's TTL timer and the heartbeat).

type dropWakeups struct {
	wrapped
}

func (b *dropWakeups) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return func() {}, nil
}

// ---------------------------------------------------------------------------
// repeat-fence: every grant reports fence 1 (S3, "fencing").

type repeatFence struct {
	wrapped
}

func (b *repeatFence) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	g, err := b.inner.Acquire(ctx, req)
	if g.Acquired {
		g.Fence = 1
	}
	return g, err
}

// ---------------------------------------------------------------------------

// TestBrokenWrappersMisbehave checks each broken backend directly, without
// the suite: it really breaks what it claims to, and the control does not.
func TestBrokenWrappersMisbehave(t *testing.T) {
	ctx := context.Background()
	req := func(id, tok string, wait bool) backend.AcquireRequest {
		return backend.AcquireRequest{ID: id, Token: tok, TTL: time.Minute, Wait: wait, WaiterTTL: time.Minute}
	}
	mustAcquire := func(t *testing.T, b backend.Backend, r backend.AcquireRequest) backend.Grant {
		t.Helper()
		g, err := b.Acquire(ctx, r)
		if err != nil {
			t.Fatalf("Acquire(%s): %v", r.Token, err)
		}
		return g
	}

	t.Run("double-grant", func(t *testing.T) {
		h := newBrokenHarness("double-grant")
		a, b := h.NewBackend(t), h.NewBackend(t)
		defer a.Close()
		defer b.Close()
		ga := mustAcquire(t, a, req("x", "A", false))
		gb := mustAcquire(t, b, req("x", "B", true))
		if !ga.Acquired || !gb.Acquired {
			t.Fatalf("want both granted, got A=%+v B=%+v", ga, gb)
		}
		if gb.Fence <= ga.Fence {
			t.Errorf("fake fence %d not above the real one %d", gb.Fence, ga.Fence)
		}
		if ws := h.Store.Waiters("x"); len(ws) != 0 {
			t.Errorf("fake holder left queued: %v", ws)
		}
		if g := mustAcquire(t, b, req("x", "B", true)); !g.Acquired || g.Fence != gb.Fence {
			t.Errorf("retried fake grant = %+v, want fence %d", g, gb.Fence)
		}
		if err := b.Extend(ctx, "x", "B", time.Minute); err != nil {
			t.Errorf("Extend of the fake lease: %v", err)
		}
		if err := b.Release(ctx, "x", "B"); err != nil {
			t.Errorf("Release of the fake lease: %v", err)
		}
		if err := b.Release(ctx, "x", "B"); err == nil {
			t.Errorf("second Release of the fake lease: nil error")
		}
		if err := a.Release(ctx, "x", "A"); err != nil {
			t.Errorf("Release of the real lease: %v", err)
		}
		// Batches are broken too.
		mustAcquire(t, a, req("y", "A", false))
		bg, err := b.(backend.Batcher).AcquireBatch(ctx, []backend.AcquireRequest{req("y", "B", false)})
		if err != nil || len(bg) != 1 || !bg[0].Acquired {
			t.Errorf("AcquireBatch = %+v, %v; want a double grant", bg, err)
		}
	})

	t.Run("queue-jump", func(t *testing.T) {
		h := newBrokenHarness("queue-jump")
		a, b, c := h.NewBackend(t), h.NewBackend(t), h.NewBackend(t)
		defer a.Close()
		defer b.Close()
		defer c.Close()
		var woken []string
		var mu sync.Mutex
		// The release's wake-up reaches the head's process, B's.
		cancel, err := b.Subscribe(ctx, "x", func(wk backend.Wake) {
			mu.Lock()
			woken = append(woken, wk.Token)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		defer cancel()
		mustAcquire(t, a, req("x", "A", false))
		if g := mustAcquire(t, b, req("x", "B", true)); g.Acquired || !g.Head {
			t.Fatalf("B = %+v, want queued head", g)
		}
		if g := mustAcquire(t, c, req("x", "C", true)); g.Acquired || g.Head {
			t.Fatalf("C = %+v, want queued behind B", g)
		}
		if err := a.Release(ctx, "x", "A"); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := append([]string(nil), woken...)
		mu.Unlock()
		if len(got) != 1 || got[0] != "C" {
			t.Errorf("release woke %v, want [C] (the tail)", got)
		}
		// C, behind B, is granted while B waits.
		if g := mustAcquire(t, c, req("x", "C", true)); !g.Acquired {
			t.Fatalf("C = %+v, want granted ahead of B", g)
		}
		if ws := h.Store.Waiters("x"); len(ws) != 1 || ws[0] != "B" {
			t.Errorf("waiters = %v, want [B] re-queued", ws)
		}
		// A newcomer's TryAcquire jumps a queue over a free lock.
		h.Store.ExpireNow("x")
		if g := mustAcquire(t, a, req("x", "A2", false)); !g.Acquired {
			t.Errorf("newcomer = %+v, want granted ahead of B", g)
		}
		if ws := h.Store.Waiters("x"); len(ws) != 1 || ws[0] != "B" {
			t.Errorf("waiters = %v, want [B] re-queued", ws)
		}
		// Batches are broken too.
		h.Store.ExpireNow("x")
		bg, err := a.(backend.Batcher).AcquireBatch(ctx, []backend.AcquireRequest{req("x", "A3", false)})
		if err != nil || len(bg) != 1 || !bg[0].Acquired {
			t.Errorf("AcquireBatch = %+v, %v; want a queue jump", bg, err)
		}
	})

	t.Run("drop-wakeups", func(t *testing.T) {
		h := newBrokenHarness("drop-wakeups")
		a, b := h.NewBackend(t), h.NewBackend(t)
		defer a.Close()
		defer b.Close()
		var woken atomic.Int64
		cancel, err := b.Subscribe(ctx, "x", func(backend.Wake) { woken.Add(1) })
		if err != nil {
			t.Fatal(err)
		}
		defer cancel()
		mustAcquire(t, a, req("x", "A", false))
		mustAcquire(t, b, req("x", "B", true))
		if err := a.Release(ctx, "x", "A"); err != nil {
			t.Fatal(err)
		}
		if n := woken.Load(); n != 0 {
			t.Errorf("%d wake-ups delivered, want none", n)
		}
		if g := mustAcquire(t, b, req("x", "B", true)); !g.Acquired {
			t.Errorf("B = %+v, want granted (only the wake-up is broken)", g)
		}
	})

	t.Run("repeat-fence", func(t *testing.T) {
		h := newBrokenHarness("repeat-fence")
		a := h.NewBackend(t)
		defer a.Close()
		for i := range 3 {
			g := mustAcquire(t, a, req("x", "A"+string(rune('0'+i)), false))
			if !g.Acquired || g.Fence != 1 {
				t.Errorf("grant %d = %+v, want fence 1", i, g)
			}
			if err := a.Release(ctx, "x", "A"+string(rune('0'+i))); err != nil {
				t.Fatal(err)
			}
		}
		bg, err := a.(backend.Batcher).AcquireBatch(ctx, []backend.AcquireRequest{req("y", "A", false)})
		if err != nil || len(bg) != 1 || !bg[0].Acquired || bg[0].Fence != 1 {
			t.Errorf("AcquireBatch = %+v, %v; want fence 1", bg, err)
		}
	})

	t.Run(controlName, func(t *testing.T) {
		h := newBrokenHarness(controlName)
		a, b := h.NewBackend(t), h.NewBackend(t)
		defer a.Close()
		defer b.Close()
		ga := mustAcquire(t, a, req("x", "A", false))
		gb := mustAcquire(t, b, req("x", "B", true))
		if !ga.Acquired || gb.Acquired || !gb.Queued {
			t.Errorf("control: A=%+v B=%+v, want A granted and B queued", ga, gb)
		}
	})
}
