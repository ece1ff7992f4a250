package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/memstore"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// TestDelaySubscriptions: a delayed Subscribe returns only after the
// delay, and a wake-up right after it is delivered; a ctx that ends first
// ends it with ctx's error and subscribes nothing.
func TestDelaySubscriptions(t *testing.T) {
	const d = 50 * time.Millisecond
	s := testkit.Must(memstore.NewStore(&memstore.Options{NoHandOff: true}))
	a, b := s.NewBackend(), s.NewBackend()
	ctx := context.Background()
	// handOver: A acquires id, B queues behind it, A releases.
	handOver := func(id string) {
		t.Helper()
		if _, err := a.Acquire(ctx, backend.AcquireRequest{ID: id, Token: "A", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Acquire(ctx, backend.AcquireRequest{ID: id, Token: "B", TTL: time.Minute, Wait: true, WaiterTTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx, id, "A"); err != nil {
			t.Fatal(err)
		}
	}
	b.DelaySubscriptions(d)
	got := make(chan backend.Wake, 4)
	start := time.Now()
	cancel, err := b.Subscribe(ctx, "x", func(w backend.Wake) { got <- w })
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	if took := time.Since(start); took < d {
		t.Fatalf("Subscribe with a delay of %v returned after %v", d, took)
	}
	handOver("x")
	select {
	case w := <-got:
		if w != (backend.Wake{ID: "x", Token: "B"}) {
			t.Fatalf("wake-up %+v, want B's", w)
		}
	default:
		t.Fatal("no wake-up right after the delayed Subscribe returned")
	}

	// A delay far past ctx's deadline: ctx surely ends first.
	b.DelaySubscriptions(time.Hour)
	cctx, stop := context.WithTimeout(ctx, d/5)
	defer stop()
	if _, err := b.Subscribe(cctx, "y", func(backend.Wake) { t.Error("a wake-up for a failed Subscribe") }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Subscribe whose ctx ends during the delay: %v, want DeadlineExceeded", err)
	}
	b.DelaySubscriptions(0)
	handOver("y")
}

// TestDropNotifier: every subscription of the Backend, and only of it,
// gets Wake{All}.
func TestDropNotifier(t *testing.T) {
	s := testkit.Must(memstore.NewStore(nil))
	a, b := s.NewBackend(), s.NewBackend()
	ctx := context.Background()
	var wa, wb []backend.Wake
	for _, id := range []string{"x", "y"} {
		if _, err := a.Subscribe(ctx, id, func(w backend.Wake) { wa = append(wa, w) }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Subscribe(ctx, "x", func(w backend.Wake) { wb = append(wb, w) }); err != nil {
		t.Fatal(err)
	}
	a.DropNotifier()
	if len(wa) != 2 || !wa[0].All || !wa[1].All || wa[0].ID == wa[1].ID {
		t.Errorf("a's wake-ups %+v, want Wake{All} for x and y", wa)
	}
	if len(wb) != 0 {
		t.Errorf("b's wake-ups %+v, want none", wb)
	}
}

// TestForget: Forget drops an entry with nothing live and keeps one that
// has a live holder; fences go on from the store-wide counter.
func TestForget(t *testing.T) {
	clock := memstore.NewManualClock(time.Unix(0, 0))
	s := testkit.Must(memstore.NewStore(&memstore.Options{Clock: clock}))
	b := s.NewBackend()
	ctx := context.Background()
	g1, err := b.Acquire(ctx, backend.AcquireRequest{ID: "x", Token: "A", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s.Forget("x")
	if s.Entries() != 1 {
		t.Fatalf("Forget dropped a live lease: %d entries", s.Entries())
	}
	clock.Advance(2 * time.Second)
	s.Forget("x")
	if s.Entries() != 0 {
		t.Fatalf("Forget kept an expired lease: %d entries", s.Entries())
	}
	g2, err := b.Acquire(ctx, backend.AcquireRequest{ID: "x", Token: "B", TTL: time.Second})
	if err != nil || g2.Fence <= g1.Fence {
		t.Fatalf("after Forget: %+v, %v; want a fence above %d", g2, err, g1.Fence)
	}
}
