package lock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/testkit"
	"github.com/redislocker/lock/memorybackend"
	"go.uber.org/goleak"
)

// stuckBackend is a backend whose Acquire of "stuck" ignores its context
// and returns only once unblock is closed, like a client that ignores
// deadlines on a stalled server.
type stuckBackend struct {
	backend.Backend
	unblock chan struct{}
}

func (s *stuckBackend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	if req.ID == "stuck" {
		<-s.unblock
	}
	return s.Backend.Acquire(ctx, req)
}

// Close releases everything each part of a Locker holds: the room's
// waiters (a queued Acquire and a queued AcquireMany end with ErrClosed),
// their subscriptions (also one lingering after its wait) and heartbeat
// goroutine; the keeper's kept-alive leases and its goroutine; and the
// lifecycle's stray steps, which Close waits for. No goroutine is left.
func TestCloseReleasesEverything(t *testing.T) {
	defer goleak.VerifyNone(t)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := testkit.Must(memorybackend.NewStore(nil))
		holdLock(t, store, "x")
		holdLock(t, store, "y")
		holdLock(t, store, "z")
		stuck := &stuckBackend{Backend: store.NewBackend(), unblock: make(chan struct{})}
		l := quietLocker(stuck, nil)

		// The keeper: a kept-alive lease.
		if res, err := l.Acquire(ctx, "k", time.Minute, &AcquireOptions{KeepAlive: true}); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		// The room: a subscription that lingers after its wait timed out,
		// and two waits in progress.
		if res, err := l.Acquire(ctx, "y", time.Minute, &AcquireOptions{QueueTimeout: time.Millisecond}); err != nil || res.Acquired {
			t.Fatal(res, err)
		}
		acquired := make(chan error, 1)
		go func() {
			_, err := l.Acquire(ctx, "x", time.Minute, nil)
			acquired <- err
		}()
		_, many := goAcquireMany(l, []string{"z"}, nil)
		// The lifecycle: a stray step, whose caller gave up on it.
		sctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		if _, err := l.Acquire(sctx, "stuck", time.Minute, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire of a stuck step: %v; want the ctx's deadline", err)
		}
		synctest.Wait()

		if p := partsOf(l); p != (parts{ids: 3, heartbeats: true, kept: 1, keepAlive: true, strays: 1}) {
			t.Fatalf("before Close: %+v; want 3 ids, heartbeats, 1 kept lease, keep-alive, 1 stray step", p)
		}

		time.AfterFunc(time.Second, func() { close(stuck.unblock) })
		start := time.Now()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("Close returned after %v; want it to wait for the stray step, which returns after 1s", d)
		}
		if err := <-acquired; !errors.Is(err, ErrClosed) {
			t.Errorf("queued Acquire: %v; want ErrClosed", err)
		}
		if r := <-many; !errors.Is(r.err, ErrClosed) {
			t.Errorf("queued AcquireMany: %v; want ErrClosed", r.err)
		}
		if p := partsOf(l); p != (parts{}) {
			t.Errorf("after Close: %+v; want nothing left", p)
		}
	})
}

// parts is what the parts of a Locker hold.
type parts struct {
	ids        int  // ids in the room (with waiters or lingering)
	heartbeats bool // the room's heartbeat goroutine runs
	kept       int  // kept-alive leases
	keepAlive  bool // the keeper's goroutine runs
	strays     int  // stray steps
}

func partsOf(l *Locker) parts {
	var p parts
	l.room.mu.Lock()
	p.ids, p.heartbeats = len(l.room.ids), l.room.hbRunning
	l.room.mu.Unlock()
	l.keeper.mu.Lock()
	p.kept, p.keepAlive = len(l.keeper.kept), l.keeper.running
	l.keeper.mu.Unlock()
	l.life.steps.mu.Lock()
	p.strays = l.life.steps.n
	l.life.steps.mu.Unlock()
	return p
}
