package lock

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redislocker/lock/backend"
)

// A waiter told that it became the head of a held lock (Wake.HolderTTL)
// sends no step then, but one when the holder's TTL (+ the resolution)
// has passed, which is granted: the lease ended without a release.
func TestToldHeadArmsHolderTimerWithoutStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var free atomic.Bool
		f := &stepFake{}
		f.acquire = func(r backend.AcquireRequest) (backend.Grant, error) {
			if free.Load() {
				return backend.Grant{Acquired: true, Fence: 7, TTL: r.TTL}, nil
			}
			// Queued behind another waiter: not the head, no timer.
			return backend.Grant{Queued: r.Wait, Ticket: 2, HolderTTL: time.Hour}, nil
		}
		l := quietLocker(f, &Options{WaiterTimeout: time.Minute})
		defer l.Close()
		acquires := func() int {
			n := 0
			for _, c := range f.callsCopy() {
				if c == "acquire" {
					n++
				}
			}
			return n
		}
		done := make(chan Result, 1)
		go func() {
			res, err := l.Acquire(context.Background(), "x", time.Second, &AcquireOptions{Token: "C"})
			if err != nil {
				t.Errorf("Acquire: %v", err)
			}
			done <- res
		}()
		synctest.Wait()
		before := acquires() // the try and the waiting step
		f.mu.Lock()
		wake := f.wakeFns["x"]
		f.mu.Unlock()
		const holderTTL = 300 * time.Millisecond
		told := time.Now()
		wake(backend.Wake{ID: "x", Token: "C", HolderTTL: holderTTL})
		synctest.Wait()
		// Errorf, not Fatalf, until the Acquire has returned.
		if n := acquires(); n != before {
			t.Errorf("a told wake-up sent %d steps; want none (a timer at the holder's TTL)", n-before)
		}
		free.Store(true) // the holder's lease ends without a release
		res := <-done
		if !res.Acquired {
			t.Errorf("Acquire = %+v; want a grant", res)
		}
		if got, want := time.Since(told), holderTTL+time.Millisecond; got != want {
			t.Errorf("granted %v after the told wake-up; want the holder's TTL + the resolution, %v", got, want)
		}
		if n := acquires(); n != before+1 {
			t.Errorf("%d steps after the told wake-up; want 1 (at the holder's TTL)", n-before)
		}
	})
}

// A told wake-up goes to the named waiter's told function, or, when it has
// none, wakes it to re-check.
func TestToldWakeRouting(t *testing.T) {
	l := quietLocker(&stepFake{}, nil)
	defer l.Close()
	var woken, told []string
	var ttl time.Duration
	a := &waiter{id: "x", token: "a", wake: func() { woken = append(woken, "a") },
		told: func(d time.Duration) { told = append(told, "a"); ttl = d }}
	b := &waiter{id: "x", token: "b", wake: func() { woken = append(woken, "b") }}
	l.room.ids["x"] = &idWaiters{waiters: map[*waiter]struct{}{a: {}, b: {}}, ready: make(chan struct{})}
	l.room.onWake(backend.Wake{ID: "x", Token: "a", HolderTTL: time.Second})
	l.room.onWake(backend.Wake{ID: "x", Token: "b", HolderTTL: time.Second})
	l.room.onWake(backend.Wake{ID: "x", Token: "a"})
	if len(told) != 1 || ttl != time.Second || len(woken) != 2 || woken[0] != "b" || woken[1] != "a" {
		t.Fatalf("told %v (ttl %v), woken %v; want told [a] (1s), woken [b a]", told, ttl, woken)
	}
	delete(l.room.ids, "x")
}
