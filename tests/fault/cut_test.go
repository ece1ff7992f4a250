package fault

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/internal/testenv/faultproxy"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// TestCutConnectionLeavesNothing (S6, H2): the connection is cut at every
// byte offset of a step, in each direction, with a client that does not
// retry (so the step's error reaches the core): during a plain acquire,
// during an enqueueing acquire behind a holder, and during a release. The
// outcome is unknown to the caller; the core cleans up by token (Leave),
// or the caller retries Release, and afterwards SCAN finds no key of the
// test but the counters (and the holder's lock, where there is one).
//
// "Afterwards" is when the Locker's work for the call is over, which for
// the enqueue may be after the call returned: its ctx ends, and a step or
// cleanup (Leave) still in flight when the call's grace is over goes on
// in the background, where what it left is removed once it returns (S6;
// Acquire's doc). On a loaded machine that is common. So each enqueue runs
// on a Locker of its own, over the shared backend, and is checked after
// that Locker's Close, which waits for those steps and cleanups (and logs
// when it gives up on them): checked at the call's return, the cleanup
// may not have run yet; and left running, the next case's cut could cut
// it.
func TestCutConnectionLeavesNothing(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *env) {
		p := faultproxy.Start(t, e.srv.Addr)
		b := e.backend(p.Addr(), clientOpts{noRetries: true})
		opts := lock.Options{WaiterTimeout: 3 * time.Second}
		l := e.locker(b, opts)
		other := e.directLocker(lock.Options{})
		ctx := context.Background()

		// Measure one step's request and reply, scripts loaded.
		warm := func(id string) {
			r, err := l.Acquire(ctx, id, time.Minute, nil)
			if err != nil || !r.Acquired {
				t.Fatalf("warm-up: %v", err)
			}
			if err := r.Lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		warm("warm")
		s0 := p.Stats()
		warm("warm")
		s1 := p.Stats()
		up := (s1.Forwarded[faultproxy.Up] - s0.Forwarded[faultproxy.Up]) / 2
		down := (s1.Forwarded[faultproxy.Down] - s0.Forwarded[faultproxy.Down]) / 2
		if up <= 0 || down <= 0 {
			t.Fatalf("could not measure a step: up %d down %d", up, down)
		}
		offsets := func(n int64) []int64 {
			out := []int64{0, 1, n / 2, n - 1, n}
			for i := int64(7); i < n; i += n / 6 {
				out = append(out, i)
			}
			return out
		}
		checkClean := func(what string, allowed ...string) {
			t.Helper()
			left := e.keysLeft()
			ok := map[string]bool{}
			for _, k := range allowed {
				ok[k] = true
			}
			for _, k := range left {
				if !ok[k] {
					t.Errorf("S6/H2: %s: key %s left behind (all: %v; logs: %q)", what, k, left, e.logs.matching(""))
					_ = e.raw.Del(ctx, k) // report each leak once
				}
			}
		}
		var cutErrs, outcomes, outlived int
		leaves := &stepsEnded{step: "leave"}
		qopts := opts
		qopts.Observer = leaves
		cutsBefore := p.Stats().Cuts
		var lastErr error

		for _, dir := range []faultproxy.Dir{faultproxy.Up, faultproxy.Down} {
			n := up
			if dir == faultproxy.Down {
				n = down
			}
			for _, off := range offsets(n) {
				// A plain acquire, cut.
				id := fmt.Sprintf("acq-%v-%d", dir, off)
				p.CutAfter(dir, off)
				r, err := l.Acquire(ctx, id, time.Minute, nil)
				outcomes++
				if err != nil {
					cutErrs++
					lastErr = err
					if !errors.Is(err, lock.ErrBackend) {
						t.Errorf("acquire cut %v after %d bytes: %v, want ErrBackend", dir, off, err)
					}
				}
				p.Clear() // an armed cut may not have fired on this step
				if err == nil && r.Acquired {
					releaseRetrying(t, r.Lease)
				}
				checkClean(fmt.Sprintf("acquire cut %v after %d bytes (err %v)", dir, off, lastErr))
				lastErr = nil

				// An enqueue behind a holder, cut: no entry may stay.
				id = fmt.Sprintf("enq-%v-%d", dir, off)
				hr, err := other.Acquire(ctx, id, time.Minute, nil)
				if err != nil || !hr.Acquired {
					t.Fatal(err)
				}
				lq := e.locker(keepOpen{b}, qopts)
				p.CutAfter(dir, off)
				wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				_, err = lq.Acquire(wctx, id, time.Minute, nil)
				cancel()
				if err == nil {
					t.Errorf("enqueue cut %v after %d bytes: the waiter returned without error while the lock was held", dir, off)
				}
				atReturn, _ := leaves.of(id)
				p.Clear()
				what := fmt.Sprintf("enqueue cut %v after %d bytes", dir, off)
				closeSettled(t, e, lq, what)
				if after, _ := leaves.of(id); after > atReturn {
					outlived++
				}
				checkClean(what, e.ks.For(id).Lock)
				_ = hr.Lease.Release(ctx)

				// A release, cut: retry by token until the outcome is known.
				id = fmt.Sprintf("rel-%v-%d", dir, off)
				r, err = l.Acquire(ctx, id, time.Minute, nil)
				if err != nil || !r.Acquired {
					t.Fatal(err)
				}
				p.CutAfter(dir, off)
				err = r.Lease.Release(ctx)
				p.Clear()
				if err != nil && !errors.Is(err, lock.ErrBackend) {
					t.Errorf("release cut %v after %d bytes: %v", dir, off, err)
				}
				if err != nil {
					cutErrs++
					err = r.Lease.Release(ctx) // the retry
					if err != nil && !errors.Is(err, lock.ErrNotHeld) {
						t.Errorf("retried release: %v", err)
					}
				}
				checkClean(fmt.Sprintf("release cut %v after %d bytes", dir, off))
				// Nobody else's lock is touched by the retry, and the id
				// is free for the next one, with a higher fence.
				r2, err := other.TryAcquire(ctx, id, time.Minute)
				if err != nil || !r2.Acquired || r2.Lease.Fence() <= r.Lease.Fence() {
					t.Errorf("after the cut release: TryAcquire %v %v", r2.Acquired, err)
				} else {
					_ = r2.Lease.Release(ctx)
				}
			}
		}
		cuts := p.Stats().Cuts - cutsBefore
		t.Logf("request %d bytes, reply %d bytes; %d offsets x 3 steps, %d connections cut, %d surfaced as errors (the rest were resent by the client and succeeded); %d enqueues' cleanups outlived their call",
			up, down, outcomes, cuts, cutErrs, outlived)
		if cuts == 0 {
			t.Error("no connection was cut: the test did not cut anything")
		}
	})
}

// closeSettled closes l, which waits for the backend steps its callers
// stopped waiting for and for their cleanups, and fails t (naming what)
// if Close gave up on some of them: what they left is not settled yet.
func closeSettled(t *testing.T, e *env, l *lock.Locker, what string) {
	t.Helper()
	before := len(e.logs.matching(stepsStillRunning))
	if err := l.Close(); err != nil {
		t.Errorf("%s: Close: %v", what, err)
	}
	if got := e.logs.matching(stepsStillRunning); len(got) > before {
		t.Errorf("%s: Close gave up waiting for the call's background steps: %q", what, got[before:])
	}
}

// stepsStillRunning is in the warning of a Close that stopped waiting for
// the background steps of its calls.
const stepsStillRunning = "backend steps still running"

// TestReleaseRetriedByClient: the reply of a release that took effect is
// lost. A client that resends on its own (go-redis's MaxRetries, the
// rueidis adapter's one resend) or the caller retrying by token gets nil,
// not ErrNotHeld: the release script remembers the id's latest release
// (checklist item 3), so a resent release is answered as done and never
// touches another owner's lock.
func TestReleaseRetriedByClient(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *env) {
		p := faultproxy.Start(t, e.srv.Addr)
		l := e.locker(e.backend(p.Addr(), clientOpts{}), lock.Options{})
		ctx := context.Background()
		for range 2 { // the second round runs with every script loaded
			r, err := l.Acquire(ctx, "x", time.Minute, nil)
			if err != nil || !r.Acquired {
				t.Fatal(err)
			}
			if err := r.Lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		r, err := l.Acquire(ctx, "x", time.Minute, nil)
		if err != nil || !r.Acquired {
			t.Fatal(err)
		}
		p.CutAfter(faultproxy.Down, 0) // the release runs; its reply is lost
		err = r.Lease.Release(ctx)
		if left := e.keysLeft(); len(left) != 0 {
			t.Fatalf("keys left after a retried release: %v", left)
		}
		switch {
		case err == nil:
		case errors.Is(err, lock.ErrBackend):
			// A client that does not resend: the outcome is unknown; the
			// caller's retry by token is answered as done.
			if err := r.Lease.Release(ctx); err != nil {
				t.Fatalf("retried Release after a lost reply = %v, want nil (it did release)", err)
			}
		default:
			t.Fatalf("Release whose reply was lost = %v, want nil (or ErrBackend, then nil on the retry)", err)
		}
		ctx2, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r2, err := l.Acquire(ctx2, "x", time.Minute, nil)
		if err != nil || !r2.Acquired || r2.Lease.Fence() <= r.Lease.Fence() {
			t.Fatalf("after the retried release: %v %v", r2.Acquired, err)
		}
		_ = r2.Lease.Release(ctx)
	})
}

// TestCleanupOutlivingTheCallLeavesNothing (S6, H2) is the enqueue of
// TestCutConnectionLeavesNothing made slow on purpose: the caller's ctx
// ends while it is queued, and from then on every byte to the server is
// held back (holdBack), so the call's cleanup (Leave by token) is still on
// its way when the call returns with the ctx's error, its grace over. The
// Leave goes on in the background, and once it has returned, which Close
// waits for, nothing of the call is left and no failure is logged.
func TestCleanupOutlivingTheCallLeavesNothing(t *testing.T) {
	const holdBack = time.Second
	forEachEnv(t, func(t *testing.T, e *env) {
		p := faultproxy.Start(t, e.srv.Addr)
		leaves := &stepsEnded{step: "leave"}
		l := e.locker(e.backend(p.Addr(), clientOpts{}), lock.Options{WaiterTimeout: 3 * time.Second, Observer: leaves})
		other := e.directLocker(lock.Options{})
		ctx := context.Background()
		// A first acquire opens the connections and loads the scripts.
		r, err := l.Acquire(ctx, "warm", time.Minute, nil)
		if err != nil || !r.Acquired {
			t.Fatalf("warm-up: %v", err)
		}
		must(t, r.Lease.Release(ctx))

		id := "slow-leave"
		hr, err := other.Acquire(ctx, id, time.Minute, nil)
		if err != nil || !hr.Acquired {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := l.Acquire(wctx, id, time.Minute, nil)
			done <- err
		}()
		testkit.Eventually(t, 5*time.Second, "the waiter queued", func() bool { return e.queued(id) == 1 })
		p.Delay(faultproxy.Up, holdBack)
		cancel()
		err = recv(t, done, 5*time.Second, "the cancelled waiter returns")
		if n, errs := leaves.of(id); n != 0 {
			t.Fatalf("the cleanup had returned (%d leave steps, errors %v) when the call did, its Leave held back %v: the test no longer has a cleanup outlive its call", n, errs, holdBack)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the cancelled waiter returned %v; want an error matching context.Canceled", err)
		}
		p.Clear()
		closeSettled(t, e, l, "a cleanup that outlived its call")
		if n, errs := leaves.of(id); n != 1 || len(errs) != 0 {
			t.Errorf("%d leave steps of %q ended, with errors %v; want the one cleanup, without", n, id, errs)
		}
		if left := e.keysLeft(); len(left) != 1 || left[0] != e.ks.For(id).Lock {
			t.Errorf("S6/H2: after the cleanup that outlived its call returned: keys %v; want only the holder's lock (logs: %q)", left, e.logs.matching(""))
		}
		if logs := e.logs.matching("cleanup"); len(logs) != 0 {
			t.Errorf("a cleanup failed: %q", logs)
		}
		must(t, hr.Lease.Release(ctx))
	})
}

// stepsEnded is an Observer that records the ends of the backend steps
// named step, per id: how many ended, and their errors.
type stepsEnded struct {
	step string
	mu   sync.Mutex
	n    map[string]int
	errs map[string][]error
}

func (s *stepsEnded) Observe(ev lock.Event) {
	if ev.Kind != lock.EventStep || ev.Step != s.step {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n, s.errs = map[string]int{}, map[string][]error{}
	}
	s.n[ev.ID]++
	if ev.Err != nil {
		s.errs[ev.ID] = append(s.errs[ev.ID], ev.Err)
	}
}

// of returns how many steps of id ended, and their errors.
func (s *stepsEnded) of(id string) (int, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[id], s.errs[id]
}
