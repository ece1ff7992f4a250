package memstore_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/memstore"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// Shared ids (checklist item 15), driven through the backend interface on
// a ManualClock, with and without direct hand-off.

const sid = "s"

type sharedEnv struct {
	t      *testing.T
	ctx    context.Context
	clock  *memstore.ManualClock
	store  *memstore.Store
	b      *memstore.Backend
	handed bool

	mu    sync.Mutex
	wakes []backend.Wake
}

func newShared(t *testing.T, handOff bool) *sharedEnv {
	t.Helper()
	e := &sharedEnv{t: t, ctx: context.Background(), clock: memstore.NewManualClock(epoch), handed: handOff}
	e.store = testkit.Must(memstore.NewStore(&memstore.Options{Clock: e.clock, NoHandOff: !handOff}))
	e.b = e.store.NewBackend()
	cancel, err := e.b.Subscribe(e.ctx, sid, func(w backend.Wake) {
		e.mu.Lock()
		e.wakes = append(e.wakes, w)
		e.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return e
}

// bothWays runs f with and without hand-off.
func bothWays(t *testing.T, f func(t *testing.T, e *sharedEnv)) {
	for _, h := range []bool{true, false} {
		name := "handoff"
		if !h {
			name = "no-handoff"
		}
		t.Run(name, func(t *testing.T) { f(t, newShared(t, h)) })
	}
}

func sreq(tok string, capacity, permits int, wait bool) backend.AcquireRequest {
	return backend.AcquireRequest{ID: sid, Token: tok, TTL: ttl, Wait: wait, WaiterTTL: waiterTTL, Capacity: capacity, Permits: permits}
}

func (e *sharedEnv) acquire(r backend.AcquireRequest) backend.Grant {
	e.t.Helper()
	g, err := e.b.Acquire(e.ctx, r)
	if err != nil {
		e.t.Fatalf("Acquire(%s): %v", r.Token, err)
	}
	return g
}

func (e *sharedEnv) takeWakes() []backend.Wake {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.wakes
	e.wakes = nil
	return w
}

func (e *sharedEnv) holders(want ...string) {
	e.t.Helper()
	if got := e.store.Holders(sid); !slices.Equal(got, want) {
		e.t.Fatalf("Holders = %v, want %v", got, want)
	}
}

func (e *sharedEnv) waiters(want ...string) {
	e.t.Helper()
	if got := e.store.Waiters(sid); !slices.Equal(got, want) {
		e.t.Fatalf("Waiters = %v, want %v", got, want)
	}
}

// granted checks the wake-ups since the last check: with hand-off, one
// grant per token, in order, with strictly increasing fences above after;
// without, one plain wake-up per token, after which each token's own
// Acquire is granted (in order). It returns the fences.
func (e *sharedEnv) granted(after uint64, capacity, permits int, toks ...string) []uint64 {
	e.t.Helper()
	wakes := e.takeWakes()
	var fences []uint64
	if len(wakes) != len(toks) {
		e.t.Fatalf("wake-ups %+v, want one for each of %v", wakes, toks)
	}
	for i, w := range wakes {
		if w.ID != sid || w.Token != toks[i] || w.HolderTTL != 0 {
			e.t.Fatalf("wake-up %d: %+v, want one for %s", i, w, toks[i])
		}
		if e.handed {
			if w.Grant == nil {
				e.t.Fatalf("wake-up %d: %+v, want a grant for %s", i, w, toks[i])
			}
			fences = append(fences, w.Grant.Fence)
			continue
		}
		if w.Grant != nil {
			e.t.Fatalf("wake-up %d: %+v carries a grant without hand-off", i, w)
		}
	}
	if !e.handed {
		for _, tok := range toks {
			g := e.acquire(sreq(tok, capacity, permits, true))
			if !g.Acquired {
				e.t.Fatalf("%s, woken, Acquire: %+v, want granted", tok, g)
			}
			fences = append(fences, g.Fence)
		}
		e.takeWakes() // what their grants told the next head
	}
	for _, f := range fences {
		if f <= after {
			e.t.Fatalf("fences %v after %d: want strictly increasing", fences, after)
		}
		after = f
	}
	return fences
}

// TestSharedBatchedHandOff: an exclusive holder's release lets both shared
// waiters behind it in at once; the exclusive waiter behind them is told
// and blocks a later shared request that would fit.
func TestSharedBatchedHandOff(t *testing.T) {
	bothWays(t, func(t *testing.T, e *sharedEnv) {
		x := e.acquire(sreq("X", 3, 3, false))
		if !x.Acquired {
			t.Fatalf("X on a free id: %+v", x)
		}
		for _, tok := range []string{"S1", "S2"} {
			if g := e.acquire(sreq(tok, 3, 1, true)); g.Acquired || !g.Queued || g.HolderTTL != ttl {
				t.Fatalf("%s behind an exclusive holder: %+v, want queued with HolderTTL %v", tok, g, ttl)
			}
		}
		if g := e.acquire(sreq("X2", 3, 3, true)); g.Acquired || !g.Queued {
			t.Fatalf("X2: %+v, want queued", g)
		}
		if g := e.acquire(sreq("S3", 3, 1, true)); g.Acquired || !g.Queued {
			t.Fatalf("S3: %+v, want queued", g)
		}
		e.clock.Advance(time.Second)
		if err := e.b.Release(e.ctx, sid, "X"); err != nil {
			t.Fatal(err)
		}
		if e.handed {
			wakes := e.takeWakes()
			if len(wakes) != 3 || wakes[2].Token != "X2" || wakes[2].HolderTTL != ttl {
				t.Fatalf("wake-ups %+v, want S1's and S2's grants, then X2 told the first lease's TTL %v", wakes, ttl)
			}
			e.mu.Lock()
			e.wakes = wakes[:2]
			e.mu.Unlock()
		}
		e.granted(x.Fence, 3, 1, "S1", "S2")
		e.holders("S1", "S2")
		e.waiters("X2", "S3")
		if g := e.acquire(sreq("S3", 3, 1, false)); g.Acquired {
			t.Fatalf("S3 behind X2, with permits that fit: %+v, want refused (no writer starvation)", g)
		}
		if g := e.acquire(sreq("S4", 3, 1, false)); g.Acquired || g.Queued || g.HolderTTL != ttl {
			t.Fatalf("S4, a newcomer: %+v, want refused with HolderTTL %v", g, ttl)
		}
	})
}

// TestSharedExclusiveHeadBlocks: an exclusive waiter waits for every shared
// holder, and no shared request passes it.
func TestSharedExclusiveHeadBlocks(t *testing.T) {
	bothWays(t, func(t *testing.T, e *sharedEnv) {
		e.acquire(sreq("S1", 2, 1, false))
		if g := e.acquire(sreq("S2", 2, 1, false)); !g.Acquired {
			t.Fatalf("S2 beside S1: %+v, want granted", g)
		}
		if g := e.acquire(sreq("X", 2, 2, true)); g.Acquired || !g.Head {
			t.Fatalf("X: %+v, want queued head", g)
		}
		if err := e.b.Release(e.ctx, sid, "S1"); err != nil {
			t.Fatal(err)
		}
		if g := e.acquire(sreq("S3", 2, 1, true)); g.Acquired || g.Head {
			t.Fatalf("S3 behind X, one permit free: %+v, want queued behind X", g)
		}
		if w := e.takeWakes(); len(w) != 0 {
			t.Fatalf("wake-ups %+v after S1's release; X does not fit yet", w)
		}
		if err := e.b.Release(e.ctx, sid, "S2"); err != nil {
			t.Fatal(err)
		}
		if e.handed {
			wakes := e.takeWakes()
			if len(wakes) != 2 || wakes[0].Token != "X" || wakes[0].Grant == nil || wakes[1].Token != "S3" || wakes[1].HolderTTL != ttl {
				t.Fatalf("wake-ups %+v, want X's grant, then S3 told", wakes)
			}
		} else {
			e.granted(0, 2, 2, "X")
		}
		e.holders("X")
		e.waiters("S3")
		if err := e.b.Release(e.ctx, sid, "X"); err != nil {
			t.Fatal(err)
		}
		e.granted(0, 2, 1, "S3")
		e.holders("S3")
	})
}

// TestSharedCapacityConflict: another capacity while the id is in use is
// ErrCapacity and changes nothing; once idle, the capacity is forgotten.
func TestSharedCapacityConflict(t *testing.T) {
	e := newShared(t, true)
	e.acquire(sreq("S1", 3, 1, false))
	e.acquire(sreq("X", 3, 3, true))
	for _, r := range []backend.AcquireRequest{
		sreq("M", 0, 0, true), sreq("M", 1, 0, false), sreq("T", 4, 1, true), sreq("T", 2, 1, false),
	} {
		if g, err := e.b.Acquire(e.ctx, r); !errors.Is(err, backend.ErrCapacity) || g.Acquired || g.Queued {
			t.Errorf("capacity %d on an id of capacity 3: %+v, %v; want ErrCapacity", r.Capacity, g, err)
		}
		// A batch reports it in the request's place.
		bg, err := e.b.AcquireBatch(e.ctx, []backend.AcquireRequest{r, sreq("S2", 3, 1, false)})
		if err != nil || len(bg) != 2 || !errors.Is(bg[0].Err, backend.ErrCapacity) || bg[1].Err != nil || !bg[1].Grant.Queued && bg[1].Grant.Acquired {
			t.Errorf("AcquireBatch with capacity %d: %+v, %v; want ErrCapacity in place 0", r.Capacity, bg, err)
		}
	}
	e.holders("S1")
	e.waiters("X")
	if err := e.b.Leave(e.ctx, sid, "X"); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Release(e.ctx, sid, "S1"); err != nil {
		t.Fatal(err)
	}
	// Idle: a mutex now, then a shared id of another capacity.
	if g := e.acquire(sreq("M", 0, 0, false)); !g.Acquired {
		t.Fatalf("a mutex request on the idle id: %+v", g)
	}
	if g, err := e.b.Acquire(e.ctx, sreq("T", 2, 1, true)); !errors.Is(err, backend.ErrCapacity) || g.Queued {
		t.Fatalf("a shared request on a held mutex: %+v, %v; want ErrCapacity", g, err)
	}
	if got := e.store.Waiters(sid); len(got) != 0 {
		t.Fatalf("Waiters = %v after ErrCapacity", got)
	}
	e.clock.Advance(ttl) // the mutex lease ends: the id is idle
	if g := e.acquire(sreq("T", 5, 2, false)); !g.Acquired {
		t.Fatalf("capacity 5 once the mutex's lease ended: %+v", g)
	}
	in, err := e.b.Inspect(e.ctx, sid, 10)
	if err != nil || in.Capacity != 5 {
		t.Fatalf("Inspect: %+v, %v; want capacity 5", in, err)
	}
}

// TestSharedExpiryFreesPermits: a lease that ends frees its permits; the
// holder's TTL a waiter is told is that of the lease that ends first.
func TestSharedExpiryFreesPermits(t *testing.T) {
	bothWays(t, func(t *testing.T, e *sharedEnv) {
		e.acquire(sreq("S1", 2, 1, false))
		long := sreq("S2", 2, 1, false)
		long.TTL = 2 * ttl
		e.acquire(long)
		xr := sreq("X", 2, 2, true)
		xr.WaiterTTL = time.Hour
		if g := e.acquire(xr); g.Acquired || g.HolderTTL != ttl {
			t.Fatalf("X: %+v, want queued with HolderTTL %v (the lease that ends first)", g, ttl)
		}
		e.clock.Advance(ttl)
		hb, err := e.b.Heartbeat(e.ctx, []backend.Waiter{{ID: sid, Token: "X"}}, time.Hour)
		if err != nil || !hb[0].Queued || hb[0].Ready {
			t.Fatalf("X's heartbeat, S1 ended, S2 live: %+v, %v; want queued, not ready", hb, err)
		}
		e.holders("S2")
		if g := e.acquire(sreq("S3", 2, 1, false)); g.Acquired || g.HolderTTL != ttl {
			t.Fatalf("S3 with a free permit behind X: %+v, want refused, HolderTTL %v", g, ttl)
		}
		if w := e.takeWakes(); len(w) != 0 {
			t.Fatalf("wake-ups %+v while X does not fit", w)
		}
		e.clock.Advance(ttl)
		hb, err = e.b.Heartbeat(e.ctx, []backend.Waiter{{ID: sid, Token: "X"}}, time.Hour)
		if err != nil || !hb[0].Queued || hb[0].Ready == e.handed {
			t.Fatalf("X's heartbeat, every lease ended: %+v, %v; want queued, ready only without hand-off", hb, err)
		}
		e.granted(0, 2, 2, "X")
		e.holders("X")
	})
}

// TestSharedRetryAndLeave: a holder's retry reports its lease; Extend
// keeps the fence; Leave releases a lease; Release finds the token's lease.
func TestSharedRetryAndLeave(t *testing.T) {
	e := newShared(t, true)
	a := e.acquire(sreq("A", 3, 1, false))
	b := e.acquire(sreq("B", 3, 2, false))
	if !a.Acquired || !b.Acquired || b.Fence <= a.Fence {
		t.Fatalf("A %+v, B %+v: want both granted, B's fence above A's", a, b)
	}
	e.clock.Advance(time.Second)
	if g := e.acquire(sreq("A", 3, 1, true)); !g.Acquired || g.Fence != a.Fence || g.TTL != ttl-time.Second {
		t.Fatalf("A's retry: %+v, want fence %d and TTL %v", g, a.Fence, ttl-time.Second)
	}
	if err := e.b.Extend(e.ctx, sid, "B", ttl); err != nil {
		t.Fatal(err)
	}
	if g := e.acquire(sreq("B", 3, 2, false)); g.Fence != b.Fence || g.TTL != ttl {
		t.Fatalf("B's retry after Extend: %+v, want fence %d, TTL %v", g, b.Fence, ttl)
	}
	if err := e.b.Release(e.ctx, sid, "C"); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Release by a non-holder: %v", err)
	}
	if err := e.b.Leave(e.ctx, sid, "A"); err != nil {
		t.Fatal(err)
	}
	e.holders("B")
	if err := e.b.Release(e.ctx, sid, "A"); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Release after Leave: %v", err)
	}
	if err := e.b.Release(e.ctx, sid, "B"); err != nil {
		t.Fatal(err)
	}
	if n := e.store.Len(); n != 0 {
		t.Fatalf("Len = %d after every lease went, want 0", n)
	}
}

// TestSharedInspect: Inspect lists the holders in fence order with their
// permits, the capacity, and the waiters' permits; a mutex reports none.
func TestSharedInspect(t *testing.T) {
	e := newShared(t, true)
	a := e.acquire(sreq("A", 4, 1, false))
	e.clock.Advance(time.Second)
	b := e.acquire(sreq("B", 4, 2, false))
	e.acquire(sreq("W", 4, 4, true))
	in, err := e.b.Inspect(e.ctx, sid, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []backend.HolderInfo{
		{Fence: a.Fence, TTL: ttl - time.Second, Holder: backend.Fingerprint("A"), Permits: 1},
		{Fence: b.Fence, TTL: ttl, Holder: backend.Fingerprint("B"), Permits: 2},
	}
	if !slices.Equal(in.Holders, want) || in.Capacity != 4 || !in.Held || in.Fence != b.Fence || in.TTL != ttl || in.Holder != backend.Fingerprint("B") {
		t.Fatalf("Inspect = %+v, want holders %+v, capacity 4, the last lease as Held/Fence/TTL/Holder", in, want)
	}
	if in.QueueLen != 1 || len(in.Waiters) != 1 || in.Waiters[0].Permits != 4 {
		t.Fatalf("Inspect waiters = %+v, want W with 4 permits", in.Waiters)
	}
	e.clock.Advance(ttl - time.Second) // A's lease ends
	if in, _ := e.b.Inspect(e.ctx, sid, 10); len(in.Holders) != 1 || in.Holders[0].Fence != b.Fence {
		t.Fatalf("Inspect after A's lease ended: %+v, want B alone", in.Holders)
	}
	m := backend.AcquireRequest{ID: "m", Token: "M", TTL: ttl, Wait: true, WaiterTTL: waiterTTL}
	e.acquire(m)
	m.Token = "N"
	e.acquire(m)
	in, err = e.b.Inspect(e.ctx, "m", 10)
	if err != nil || in.Capacity != 0 || in.Holders != nil || !in.Held || len(in.Waiters) != 1 || in.Waiters[0].Permits != 0 {
		t.Fatalf("Inspect of a mutex = %+v, %v; want no capacity, no Holders, waiters with 0 permits", in, err)
	}
}

// TestSharedBadArguments: a negative capacity or permits out of range are
// refused before anything changes, alone and in a batch.
func TestSharedBadArguments(t *testing.T) {
	e := newShared(t, true)
	cases := []struct {
		r   backend.AcquireRequest
		arg string
	}{
		{sreq("A", -1, 0, true), "capacity"},
		{sreq("A", 3, 0, true), "permits"},
		{sreq("A", 3, 4, true), "permits"},
		{sreq("A", 2, -1, true), "permits"},
	}
	for _, c := range cases {
		_, err := e.b.Acquire(e.ctx, c.r)
		var ae *backend.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != c.arg {
			t.Errorf("Acquire(capacity %d, permits %d): %v, want an ArgumentError for %s", c.r.Capacity, c.r.Permits, err, c.arg)
		}
		if _, err := e.b.AcquireBatch(e.ctx, []backend.AcquireRequest{sreq("B", 3, 1, false), c.r}); !errors.As(err, &ae) {
			t.Errorf("AcquireBatch with capacity %d, permits %d: %v, want an ArgumentError", c.r.Capacity, c.r.Permits, err)
		}
	}
	if n := e.store.Len(); n != 0 {
		t.Fatalf("Len = %d after refused requests, want 0", n)
	}
	// A mutex ignores Permits.
	if g := e.acquire(backend.AcquireRequest{ID: "m", Token: "M", TTL: ttl, Capacity: 1, Permits: 7}); !g.Acquired {
		t.Fatalf("a mutex request with Permits 7: %+v, want granted", g)
	}
}

// TestSharedLeaveOfBlockingHead: the Leave (or purge) of an exclusive head
// that blocks lets the shared waiters behind it in, in one step.
func TestSharedLeaveOfBlockingHead(t *testing.T) {
	bothWays(t, func(t *testing.T, e *sharedEnv) {
		a := e.acquire(sreq("A", 3, 1, false))
		e.acquire(sreq("X", 3, 3, true))
		e.acquire(sreq("S1", 3, 1, true))
		e.acquire(sreq("S2", 3, 1, true))
		e.acquire(sreq("S3", 3, 1, true))
		if err := e.b.Leave(e.ctx, sid, "X"); err != nil {
			t.Fatal(err)
		}
		if e.handed {
			wakes := e.takeWakes()
			if len(wakes) != 3 || wakes[2].Token != "S3" || wakes[2].HolderTTL != ttl {
				t.Fatalf("wake-ups %+v, want grants to S1 and S2, then S3 told", wakes)
			}
			e.mu.Lock()
			e.wakes = wakes[:2]
			e.mu.Unlock()
		}
		e.granted(a.Fence, 3, 1, "S1", "S2")
		e.holders("A", "S1", "S2")
		e.waiters("S3")
		if err := e.b.Release(e.ctx, sid, "A"); err != nil {
			t.Fatal(err)
		}
		e.granted(0, 3, 1, "S3")
		e.holders("S1", "S2", "S3")
	})
}

// TestSharedPurgeOfBlockingHead: the purge of a dead exclusive head, by a
// heartbeat of a waiter behind it, lets the shared waiters in.
func TestSharedPurgeOfBlockingHead(t *testing.T) {
	bothWays(t, func(t *testing.T, e *sharedEnv) {
		a := e.acquire(sreq("A", 3, 1, false))
		e.acquire(sreq("X", 3, 3, true)) // WaiterTTL 5 s, never refreshed
		for _, tok := range []string{"S1", "S2"} {
			r := sreq(tok, 3, 1, true)
			r.WaiterTTL = time.Hour
			e.acquire(r)
		}
		e.takeWakes()
		e.clock.Advance(waiterTTL)
		hb, err := e.b.Heartbeat(e.ctx, []backend.Waiter{{ID: sid, Token: "S2"}}, time.Hour)
		if err != nil || !hb[0].Queued {
			t.Fatalf("S2's heartbeat: %+v, %v", hb, err)
		}
		e.granted(a.Fence, 3, 1, "S1", "S2")
		e.holders("A", "S1", "S2")
	})
}
