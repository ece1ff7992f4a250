package lock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/memstore"
	"github.com/redislocker/lock/internal/testenv/locktest"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// These tests run inside a testing/synctest bubble: time.Sleep moves every
// timer of the Locker and of memorybackend at once, so that a lease's TTL or
// a queue timeout passes with no real waiting, and time comparisons are
// exact.

func newLocker(t *testing.T, b backend.Backend, o *lock.Options) *lock.Locker {
	t.Helper()
	if o == nil {
		o = &lock.Options{}
	}
	if o.Logger == nil {
		o.Logger = quietLogger()
	}
	l, err := lock.New(b, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func newStore(t *testing.T) *memstore.Store {
	t.Helper()
	s, err := memstore.NewStore(nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Three replicas that run a job with Do and NoWait at the same moment run
// it exactly once; the other two get ErrNotAcquired at once, without
// calling fn.
func TestDoNoWaitRunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		var runs atomic.Int32
		job := func(ctx context.Context, le *lock.Lease) (int, error) {
			runs.Add(1)
			time.Sleep(time.Second) // the job takes a while
			return int(le.Fence()), nil
		}
		var wg sync.WaitGroup
		var notAcquired atomic.Int32
		for range 3 {
			replica := newLocker(t, store.NewBackend(), nil)
			wg.Go(func() {
				start := time.Now()
				_, err := lock.Do(context.Background(), replica, "nightly", time.Minute, job, &lock.AcquireOptions{NoWait: true})
				switch {
				case errors.Is(err, lock.ErrNotAcquired):
					notAcquired.Add(1)
					if d := time.Since(start); d != 0 {
						t.Errorf("a replica that found the lock held returned after %v, want at once", d)
					}
				case err != nil:
					t.Errorf("Do: %v", err)
				}
			})
		}
		wg.Wait()
		if runs.Load() != 1 || notAcquired.Load() != 2 {
			t.Fatalf("3 replicas with NoWait: the job ran %d times, %d got ErrNotAcquired; want 1 and 2", runs.Load(), notAcquired.Load())
		}
	})
}

// Do passes the lease to fn, and honours Token and QueueTimeout.
func TestDoOptionsAndLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		l := newLocker(t, store.NewBackend(), nil)
		other := newLocker(t, store.NewBackend(), nil)
		ctx := context.Background()
		_, err := lock.Do(ctx, l, "x", time.Minute, func(ctx context.Context, le *lock.Lease) (int, error) {
			if le.Token() != "my-token" || le.ID() != "x" || le.Fence() == 0 || time.Until(le.ValidUntil()) != time.Minute {
				t.Errorf("fn's lease: id %q token %q fence %d valid for %v; want x, my-token, > 0, 1m",
					le.ID(), le.Token(), le.Fence(), time.Until(le.ValidUntil()))
			}
			// Another replica with a queue timeout of 1s gives up after 1s.
			start := time.Now()
			n, err := lock.Do(ctx, other, "x", time.Minute, func(context.Context, *lock.Lease) (int, error) { return 1, nil },
				&lock.AcquireOptions{QueueTimeout: time.Second})
			if n != 0 || !errors.Is(err, lock.ErrNotAcquired) || time.Since(start) != time.Second {
				t.Errorf("Do with QueueTimeout 1s on a held id: (%d, %v) after %v; want (0, ErrNotAcquired) after 1s", n, err, time.Since(start))
			}
			return 0, nil
		}, &lock.AcquireOptions{Token: "my-token"})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// stuckBackend wraps a backend; while stuck, its Extend (and ExtendBatch)
// and, with stuckRelease, its Release block until unstuck, ignoring ctx,
// as a go-redis client with ContextTimeoutEnabled false does on a stalled
// server.
type stuckBackend struct {
	backend.Backend
	mu           sync.Mutex
	stuck        chan struct{} // closed to unstick; nil when not stuck
	stuckRelease bool
	extends      atomic.Int32
}

func (s *stuckBackend) stick(release bool) {
	s.mu.Lock()
	s.stuck, s.stuckRelease = make(chan struct{}), release
	s.mu.Unlock()
}

func (s *stuckBackend) unstick() {
	s.mu.Lock()
	if s.stuck != nil {
		close(s.stuck)
		s.stuck = nil
	}
	s.mu.Unlock()
}

func (s *stuckBackend) wait(release bool) {
	s.mu.Lock()
	c, r := s.stuck, s.stuckRelease
	s.mu.Unlock()
	if c != nil && (!release || r) {
		<-c
	}
}

func (s *stuckBackend) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	s.extends.Add(1)
	s.wait(false)
	return s.Backend.Extend(ctx, id, token, ttl)
}

func (s *stuckBackend) Release(ctx context.Context, id, token string) error {
	s.wait(true)
	return s.Backend.Release(ctx, id, token)
}

// Do's ctx is cancelled, with cause ErrLeaseLost, no later than
// ValidUntil while the extend is stuck in a client that ignores deadlines;
// Lost fires then too. Do returns ErrLeaseLost: fn ran past its lease.
func TestDoCtxEndsByValidUntilWhileExtendStuck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sb := &stuckBackend{Backend: newStore(t).NewBackend()}
		l := newLocker(t, sb, nil)
		const ttl = 300 * time.Millisecond
		var loss testkit.Loss
		_, err := lock.Do(context.Background(), l, "x", ttl, func(ctx context.Context, le *lock.Lease) (int, error) {
			time.Sleep(ttl / 2) // one extend succeeds
			sb.stick(false)
			loss = testkit.AwaitLoss(ctx, le)
			sb.unstick()
			return 0, nil
		}, nil)
		if loss.Late() > 0 || !errors.Is(loss.Cause, lock.ErrLeaseLost) || loss.LostOpen {
			t.Errorf("S5: fn's ctx ended at ValidUntil%+v (cause %v, Lost still open: %v) while an extend was stuck; want no later than ValidUntil, cause ErrLeaseLost, Lost closed",
				loss.Late(), loss.Cause, loss.LostOpen)
		}
		if sb.extends.Load() < 2 {
			t.Errorf("%d extends; want the lease extended before the stall and an extend stuck", sb.extends.Load())
		}
		if !errors.Is(err, lock.ErrLeaseLost) {
			t.Errorf("Do = %v; want ErrLeaseLost (fn ran past the lease)", err)
		}
	})
}

// fn returns inside the lease and only the release stalls past ValidUntil
// (then finds the lock expired): fn never ran unprotected, so Do returns
// no ErrLeaseLost.
func TestDoReleaseStallAfterFnIsNoLeaseLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sb := &stuckBackend{Backend: newStore(t).NewBackend()}
		l := newLocker(t, sb, nil)
		const ttl = 300 * time.Millisecond
		go func() {
			time.Sleep(10 * ttl) // the stall ends long after the lease
			sb.unstick()
		}()
		v, err := lock.Do(context.Background(), l, "x", ttl, func(ctx context.Context, le *lock.Lease) (int, error) {
			sb.stick(true) // every step from here on stalls
			return 7, nil
		}, nil)
		if v != 7 || err != nil {
			t.Errorf("Do = (%d, %v); want (7, nil): fn returned inside its lease, only the release stalled", v, err)
		}
	})
}

// noExtendBatch hides the ExtendBatcher of the backend it wraps, so the
// core uses its fallback (one Extend per lease), as the Redis adapters do
// until they implement it. It counts the steps.
type noExtendBatch struct {
	backend.Backend
	extends atomic.Int64
}

func (n *noExtendBatch) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	n.extends.Add(1)
	return n.Backend.Extend(ctx, id, token, ttl)
}

// countBatches counts ExtendBatch round trips and the leases in them.
type countBatches struct {
	*memstore.Backend
	batches, leases atomic.Int64
}

func (c *countBatches) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]error, error) {
	c.batches.Add(1)
	c.leases.Add(int64(len(reqs)))
	return c.Backend.ExtendBatch(ctx, reqs)
}

// AcquireMany of 1,000 ids with a 500 ms TTL, processed one by one at 1 ms
// each (1 s in all): with keep-alive every release succeeds, and the
// Locker extends them in one batched step per tick, not one per lease.
// Without keep-alive most releases find the lease expired (the control).
func TestAcquireManyKeepAlive(t *testing.T) {
	for _, c := range []struct {
		name      string
		keepAlive bool
		batched   bool
	}{{"keep-alive/batched", true, true}, {"keep-alive/fallback", true, false}, {"no-keep-alive", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mb := newStore(t).NewBackend()
				cb := &countBatches{Backend: mb}
				fb := &noExtendBatch{Backend: mb}
				var b backend.Backend = cb
				if !c.batched {
					b = fb
				}
				l := newLocker(t, b, nil)
				const n, ttl, each = 1000, 500 * time.Millisecond, time.Millisecond
				ids := make([]string, n)
				for i := range ids {
					ids[i] = "job-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
				}
				w, err := locktest.WorkAll(context.Background(), l, ids, ttl, each, &lock.AcquireOptions{KeepAlive: c.keepAlive})
				if err != nil {
					t.Fatal(err)
				}
				released, notHeld := w.Released, w.NotHeld
				t.Logf("%d released, %d ErrNotHeld; %d batched extends of %d leases, %d single extends",
					released, notHeld, cb.batches.Load(), cb.leases.Load(), fb.extends.Load())
				if !c.keepAlive {
					if notHeld == 0 {
						t.Fatalf("without keep-alive every release succeeded; the control does not reproduce the expiry")
					}
					return
				}
				if released != n {
					t.Fatalf("with keep-alive %d of %d releases succeeded (%d ErrNotHeld); want all", released, n, notHeld)
				}
				// 1 s of processing, ttl/3 period: about 6 ticks.
				const maxTicks = int64(n*each/(ttl/3)) + 3
				if c.batched && cb.batches.Load() > maxTicks {
					t.Errorf("%d ExtendBatch calls in %v; want at most %d (one per tick)", cb.batches.Load(), n*each, maxTicks)
				}
				if !c.batched && fb.extends.Load() == 0 {
					t.Errorf("the fallback extended nothing")
				}
			})
		})
	}
}

// A kept-alive lease from Acquire outlives its ttl until it is released;
// Release stops the keep-alive (no extend after it) and closes Lost.
func TestKeepAliveAcquireUntilRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cb := &countBatches{Backend: newStore(t).NewBackend()}
		l := newLocker(t, cb, nil)
		ctx := context.Background()
		res, err := l.Acquire(ctx, "x", 300*time.Millisecond, &lock.AcquireOptions{KeepAlive: true})
		if err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		le := res.Lease
		time.Sleep(3 * time.Second)
		select {
		case <-le.Lost():
			t.Fatal("a kept-alive lease was lost after 10 ttls")
		default:
		}
		if d := time.Until(le.ValidUntil()); d <= 0 {
			t.Fatalf("ValidUntil is %v ago; want it kept ahead", -d)
		}
		if err := le.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-le.Lost():
		default:
			t.Error("Lost is open after Release")
		}
		before := cb.batches.Load()
		time.Sleep(3 * time.Second)
		if after := cb.batches.Load(); after != before {
			t.Errorf("%d extends after Release; want none", after-before)
		}
	})
}

// A kept-alive lease that another owner took over (here: the store expired
// it) is found not held at the next tick: Lost fires, keep-alive stops.
func TestKeepAliveLossClosesLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		l := newLocker(t, store.NewBackend(), nil)
		res, err := l.Acquire(context.Background(), "x", 300*time.Millisecond, &lock.AcquireOptions{KeepAlive: true})
		if err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		store.ExpireNow("x")
		time.Sleep(150 * time.Millisecond) // past the next keep-alive tick (ttl/3)
		select {
		case <-res.Lease.Lost():
		default:
			t.Fatal("Lost is open after keep-alive found the lease not held")
		}
		if err := res.Lease.Release(context.Background()); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Release after loss = %v; want ErrNotHeld", err)
		}
	})
}

// gatedSubscribe wraps a backend whose first Subscribe blocks until
// release is closed, and then fails with errSubscribe if failFirst is set;
// later Subscribes go through.
type gatedSubscribe struct {
	backend.Backend
	failFirst bool
	entered   chan struct{}
	release   chan struct{}
	calls     atomic.Int32
}

var errSubscribe = errors.New("subscribe: connection reset")

func newGated(b backend.Backend, failFirst bool) *gatedSubscribe {
	return &gatedSubscribe{Backend: b, failFirst: failFirst, entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (g *gatedSubscribe) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (func(), error) {
	if g.calls.Add(1) == 1 {
		g.entered <- struct{}{}
		<-g.release
		if g.failFirst {
			return nil, errSubscribe
		}
	}
	return g.Backend.Subscribe(ctx, id, fn)
}

// holdX has another process on store take "x" and returns its lease.
func holdX(t *testing.T, store *memstore.Store) *lock.Lease {
	t.Helper()
	res, err := newLocker(t, store.NewBackend(), nil).Acquire(context.Background(), "x", time.Minute, nil)
	if err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	return res.Lease
}

// Caller A, whose ctx is cancelled while the id's shared subscription is
// being made, returns its own ctx error; caller B, waiting on the same
// subscription with a live ctx, is not failed and is granted.
func TestSubscribeNotFailedByAnotherCallersCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		held := holdX(t, store)
		bs := newGated(store.NewBackend(), false)
		l := newLocker(t, bs, nil)
		ctx := context.Background()
		actx, cancelA := context.WithCancel(ctx)
		aErr := make(chan error, 1)
		go func() {
			_, err := l.Acquire(actx, "x", time.Minute, nil)
			aErr <- err
		}()
		<-bs.entered // A's call started the subscription
		bRes := make(chan lock.Result, 1)
		bErr := make(chan error, 1)
		go func() {
			r, err := l.Acquire(ctx, "x", time.Minute, nil)
			bRes <- r
			bErr <- err
		}()
		synctest.Wait() // B waits on the same subscription
		cancelA()
		if err := <-aErr; !errors.Is(err, context.Canceled) {
			t.Errorf("A = %v; want its own context.Canceled", err)
		}
		close(bs.release)
		synctest.Wait()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r, err := <-bRes, <-bErr
		if err != nil || !r.Acquired {
			t.Fatalf("B = (%+v, %v) after A's cancel; want granted", r, err)
		}
		_ = r.Lease.Release(ctx)
	})
}

// A subscription started for caller A fails: A gets the error, but caller
// B, who only joined it, subscribes again on its own and is granted.
func TestSubscribeFailedForAnotherCallerRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		held := holdX(t, store)
		fs := newGated(store.NewBackend(), true)
		l := newLocker(t, fs, nil)
		ctx := context.Background()
		aErr := make(chan error, 1)
		go func() {
			_, err := l.Acquire(ctx, "x", time.Minute, nil)
			aErr <- err
		}()
		<-fs.entered
		type result struct {
			r   lock.Result
			err error
		}
		bDone := make(chan result, 1)
		go func() {
			r, err := l.Acquire(ctx, "x", time.Minute, nil)
			bDone <- result{r, err}
		}()
		synctest.Wait()
		close(fs.release)
		if err := <-aErr; !errors.Is(err, errSubscribe) {
			t.Errorf("A = %v; want its subscription's error", err)
		}
		synctest.Wait()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		b := <-bDone
		if b.err != nil || !b.r.Acquired {
			t.Fatalf("B = (%+v, %v); want granted after subscribing again on its own", b.r, b.err)
		}
		if n := fs.calls.Load(); n != 2 {
			t.Errorf("%d Subscribe calls; want 2 (A's, failed; B's own)", n)
		}
		_ = b.r.Lease.Release(ctx)
	})
}

// With the fallback (one Extend per lease, 16 at a time) and the store
// stalled, keep-alive holds up only the leases of its stalled chunk: the
// others can be released at once. (Real time, not synctest: releases wait
// on a mutex, which a bubble does not count as blocked.)
func TestKeepAliveStallHoldsOneChunk(t *testing.T) {
	sb := &stuckBackend{Backend: newStore(t).NewBackend()} // hides ExtendBatcher
	l := newLocker(t, sb, nil)
	ctx := context.Background()
	const n, ttl, chunk = 40, 300 * time.Millisecond, 16
	ids := make([]string, n)
	for i := range ids {
		ids[i] = string(rune('A' + i))
	}
	var leases []*lock.Lease
	sb.stick(false)
	for snap, err := range l.AcquireMany(ctx, ids, ttl, &lock.AcquireOptions{KeepAlive: true}) {
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, snap.Acquired...)
	}
	defer sb.unstick()
	testkit.Eventually(t, 10*time.Second, "the first keep-alive chunk is sent and stalls",
		func() bool { return sb.extends.Load() == chunk })
	var returned atomic.Int32
	var wg sync.WaitGroup
	for _, le := range leases {
		wg.Go(func() {
			_ = le.Release(ctx) // ErrNotHeld too, if the lease expired meanwhile
			returned.Add(1)
		})
	}
	testkit.Eventually(t, 10*time.Second, "the releases of the leases outside the stalled chunk return",
		func() bool { return returned.Load() == n-chunk })
	if got := sb.extends.Load(); got != chunk {
		t.Errorf("%d extends sent while the first chunk stalls; want %d", got, chunk)
	}
	sb.unstick()
	wg.Wait()
}

// failingExtend wraps a backend whose Extend always fails, as with the
// store out of reach; it counts the calls.
type failingExtend struct {
	backend.Backend
	calls atomic.Int32
}

func (f *failingExtend) Extend(context.Context, string, string, time.Duration) error {
	f.calls.Add(1)
	return errors.New("connection refused")
}

// When every extend of a keep-alive chunk fails, the rest of the tick's
// chunks wait for their retry instead of failing one round trip after
// another.
func TestKeepAliveStopsTickAfterFailedChunk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fe := &failingExtend{Backend: newStore(t).NewBackend()} // hides ExtendBatcher
		l := newLocker(t, fe, nil)
		const n, ttl = 40, 300 * time.Millisecond
		ids := make([]string, n)
		for i := range ids {
			ids[i] = string(rune('A' + i))
		}
		for _, err := range l.AcquireMany(context.Background(), ids, ttl, &lock.AcquireOptions{KeepAlive: true}) {
			if err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(ttl/3 + time.Millisecond) // the first tick, not yet its retry
		if got := fe.calls.Load(); got != 16 {
			t.Errorf("%d extends in the first tick with every extend failing; want 16 (one chunk)", got)
		}
	})
}
