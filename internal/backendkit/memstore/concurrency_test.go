package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/memstore"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// TestConcurrentMutualExclusion runs many goroutines on several Backends of
// one Store, contending on a few ids. The clock never moves, so leases and
// waiters never expire and every hand-off goes through a release, a leave
// and a wake-up: a lost wake-up shows as a waiter that never gets the lock.
func TestConcurrentMutualExclusion(t *testing.T) {
	const (
		procs      = 4
		goroutines = 32
		rounds     = 50
	)
	ids := []string{"a", "b", "c"}
	clock := memstore.NewManualClock(epoch)
	store := testkit.Must(memstore.NewStore(&memstore.Options{Clock: clock}))
	backends := make([]*memstore.Backend, procs)
	for i := range backends {
		backends[i] = store.NewBackend()
	}

	type state struct {
		holders   atomic.Int32
		lastFence atomic.Uint64
		grants    atomic.Int64
	}
	states := map[string]*state{}
	for _, id := range ids {
		states[id] = new(state)
	}

	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			b := backends[g%procs]
			for r := 0; r < rounds; r++ {
				id := ids[(g+r)%len(ids)]
				tok := fmt.Sprintf("g%d-r%d", g, r)
				giveUp := (g+r)%7 == 0 // cancel after joining the queue
				if !runOne(t, ctx, b, store, id, tok, giveUp, states[id].holders.Add, &states[id].lastFence, &states[id].grants) {
					return
				}
			}
		}(g)
	}
	wg.Wait()
	var total int64
	for _, id := range ids {
		total += states[id].grants.Load()
	}
	if total == 0 {
		t.Fatal("no grants at all")
	}
	if n := store.Len(); n != 0 {
		t.Fatalf("Len = %d after every goroutine finished, want 0", n)
	}
	for _, b := range backends {
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// runOne acquires id as tok (waiting for wake-ups), checks that it is the only
// holder, and releases; with giveUp it leaves the queue instead of waiting
// when not granted at once. It reports false after a failure.
func runOne(t *testing.T, ctx context.Context, b *memstore.Backend, store *memstore.Store,
	id, tok string, giveUp bool, holders func(int32) int32, lastFence *atomic.Uint64, grants *atomic.Int64) bool {
	woken := make(chan struct{}, 1)
	cancel, err := b.Subscribe(ctx, id, func(w backend.Wake) {
		if w.Token == tok || w.Token == "" || w.All {
			select {
			case woken <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		t.Errorf("Subscribe: %v", err)
		return false
	}
	defer cancel()
	r := backend.AcquireRequest{ID: id, Token: tok, TTL: time.Hour, Wait: true, WaiterTTL: time.Hour}
	var g backend.Grant
	for {
		g, err = b.Acquire(ctx, r)
		if err != nil {
			t.Errorf("Acquire(%s, %s): %v", id, tok, err)
			return false
		}
		if g.Acquired {
			break
		}
		if !g.Queued {
			t.Errorf("Acquire(%s, %s) with Wait: neither acquired nor queued: %+v", id, tok, g)
			return false
		}
		if giveUp {
			// If we were (or became) the head of a free lock, Leave must
			// hand the wake-up on to the next waiter.
			if err := b.Leave(ctx, id, tok); err != nil {
				t.Errorf("Leave: %v", err)
				return false
			}
			return true
		}
		select {
		case <-woken:
		case <-time.After(30 * time.Second):
			t.Errorf("%s waited on %s for 30s: lost wake-up (queue %v)", tok, id, store.Waiters(id))
			return false
		}
	}
	ok := true
	if n := holders(1); n != 1 {
		t.Errorf("%d holders of %s at once", n, id)
		ok = false
	}
	if h, held := store.Holder(id); !held || h != tok {
		t.Errorf("Holder(%s) = %q, %v while %s holds it", id, h, held, tok)
		ok = false
	}
	if prev := lastFence.Swap(g.Fence); g.Fence <= prev {
		t.Errorf("fence %d of %s after %d: not increasing", g.Fence, id, prev)
		ok = false
	}
	runtime.Gosched()
	grants.Add(1)
	holders(-1)
	if err := b.Release(ctx, id, tok); err != nil {
		t.Errorf("Release(%s, %s): %v", id, tok, err)
		return false
	}
	return ok
}
