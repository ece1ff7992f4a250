package lock_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/memorybackend"
)

// TestExampleSynctest shows how to test code that uses a Locker with no
// real waiting: inside a testing/synctest bubble (Go 1.25+), time.Sleep and
// every wait move the fake clock of the Locker and of memorybackend
// together, so a lease expires, a queue times out and a lock is handed
// over at exact instants. Create the Store and the Lockers inside the
// bubble, and Close them there.
//
// memorybackend.ManualClock moves the store's clock only; it does not fire
// the Locker's timers (Lost, queue timeouts, keep-alive).
func TestExampleSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store, _ := memorybackend.NewStore(nil)
		a, _ := lock.New(store.NewBackend(), nil) // two "processes"
		b, _ := lock.New(store.NewBackend(), &lock.Options{QueueTimeout: 5 * time.Second})
		defer a.Close()
		defer b.Close()

		// A lease expires: Lost fires at ValidUntil, 10 s later.
		start := time.Now()
		res, _ := a.Acquire(ctx, "job", 10*time.Second, nil)
		<-res.Lease.Lost()
		if d := time.Since(start); d != 10*time.Second {
			t.Errorf("Lost fired after %v; want 10s", d)
		}

		// A queue timeout: b gives up after its QueueTimeout, 5 s.
		res, _ = a.Acquire(ctx, "job", time.Minute, nil)
		start = time.Now()
		late, err := b.Acquire(ctx, "job", time.Minute, nil)
		if late.Acquired || err != nil || time.Since(start) != 5*time.Second {
			t.Errorf("queued Acquire = (%v, %v) after %v; want not acquired after 5s", late.Acquired, err, time.Since(start))
		}

		// A hand-off: a releases after 2 s; b, queued, is granted then.
		go func() {
			time.Sleep(2 * time.Second)
			_ = res.Lease.Release(ctx)
		}()
		start = time.Now()
		next, err := b.Acquire(ctx, "job", time.Minute, nil)
		if !next.Acquired || err != nil || time.Since(start) != 2*time.Second {
			t.Errorf("hand-off = (%v, %v) after %v; want granted after 2s", next.Acquired, err, time.Since(start))
		}
		_ = next.Lease.Release(ctx)
	})
}
