package fault

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// TestDeadWaiterPurgedWhenProcessStopped (L2, L3): a waiter in another
// process, queued first, is SIGSTOPped. When the lock is released, the
// live waiter behind it is granted within the dead waiter's WaiterTimeout
// plus two heartbeat intervals. On SIGCONT the stopped waiter finds its
// entry gone, re-queues at the tail (logging a warning) and is granted
// once the lock is free again: it never hangs.
func TestDeadWaiterPurgedWhenProcessStopped(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *env) {
		id := "purge"
		const waiterTimeout = 900 * time.Millisecond
		opts := lock.Options{WaiterTimeout: waiterTimeout}
		r := e.hold(opts, id, longTTL)
		// The child queues first. Its lease is short: the release hands the
		// lock off to it while its entry lives, and that grant costs the
		// queue its TTL.
		c := e.startChild("waiter", map[string]string{envID: id, envTTL: waiterTimeout.String(), envWaiter: waiterTimeout.String()})
		c.expect(t, "start", 10*time.Second)
		testkit.Eventually(t, 10*time.Second, "child waiter queued", func() bool { return e.queued(id) == 1 })
		// Then a live waiter in this process (FIFO: it is second).
		live := e.directLocker(opts)
		done := queuedWaiter(t, e, live, id)

		c.stop(t)
		stopped := time.Now()
		if err := r.Lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		bound := waiterTimeout + 2*waiterTimeout/3 + loadSlack
		got := recv(t, done, bound+2*time.Second, "L3: the live waiter granted after the stopped one was purged")
		at := time.Since(stopped)
		if !got.Acquired {
			t.Fatal("L3: live waiter not granted")
		}
		if at > bound {
			t.Errorf("L3: the live waiter was granted %v after the head stopped; bound WaiterTimeout + 2 heartbeats + slack = %v", at, bound)
		}
		t.Logf("live waiter granted %v after the head process stopped (WaiterTimeout %v)", at, waiterTimeout)

		// SIGCONT: the stopped waiter must re-queue (its entry is gone)
		// and get the lock once the live waiter releases: never hang.
		c.cont(t)
		// Never hangs: within 5 s it re-queues, or it ends with a clear
		// error (a client whose connection timed out while it was stopped
		// fails its re-check, as a backend failure may).
		deadline := time.Now().Add(5 * time.Second)
		for e.queued(id) != 1 {
			select {
			case l, ok := <-c.lines:
				if !ok {
					t.Fatal("the resumed waiter exited without a word")
				}
				if strings.HasPrefix(l, "error ") {
					if !strings.Contains(l, "lock: ") {
						t.Fatalf("the resumed waiter's error is not a lock error: %s", l)
					}
					t.Logf("the resumed waiter ended with a clear error: %s", l)
					_ = got.Lease.Release(context.Background())
					return
				}
				t.Logf("child: %s", l)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("L3: the resumed waiter neither re-queued nor failed within 5s: it hangs")
			}
			time.Sleep(2 * time.Millisecond) // poll interval of a condition with a deadline
		}
		if err := got.Lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		f := c.expect(t, "granted", 5*time.Second)
		fence, _ := strconv.ParseUint(f[0], 10, 64)
		if fence <= got.Lease.Fence() {
			t.Errorf("S3: the resumed waiter's fence %d is not above the live waiter's %d", fence, got.Lease.Fence())
		}
		c.expect(t, "released", 5*time.Second)
	})
}

// TestStoppedHolderLosesLeaseHonestly (S2, S5): a holder process is
// SIGSTOPped past its TTL. Another client is granted the lock, never
// before the stopped holder's ValidUntil. On SIGCONT the holder's Lost
// fires at once (its ValidUntil has passed) and Extend and Release say
// ErrNotHeld: they change nothing of the new holder's lock.
//
// The running case: a holder that is not stopped sees Lost by its
// ValidUntil, before anyone else is granted.
func TestStoppedHolderLosesLeaseHonestly(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter) {
		t.Run("sigstop", func(t *testing.T) {
			e := newEnv(t, a)
			id := "stopped-holder"
			const ttl = 500 * time.Millisecond
			c := e.startChild("holder", map[string]string{envID: id, envTTL: ttl.String(), envWaiter: "3s"})
			f := c.expect(t, "granted", 10*time.Second)
			c.stop(t)
			fence, _ := strconv.ParseUint(f[0], 10, 64)
			vu, _ := strconv.ParseInt(f[1], 10, 64)
			validUntil := time.Unix(0, vu)

			w := e.directLocker(lock.Options{WaiterTimeout: 3 * time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, err := w.Acquire(ctx, id, longTTL, nil)
			granted := time.Now()
			if err != nil || !r.Acquired {
				t.Fatalf("waiter: %v, acquired %v", err, r.Acquired)
			}
			if granted.Before(validUntil) {
				t.Fatalf("S2: another client was granted at %v, before the stopped holder's ValidUntil %v", granted, validUntil)
			}
			if r.Lease.Fence() <= fence {
				t.Fatalf("S3: new fence %d not above the stopped holder's %d", r.Lease.Fence(), fence)
			}
			c.cont(t)
			resumed := time.Now()
			lost := c.expect(t, "lost", 5*time.Second)
			lostAt, _ := strconv.ParseInt(lost[0], 10, 64)
			if d := time.Unix(0, lostAt).Sub(resumed); d > loadSlack {
				t.Errorf("S5: Lost fired %v after SIGCONT, with ValidUntil long past (bound: slack %v)", d, loadSlack)
			}
			if got := c.expect(t, "extend", 5*time.Second); got[0] != "notheld" {
				t.Errorf("S4: the stale holder's Extend = %s, want notheld", got[0])
			}
			if got := c.expect(t, "release", 5*time.Second); got[0] != "notheld" {
				t.Errorf("S4: the stale holder's Release = %s, want notheld", got[0])
			}
			if h := e.holder(id); h != r.Lease.Token() {
				t.Fatalf("S4: after the stale holder's Extend and Release the lock is held by %q, want the new holder", h)
			}
			_ = r.Lease.Release(context.Background())
		})
		t.Run("running", func(t *testing.T) {
			e := newEnv(t, a)
			id := "running-holder"
			const ttl = 300 * time.Millisecond
			r := e.hold(lock.Options{}, id, ttl)
			lostC := r.Lease.Lost()
			w := e.directLocker(lock.Options{WaiterTimeout: time.Minute})
			done := queuedWaiter(t, e, w, id)
			<-lostC
			lostAt := time.Now()
			got := recv(t, done, 5*time.Second, "waiter granted")
			grantedAt := time.Now()
			// The runtime timer fires at ValidUntil; allow for scheduling
			// delay on a loaded 2-core machine under -race.
			if lostAt.After(r.Lease.ValidUntil().Add(loadSlack)) {
				t.Errorf("S5: Lost fired %v after ValidUntil (bound: slack %v)", lostAt.Sub(r.Lease.ValidUntil()), loadSlack)
			}
			if grantedAt.Before(lostAt) {
				t.Errorf("S2/S5: the waiter was granted before the holder's Lost fired")
			}
			_ = got.Lease.Release(context.Background())
		})
	})
}
