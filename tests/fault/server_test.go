package fault

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// TestRedisRestart: the server is shut down (SHUTDOWN NOSAVE) and started
// again, empty, on the same port while a holder runs Do and a waiter is
// queued. The holder's fn context is cancelled with ErrLeaseLost (its next
// Extend finds the lock gone) and Do returns ErrLeaseLost; the waiter
// recovers (re-subscribes, re-checks, re-queues) and is granted; the
// scripts, gone from the new server's cache (NOSCRIPT), are loaded again.
//
// Without persistence the fence counter restarts too: the waiter's fence
// may be lower than the lost holder's (logged). That is the documented end
// of the guarantees on a single Redis without persistence.
func TestRedisRestart(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *env) {
		id := "restart"
		const ttl = 900 * time.Millisecond
		hl := e.directLocker(lock.Options{})
		inFn := make(chan uint64, 1)
		doErr := make(chan error, 1)
		var cause error
		var fnEnded, validUntil time.Time
		go func() {
			_, err := lock.Do(context.Background(), hl, id, ttl, func(ctx context.Context, _ *lock.Lease) (int, error) {
				inFn <- 0
				<-ctx.Done()
				fnEnded = time.Now()
				cause = context.Cause(ctx)
				return 0, nil
			}, nil)
			doErr <- err
		}()
		recv(t, inFn, 10*time.Second, "Do's fn started")
		w := e.directLocker(lock.Options{WaiterTimeout: 900 * time.Millisecond})
		done, failed := recoveringWaiter(t, e, w, id)

		must(t, e.srv.Shutdown())
		down := time.Now()
		// The holder's lease can be valid at most ttl after its last
		// extend, which was before the shutdown.
		validUntil = down.Add(ttl)
		must(t, e.srv.Restart())
		if r, _ := e.srv.Do("SCRIPT", "EXISTS", scripts.Acquire.SHA1); r != "*1" {
			t.Fatalf("SCRIPT EXISTS reply %q", r)
		}

		err := recv(t, doErr, 10*time.Second, "Do returned after the restart")
		if !errors.Is(err, lock.ErrLeaseLost) || !errors.Is(cause, lock.ErrLeaseLost) {
			t.Errorf("S5: Do = %v, fn's ctx cause %v; want ErrLeaseLost for both", err, cause)
		}
		if fnEnded.After(validUntil.Add(loadSlack)) {
			t.Errorf("S5: fn's ctx was cancelled %v after the shutdown; the lease could not be valid past %v (bound TTL + slack %v)", fnEnded.Sub(down), ttl, ttl+loadSlack)
		}
		got := recv(t, done, 10*time.Second, "the waiter granted after the restart")
		if !got.Acquired {
			t.Fatal("waiter not granted after the restart")
		}
		t.Logf("after the restart: fn ended %v after the shutdown; waiter granted with fence %d; %d warnings; %d failed re-checks",
			fnEnded.Sub(down), got.Lease.Fence(), len(e.logs.matching("WARN")), failed.Load())
		// NOSCRIPT was handled: the scripts are in the new server's cache.
		if r, err := e.raw.ScriptExists(context.Background(), scripts.Acquire.SHA1).Result(); err != nil || !r[0] {
			t.Errorf("the acquire script is not loaded on the restarted server: %v %v", r, err)
		}
		if err := got.Lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if left := e.keysLeft(); len(left) != 0 {
			t.Errorf("H2: keys left after the restart and release: %v", left)
		}
	})
}

// TestFenceAfterStateLoss (S3): the first fence of an id after its state is
// lost is greater than every fence before it: after a restart without
// persistence (SHUTDOWN NOSAVE, a fresh server on the same port), after a
// FLUSHALL (a failover to a replica that has none of the id's keys), and
// after the fence key is rolled back to an older value (a failover to a
// replica that missed the last grants).
func TestFenceAfterStateLoss(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *env) {
		l := e.directLocker(lock.Options{})
		ids := []string{"order-1", "order-2", "order-3"}
		last := map[string]uint64{}
		stale := map[string]string{} // each id's fence after its first grant
		// cycle acquires and releases every id n times, retrying while the
		// client reconnects, and checks each fence against the last one.
		cycle := func(event string, n int) {
			t.Helper()
			for _, id := range ids {
				for range n {
					var res lock.Result
					deadline := time.Now().Add(10 * time.Second)
					for {
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
						var err error
						res, err = l.TryAcquire(ctx, id, time.Minute)
						cancel()
						if err == nil && res.Acquired {
							break
						}
						if time.Now().After(deadline) {
							t.Fatalf("%s: %s not acquired within 10s: %+v, %v", event, id, res, err)
						}
						time.Sleep(20 * time.Millisecond)
					}
					f := res.Lease.Fence()
					if f <= last[id] {
						t.Fatalf("S3: %s: fence %d of %s, want more than every fence before it (%d)", event, f, id, last[id])
					}
					last[id] = f
					if _, ok := stale[id]; !ok {
						stale[id] = e.raw.Get(context.Background(), e.ks.For(id).Fence).Val()
					}
					if err := res.Lease.Release(context.Background()); err != nil {
						t.Fatalf("%s: release %s: %v", event, id, err)
					}
				}
			}
		}
		cycle("before any event", 20)

		e.srv.Shutdown()
		e.srv.Restart()
		cycle("after a restart without persistence", 5)

		if err := e.raw.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		cycle("after FLUSHALL", 5)

		for _, id := range ids {
			k := e.ks.For(id)
			if err := e.raw.Set(context.Background(), k.Fence, stale[id], time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
		}
		cycle("after the slots' fence keys went back to an older value", 5)
	})
}

// TestServerStall: the server stops answering for longer than the TTL
// (CLIENT PAUSE ALL, CLIENT PAUSE WRITE, SIGSTOP) while a holder runs Do.
// No validity is reported past the TTL: fn's ctx is cancelled with
// ErrLeaseLost no later than the lease's ValidUntil (measured from the
// last extend that succeeded), and nobody else is granted before it. A
// stall shorter than a renewal's slack leaves the lease alone: renewals
// resume.
func TestServerStall(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter) {
		for _, mode := range []string{"pause-all", "pause-write", "sigstop"} {
			t.Run(mode, func(t *testing.T) { testStall(t, a, mode, false) })
		}
		t.Run("short-pause-renewals-resume", func(t *testing.T) { testStall(t, a, "pause-all", true) })
	})
}

func testStall(t *testing.T, a adapter, mode string, short bool) {
	e := newEnv(t, a)
	id := "stall"
	const ttl = 600 * time.Millisecond
	stall := 2 * ttl
	if short {
		stall = 150 * time.Millisecond
	}
	hl := e.directLocker(lock.Options{})
	type ended struct {
		at    time.Time
		cause error
	}
	started := make(chan struct{})
	stallNow := make(chan struct{})
	fnEnd := make(chan ended, 1)
	doErr := make(chan error, 1)
	go func() {
		_, err := lock.Do(context.Background(), hl, id, ttl, func(ctx context.Context, _ *lock.Lease) (int, error) {
			close(started)
			<-stallNow
			select {
			case <-ctx.Done():
				fnEnd <- ended{time.Now(), context.Cause(ctx)}
			case <-time.After(stall + 3*ttl):
				fnEnd <- ended{} // renewals kept the lease through the stall
			}
			return 0, nil
		}, nil)
		doErr <- err
	}()
	recv(t, started, 10*time.Second, "Do's fn started")

	stallStart := time.Now()
	switch mode {
	case "pause-all":
		must(t, e.srv.ClientPause(stall, "ALL"))
	case "pause-write":
		must(t, e.srv.ClientPause(stall, "WRITE"))
	case "sigstop":
		resume := func() { _ = e.srv.Resume() }
		t.Cleanup(resume) // never leave it stopped
		must(t, e.srv.Pause())
		time.AfterFunc(stall, resume)
	}
	close(stallNow)
	// The latest moment the holder's lease can be valid: its last extend
	// was sent before the stall began.
	latest := stallStart.Add(ttl)

	end := recv(t, fnEnd, stall+5*ttl+5*time.Second, "fn ended")
	err := recv(t, doErr, 10*time.Second, "Do returned")
	if short {
		if !end.at.IsZero() || err != nil {
			t.Fatalf("a %v stall (TTL %v) ended the lease: fn ended %v (cause %v), Do = %v; renewals should have resumed",
				stall, ttl, end.at.Sub(stallStart), end.cause, err)
		}
		return
	}
	if end.at.IsZero() {
		t.Fatalf("S5: a %v stall with a %v TTL: fn's ctx never cancelled, validity reported past the TTL", stall, ttl)
	}
	if !errors.Is(end.cause, lock.ErrLeaseLost) || !errors.Is(err, lock.ErrLeaseLost) {
		t.Errorf("S5: fn's ctx cause %v, Do = %v; want ErrLeaseLost", end.cause, err)
	}
	if end.at.After(latest.Add(loadSlack)) {
		t.Errorf("S2/S5: fn's ctx cancelled %v after the stall began; the lease could not be valid past %v (bound TTL + slack %v)",
			end.at.Sub(stallStart), ttl, ttl+loadSlack)
	}
	// After the stall another client is granted, never before latest.
	w := e.directLocker(lock.Options{WaiterTimeout: 3 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := w.Acquire(ctx, id, ttl, nil)
	if err != nil || !r.Acquired {
		t.Fatalf("after the stall: %v, acquired %v", err, r.Acquired)
	}
	if time.Now().Before(latest) {
		t.Errorf("S1/S2: granted to another before the stalled holder's lease could have ended")
	}
	t.Logf("%s: fn cancelled %v after the stall began (TTL %v, stall %v)", mode, end.at.Sub(stallStart), ttl, stall)
	_ = r.Lease.Release(context.Background())
}
