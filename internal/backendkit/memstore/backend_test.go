package memstore_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/backendkit/memstore"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

func newManual(t *testing.T, opts memstore.Options) (*memstore.ManualClock, *memstore.Store) {
	t.Helper()
	c := memstore.NewManualClock(epoch)
	opts.Clock = c
	opts.NoHandOff = !handOff(opts)
	return c, testkit.Must(memstore.NewStore(&opts))
}

func req(id, tok string, wait bool) backend.AcquireRequest {
	return backend.AcquireRequest{ID: id, Token: tok, TTL: ttl, Wait: wait, WaiterTTL: waiterTTL}
}

func mustAcquire(t *testing.T, b backend.Backend, r backend.AcquireRequest) backend.Grant {
	t.Helper()
	g, err := b.Acquire(context.Background(), r)
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", r.ID, r.Token, err)
	}
	return g
}

func TestCloseReturnsErrClosed(t *testing.T) {
	ctx := context.Background()
	_, s := newManual(t, memstore.Options{})
	b, other := s.NewBackend(), s.NewBackend()
	mustAcquire(t, b, req("x", "A", false))
	mustAcquire(t, other, req("x", "B", true))

	var mu sync.Mutex
	var wakes []backend.Wake
	if _, err := b.Subscribe(ctx, "x", func(w backend.Wake) {
		mu.Lock()
		wakes = append(wakes, w)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	calls := map[string]func() error{
		"Acquire": func() error { _, err := b.Acquire(ctx, req("x", "A", false)); return err },
		"Release": func() error { return b.Release(ctx, "x", "A") },
		"Extend":  func() error { return b.Extend(ctx, "x", "A", ttl) },
		"Leave":   func() error { return b.Leave(ctx, "x", "B") },
		"Heartbeat": func() error {
			_, err := b.Heartbeat(ctx, []backend.Waiter{{ID: "x", Token: "B"}}, waiterTTL)
			return err
		},
		"Subscribe": func() error {
			_, err := b.Subscribe(ctx, "x", func(backend.Wake) {})
			return err
		},
		"AcquireBatch": func() error {
			_, err := b.AcquireBatch(ctx, []backend.AcquireRequest{req("y", "A", false)})
			return err
		},
		"LeaveBatch": func() error { return b.LeaveBatch(ctx, []backend.Waiter{{ID: "x", Token: "B"}}) },
		"Close":      b.Close,
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, backend.ErrClosed) {
			t.Errorf("%s after Close: err = %v, want ErrClosed", name, err)
		}
	}
	// Close changed nothing on the store: A still holds, B still waits.
	if tok, ok := s.Holder("x"); !ok || tok != "A" {
		t.Errorf("Holder = %q, %v; want A (Close does not release)", tok, ok)
	}
	if got := s.Waiters("x"); !reflect.DeepEqual(got, []string{"B"}) {
		t.Errorf("Waiters = %v, want [B]", got)
	}
	// The other process still works, and the closed one's subscription is gone.
	if err := other.Release(ctx, "x", "A"); err != nil {
		t.Fatalf("Release on another backend: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(wakes) != 0 {
		t.Errorf("closed backend's subscriber got %v, want nothing", wakes)
	}
}

func TestCancelledContext(t *testing.T) {
	_, s := newManual(t, memstore.Options{})
	b := s.NewBackend()
	mustAcquire(t, b, req("x", "A", false))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]func() error{
		"Acquire": func() error { _, err := b.Acquire(ctx, req("x", "B", true)); return err },
		"Release": func() error { return b.Release(ctx, "x", "A") },
		"Extend":  func() error { return b.Extend(ctx, "x", "A", time.Hour) },
		"Leave":   func() error { return b.Leave(ctx, "x", "A") },
		"Heartbeat": func() error {
			_, err := b.Heartbeat(ctx, []backend.Waiter{{ID: "x", Token: "B"}}, waiterTTL)
			return err
		},
		"Subscribe": func() error { _, err := b.Subscribe(ctx, "x", func(backend.Wake) {}); return err },
		"AcquireBatch": func() error {
			_, err := b.AcquireBatch(ctx, []backend.AcquireRequest{req("y", "A", false)})
			return err
		},
		"LeaveBatch": func() error { return b.LeaveBatch(ctx, []backend.Waiter{{ID: "x", Token: "A"}}) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled ctx: err = %v, want context.Canceled", name, err)
		}
	}
	g := mustAcquire(t, b, req("x", "A", false))
	if !g.Acquired || g.TTL != ttl {
		t.Errorf("state changed by cancelled calls: retry grant = %+v", g)
	}
	if w := s.Waiters("x"); len(w) != 0 || s.Len() != 1 {
		t.Errorf("Waiters = %v, Len = %d; want none, 1", w, s.Len())
	}
}

func TestEmptyTokenIsRejected(t *testing.T) {
	b := testkit.Must(memstore.New(nil))
	if _, err := b.Acquire(context.Background(), req("x", "", false)); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("Acquire with an empty token: err = %v, want ErrInvalidArgument", err)
	}
	if _, err := b.Subscribe(context.Background(), "x", nil); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("Subscribe with a nil fn: err = %v, want ErrInvalidArgument", err)
	}
}

func TestBatcher(t *testing.T) {
	ctx := context.Background()
	_, s := newManual(t, memstore.Options{MaxWaiters: 1})
	var b backend.Backend = s.NewBackend()
	if _, ok := b.(backend.Batcher); !ok {
		t.Fatal("*Backend is not a backend.Batcher")
	}
	mustAcquire(t, b, req("held", "H", false))
	mustAcquire(t, b, req("full", "H", false))
	mustAcquire(t, b, req("full", "W", true))

	got, err := fallback.AcquireBatch(ctx, b, []backend.AcquireRequest{
		req("free", "A", true),
		req("held", "A", true),
		req("full", "A", true),
		req("free", "A", true), // duplicate: a retry by the holder
		req("held", "B", false),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []backend.BatchGrant{
		{Grant: backend.Grant{Acquired: true, Fence: 3, TTL: ttl}},
		{Grant: backend.Grant{Queued: true, Ticket: 2, Head: true, HolderTTL: ttl}},
		{Grant: backend.Grant{HolderTTL: ttl}, Err: backend.ErrQueueFull},
		{Grant: backend.Grant{Acquired: true, Fence: 3, TTL: ttl}},
		{Grant: backend.Grant{HolderTTL: ttl}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d results, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Grant != want[i].Grant || !errors.Is(got[i].Err, want[i].Err) || (got[i].Err == nil) != (want[i].Err == nil) {
			t.Errorf("result %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	if err := fallback.LeaveBatch(ctx, b, []backend.Waiter{
		{ID: "free", Token: "A"}, // releases
		{ID: "held", Token: "A"}, // leaves the queue
		{ID: "full", Token: "W"},
		{ID: "nothing", Token: "A"},
	}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Holder("free"); ok {
		t.Error("LeaveBatch did not release the lock its token held")
	}
	if w := s.Waiters("held"); len(w) != 0 {
		t.Errorf("Waiters(held) = %v after LeaveBatch, want none", w)
	}
	if n := s.Len(); n != 2 {
		t.Errorf("Len = %d, want 2 (held and full, still held by H)", n)
	}
}

func TestHeartbeatMany(t *testing.T) {
	ctx := context.Background()
	clock, s := newManual(t, memstore.Options{})
	b := s.NewBackend()
	mustAcquire(t, b, req("a", "H", false))
	mustAcquire(t, b, req("a", "W1", true))
	mustAcquire(t, b, req("a", "W2", true))
	mustAcquire(t, b, req("b", "H", false))
	mustAcquire(t, b, req("b", "W1", true))

	var mu sync.Mutex
	var wakes []backend.Wake
	for _, id := range []string{"a", "b"} {
		if _, err := b.Subscribe(ctx, id, func(w backend.Wake) {
			mu.Lock()
			wakes = append(wakes, w)
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	s.ExpireNow("a")
	clock.Advance(waiterTTL - time.Nanosecond)
	got, err := b.Heartbeat(ctx, []backend.Waiter{
		{ID: "a", Token: "W2"}, {ID: "b", Token: "W1"}, {ID: "a", Token: "W1"},
		{ID: "a", Token: "nobody"}, {ID: "c", Token: "W1"},
	}, waiterTTL)
	if err != nil {
		t.Fatal(err)
	}
	want := []backend.HeartbeatResult{
		{Queued: true}, {Queued: true}, {Queued: true, Ready: true}, {}, {},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Heartbeat = %+v, want %+v", got, want)
	}
	mu.Lock()
	if want := []backend.Wake{{ID: "a", Token: "W1"}}; !reflect.DeepEqual(wakes, want) {
		t.Errorf("wake-ups = %+v, want %+v (the head of the free id, once)", wakes, want)
	}
	mu.Unlock()
	// The deadlines were refreshed: all three waiters outlive their first deadline.
	clock.Advance(waiterTTL - time.Nanosecond)
	if w := s.Waiters("a"); !reflect.DeepEqual(w, []string{"W1", "W2"}) {
		t.Errorf("Waiters(a) = %v, want [W1 W2]", w)
	}
	if w := s.Waiters("b"); !reflect.DeepEqual(w, []string{"W1"}) {
		t.Errorf("Waiters(b) = %v, want [W1]", w)
	}
}

func TestSubscribe(t *testing.T) {
	ctx := context.Background()
	_, s := newManual(t, memstore.Options{})
	b1, b2 := s.NewBackend(), s.NewBackend()

	var rec testkit.Recorder[backend.Wake]
	cancel1, err := b1.Subscribe(ctx, "x", rec.Fn("b1/x"))
	if err != nil {
		t.Fatal(err)
	}
	cancel2, _ := b2.Subscribe(ctx, "x", rec.Fn("b2/x"))
	cancelY, _ := b2.Subscribe(ctx, "y", rec.Fn("b2/y"))
	defer cancel2()
	defer cancelY()

	// Each wake-up reaches only the Backend that queued the waiter it
	// names, whichever Backend's step wakes it.
	mustAcquire(t, b1, req("x", "A", false))
	mustAcquire(t, b2, req("x", "B", true))
	if err := b1.Release(ctx, "x", "A"); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Acquire(ctx, req("x", "B", true)); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, b1, req("x", "C", true))
	if err := b2.Release(ctx, "x", "B"); err != nil {
		t.Fatal(err)
	}
	cancel1()
	cancel1() // idempotent
	if _, err := b1.Acquire(ctx, req("x", "C", true)); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, b1, req("x", "D", true))
	if err := b1.Release(ctx, "x", "C"); err != nil {
		t.Fatal(err)
	}

	want := map[string][]backend.Wake{
		"b1/x": {{ID: "x", Token: "C"}},
		"b2/x": {{ID: "x", Token: "B"}},
	}
	if got := rec.Got(); !reflect.DeepEqual(got, want) {
		t.Errorf("wake-ups = %+v, want %+v", got, want)
	}
}

// Subscribers are called outside the store's locks, so they may call back
// into the backend.
func TestSubscriberMayCallBack(t *testing.T) {
	ctx := context.Background()
	b := testkit.Must(memstore.New(nil))
	var g backend.Grant
	var gerr error
	cancel, err := b.Subscribe(ctx, "x", func(w backend.Wake) {
		g, gerr = b.Acquire(ctx, backend.AcquireRequest{ID: w.ID, Token: w.Token, TTL: time.Hour, Wait: true, WaiterTTL: time.Hour})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	mustAcquire(t, b, backend.AcquireRequest{ID: "x", Token: "A", TTL: time.Hour})
	mustAcquire(t, b, backend.AcquireRequest{ID: "x", Token: "B", TTL: time.Hour, Wait: true, WaiterTTL: time.Hour})
	if err := b.Release(ctx, "x", "A"); err != nil {
		t.Fatal(err)
	}
	if gerr != nil || !g.Acquired {
		t.Fatalf("acquire from the wake-up: %+v, %v", g, gerr)
	}
	if tok, _ := b.Store().Holder("x"); tok != "B" {
		t.Fatalf("Holder = %q, want B", tok)
	}
}

func TestFencesIncreasePerID(t *testing.T) {
	ctx := context.Background()
	clock, s := newManual(t, memstore.Options{})
	b := s.NewBackend()
	last := map[string]uint64{}
	for i := 0; i < 100; i++ {
		for _, id := range []string{"a", "b", "c"} {
			tok := "t" + id
			g := mustAcquire(t, b, req(id, tok, false))
			if !g.Acquired || g.Fence <= last[id] {
				t.Fatalf("grant %d of %s: %+v, previous fence %d", i, id, g, last[id])
			}
			last[id] = g.Fence
			if err := b.Extend(ctx, id, tok, ttl); err != nil {
				t.Fatal(err)
			}
			if g2 := mustAcquire(t, b, req(id, tok, false)); g2.Fence != g.Fence {
				t.Fatalf("fence changed by extend or retry: %d, then %d", g.Fence, g2.Fence)
			}
			switch i % 3 {
			case 0:
				if err := b.Release(ctx, id, tok); err != nil {
					t.Fatal(err)
				}
			case 1:
				s.ExpireNow(id)
			}
		}
		if i%3 == 2 {
			clock.Advance(ttl)
		}
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len = %d, want 0", n)
	}
}

func TestLenSweepsExpiredState(t *testing.T) {
	clock, s := newManual(t, memstore.Options{})
	b := s.NewBackend()
	for i := 0; i < 1000; i++ {
		id := string(rune('a'+i%26)) + string(rune('0'+i/26%10)) + string(rune('A'+i/260))
		mustAcquire(t, b, req(id, "A", false))
		mustAcquire(t, b, req(id, "B", true))
	}
	if n := s.Len(); n != 1000 {
		t.Fatalf("Len = %d, want 1000", n)
	}
	clock.Advance(waiterTTL)
	if n := s.Len(); n != 1000 {
		t.Fatalf("Len = %d after the waiters expired, want 1000 (leases live)", n)
	}
	clock.Advance(ttl)
	if n := s.Len(); n != 0 {
		t.Fatalf("Len = %d after everything expired, want 0", n)
	}
	if n := s.Entries(); n != 0 {
		t.Fatalf("%d entries kept after Len, want 0", n)
	}
}

func TestDefaultsUseTheRealClock(t *testing.T) {
	ctx := context.Background()
	b := testkit.Must(memstore.New(nil))
	g, err := b.Acquire(ctx, backend.AcquireRequest{ID: "x", Token: "A", TTL: time.Hour})
	if err != nil || !g.Acquired || g.Fence < uint64(time.Now().Add(-time.Minute).UnixMicro()) { // fences follow the wall clock
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	if g, _ := b.Acquire(ctx, backend.AcquireRequest{ID: "x", Token: "A", TTL: time.Hour}); g.TTL <= 0 || g.TTL > time.Hour {
		t.Fatalf("retry TTL = %v, want in (0, 1h]", g.TTL)
	}
	if err := b.Release(ctx, "x", "A"); err != nil {
		t.Fatal(err)
	}
	if b.Store().Len() != 0 {
		t.Fatal("Len != 0")
	}
}

func TestManualClock(t *testing.T) {
	c := memstore.NewManualClock(epoch)
	if !c.Now().Equal(epoch) {
		t.Fatalf("Now = %v, want %v", c.Now(), epoch)
	}
	c.Advance(time.Minute)
	if want := epoch.Add(time.Minute); !c.Now().Equal(want) {
		t.Fatalf("Now = %v, want %v", c.Now(), want)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Advance(-1) did not panic")
		}
	}()
	c.Advance(-1)
}

func TestUncontendedAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	ctx := context.Background()
	b := testkit.Must(memstore.New(nil))
	r := backend.AcquireRequest{ID: "alloc", Token: "tok", TTL: time.Minute}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := b.Acquire(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, r.ID, r.Token); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("uncontended Acquire+Release allocates %.1f times, want 0", allocs)
	}
}

// ExtendBatch extends each held lease by its own TTL and reports
// ErrNotHeld, changing nothing, for a token that does not hold its id
// (never granted, or expired); a closed backend fails the whole call.
func TestExtendBatch(t *testing.T) {
	ctx := context.Background()
	clock, s := newManual(t, memstore.Options{})
	b := s.NewBackend()
	mustAcquire(t, b, req("a", "A", false))
	mustAcquire(t, b, req("b", "B", false))
	mustAcquire(t, b, req("c", "C", false))
	clock.Advance(ttl / 2)
	errs, err := b.ExtendBatch(ctx, []backend.ExtendRequest{
		{ID: "a", Token: "A", TTL: 2 * ttl},
		{ID: "b", Token: "not-B", TTL: 2 * ttl},
		{ID: "c", Token: "C", TTL: ttl},
		{ID: "d", Token: "D", TTL: ttl},
	})
	if err != nil || len(errs) != 4 {
		t.Fatalf("ExtendBatch = (%v, %v); want 4 results", errs, err)
	}
	for i, want := range []error{nil, backend.ErrNotHeld, nil, backend.ErrNotHeld} {
		if !errors.Is(errs[i], want) || (want == nil && errs[i] != nil) {
			t.Errorf("result %d = %v; want %v", i, errs[i], want)
		}
	}
	clock.Advance(ttl * 3 / 4) // 1.25 ttl after the grants: b expired, a and c extended
	for id, held := range map[string]bool{"a": true, "b": false, "c": true} {
		if _, got := s.Holder(id); got != held {
			t.Errorf("%s held = %v after the batch; want %v", id, got, held)
		}
	}
	_ = b.Close()
	if _, err := b.ExtendBatch(ctx, []backend.ExtendRequest{{ID: "a", Token: "A", TTL: ttl}}); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("ExtendBatch on a closed backend = %v; want ErrClosed", err)
	}
}
