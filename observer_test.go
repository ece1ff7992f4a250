package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/backendkit/memstore"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []lock.Event
	added  chan struct{} // closed and replaced on every event
}

func newRecorder() *recorder { return &recorder{added: make(chan struct{})} }

func (r *recorder) Observe(e lock.Event) {
	e.Context = nil // not kept past Observe
	r.mu.Lock()
	r.events = append(r.events, e)
	close(r.added)
	r.added = make(chan struct{})
	r.mu.Unlock()
}

// find returns the events of kind k that match, in order.
func (r *recorder) find(k lock.EventKind, match func(lock.Event) bool) []lock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []lock.Event
	for _, e := range r.events {
		if e.Kind == k && (match == nil || match(e)) {
			out = append(out, e)
		}
	}
	return out
}

// await waits up to 5 s for an event of kind k that matches.
func (r *recorder) await(t *testing.T, what string, k lock.EventKind, match func(lock.Event) bool) lock.Event {
	t.Helper()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		added := r.added
		r.mu.Unlock()
		if got := r.find(k, match); len(got) > 0 {
			return got[0]
		}
		select {
		case <-added:
		case <-deadline.C:
			t.Fatalf("%s: no %v event within 5s; events: %+v", what, k, r.find(k, nil))
		}
	}
}

func forID(id string) func(lock.Event) bool { return func(e lock.Event) bool { return e.ID == id } }

func newObserved(t *testing.T, b backend.Backend, o lock.Options) (*lock.Locker, *recorder) {
	rec := newRecorder()
	o.Observer = rec
	if o.Logger == nil {
		o.Logger = quietLogger()
	}
	if o.WaiterTimeout == 0 {
		o.WaiterTimeout = 900 * time.Millisecond
	}
	l := mustLocker(b, &o)
	t.Cleanup(func() { _ = l.Close() })
	return l, rec
}

func TestObserverAcquireOutcomes(t *testing.T) {
	defer goleak.VerifyNone(t)
	store := testkit.Must(memstore.NewStore(nil))
	l, rec := newObserved(t, store.NewBackend(), lock.Options{})
	other := mustLocker(store.NewBackend(), &lock.Options{Logger: quietLogger()})
	defer other.Close()
	ctx := context.Background()

	// Granted at once.
	res, err := l.Acquire(ctx, "a", time.Minute, nil)
	if err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	ev := rec.await(t, "granted", lock.EventAcquire, forID("a"))
	if ev.Outcome != lock.OutcomeGranted || ev.Fence != res.Lease.Fence() || ev.Duration < 0 || ev.Start.IsZero() || ev.Err != nil {
		t.Fatalf("granted at once: %+v", ev)
	}
	if st := rec.find(lock.EventStep, func(e lock.Event) bool { return e.Step == "acquire" && e.ID == "a" }); len(st) != 1 || st[0].Err != nil {
		t.Fatalf("acquire steps of a: %+v, want one", st)
	}

	// Busy: TryAcquire on a held id.
	if res, err := l.TryAcquire(ctx, "a", time.Minute); err != nil || res.Acquired {
		t.Fatal(res, err)
	}
	rec.await(t, "busy", lock.EventAcquire, func(e lock.Event) bool { return e.Outcome == lock.OutcomeBusy })

	// Queue timeout.
	if res, err := l.Acquire(ctx, "a", time.Minute, &lock.AcquireOptions{QueueTimeout: 30 * time.Millisecond}); err != nil || res.Acquired {
		t.Fatal(res, err)
	}
	rec.await(t, "queue timeout", lock.EventAcquire, func(e lock.Event) bool { return e.Outcome == lock.OutcomeQueueTimeout })

	// Cancelled while queued.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := l.Acquire(cctx, "a", time.Minute, nil); done <- err }()
	rec.await(t, "queued", lock.EventWaiters, func(e lock.Event) bool { return e.Delta == 1 && e.Waiters == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	ev = rec.await(t, "cancelled", lock.EventAcquire, func(e lock.Event) bool { return e.Outcome == lock.OutcomeCancelled })
	if !errors.Is(ev.Err, context.Canceled) {
		t.Fatalf("cancelled: %+v", ev)
	}
	rec.await(t, "left", lock.EventWaiters, func(e lock.Event) bool { return e.Delta == -1 && e.Waiters == 0 })

	// Granted after a wait, with a hand-off: another process holds b.
	held, err := other.Acquire(ctx, "b", time.Minute, nil)
	if err != nil || !held.Acquired {
		t.Fatal(held, err)
	}
	got := make(chan lock.Result, 1)
	go func() { r, _ := l.Acquire(ctx, "b", time.Minute, nil); got <- r }()
	rec.await(t, "b queued", lock.EventWaiters, func(e lock.Event) bool { return e.ID == "b" && e.Delta == 1 })
	// The waiter must be in the store's queue before the release, or its
	// first step takes the free lock with no wake-up (no hand-off).
	for deadline := time.Now().Add(5 * time.Second); len(store.Waiters("b")) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("b's waiter never reached the store's queue")
		}
		time.Sleep(time.Millisecond)
	}
	if err := held.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if !r.Acquired {
		t.Fatal(r)
	}
	ev = rec.await(t, "granted after wait", lock.EventAcquire, func(e lock.Event) bool { return e.ID == "b" })
	if ev.Outcome != lock.OutcomeGrantedAfterWait || ev.Fence != r.Lease.Fence() {
		t.Fatalf("granted after wait: %+v", ev)
	}
	ho := rec.await(t, "hand-off", lock.EventHandoff, forID("b"))
	if ho.Duration < 0 || ho.Duration > ev.Duration {
		t.Fatalf("hand-off latency %v, want in [0, the wait %v]", ho.Duration, ev.Duration)
	}

	// Hold time on release.
	if err := res.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rel := rec.await(t, "release", lock.EventRelease, forID("a"))
	if rel.Fence != res.Lease.Fence() || rel.Duration <= 0 || rel.Duration > time.Since(ev.Start)+time.Minute {
		t.Fatalf("release: %+v", rel)
	}
	if err := r.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.find(lock.EventRelease, nil)); n != 2 {
		t.Fatalf("%d release events, want 2", n)
	}
	if n := len(rec.find(lock.EventHandoff, nil)); n != 1 {
		t.Fatalf("%d hand-off events, want 1 (only b waited)", n)
	}
	_ = l.Close()
	_ = other.Close()
}

// failing is a memory backend whose Acquire or Extend can be made to fail.
type failing struct {
	*memstore.Backend
	mu         sync.Mutex
	acquireErr error
	extendErr  error
}

var errDown = errors.New("injected: the store is down")

func (f *failing) set(acquire, extend error) {
	f.mu.Lock()
	f.acquireErr, f.extendErr = acquire, extend
	f.mu.Unlock()
}

func (f *failing) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	f.mu.Lock()
	err := f.acquireErr
	f.mu.Unlock()
	if err != nil {
		return backend.Grant{}, err
	}
	return f.Backend.Acquire(ctx, req)
}

func (f *failing) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	f.mu.Lock()
	err := f.extendErr
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.Backend.Extend(ctx, id, token, ttl)
}

// ExtendBatch runs the core's fallback over f's own Extend, so that the
// kept-alive leases of Do fail as Extend does (the embedded memory
// backend's ExtendBatch would bypass it).
func (f *failing) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]error, error) {
	return fallback.ExtendEach(ctx, f, reqs)
}

func TestObserverErrorsExtendsAndLostLeases(t *testing.T) {
	defer goleak.VerifyNone(t)
	// The store's clock stands still: a lease ends at the store only by
	// ExpireNow, so Do's lease below is presumed lost by the Locker alone.
	store := testkit.Must(memstore.NewStore(&memstore.Options{Clock: memstore.NewManualClock(time.Now())}))
	fb := &failing{Backend: store.NewBackend()}
	l, rec := newObserved(t, fb, lock.Options{})
	ctx := context.Background()

	fb.set(errDown, nil)
	if _, err := l.TryAcquire(ctx, "e", time.Minute); !errors.Is(err, lock.ErrBackend) {
		t.Fatal(err)
	}
	ev := rec.await(t, "error", lock.EventAcquire, forID("e"))
	if ev.Outcome != lock.OutcomeError || !errors.Is(ev.Err, errDown) {
		t.Fatalf("error outcome: %+v", ev)
	}
	st := rec.await(t, "failed step", lock.EventStep, func(e lock.Event) bool { return e.Step == "acquire" && e.ID == "e" })
	if !errors.Is(st.Err, errDown) || !lock.StepFailed(st.Err) {
		t.Fatalf("failed step: %+v", st)
	}
	fb.set(nil, nil)

	// Extends: one that works, one after the store expired the lease.
	res, err := l.Acquire(ctx, "x", time.Minute, nil)
	if err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if err := res.Lease.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ex := rec.await(t, "extend", lock.EventExtend, forID("x")); ex.Err != nil || ex.Fence != res.Lease.Fence() {
		t.Fatalf("extend: %+v", ex)
	}
	store.ExpireNow("x")
	if err := res.Lease.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatal(err)
	}
	if ex := rec.find(lock.EventExtend, forID("x")); len(ex) != 2 || !errors.Is(ex[1].Err, lock.ErrNotHeld) {
		t.Fatalf("extend events: %+v, want the second with ErrNotHeld", ex)
	}
	if err := res.Lease.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatal(err)
	}
	if lost := rec.find(lock.EventLeaseLost, forID("x")); len(lost) != 1 || !errors.Is(lost[0].Err, lock.ErrNotHeld) {
		t.Fatalf("lost events of x: %+v, want exactly one, ErrNotHeld", lost)
	}
	if st := rec.find(lock.EventStep, func(e lock.Event) bool { return e.Step == "extend" && e.ID == "x" }); len(st) != 2 || lock.StepFailed(st[1].Err) {
		t.Fatalf("extend steps: %+v, want 2, the second the store's answer (not a failure)", st)
	}

	// Do presumes a lease lost when no extend succeeds before ValidUntil;
	// the store (on a manual clock) expires it meanwhile, so the release
	// finds it gone: fn may have run unprotected.
	fb.set(nil, errDown)
	_, err = lock.Do(ctx, l, "d", 150*time.Millisecond, func(ctx context.Context, _ *lock.Lease) (int, error) {
		<-ctx.Done()
		store.ExpireNow("d")
		return 0, nil
	}, nil)
	if !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatal(err)
	}
	fb.set(nil, nil)
	lost := rec.find(lock.EventLeaseLost, forID("d"))
	if len(lost) != 1 || !(errors.Is(lost[0].Err, lock.ErrLeaseLost) || errors.Is(lost[0].Err, lock.ErrNotHeld)) {
		t.Fatalf("lost events of d: %+v, want exactly one, ErrLeaseLost or ErrNotHeld", lost)
	}
	if fails := rec.find(lock.EventExtend, func(e lock.Event) bool { return e.ID == "d" && errors.Is(e.Err, errDown) }); len(fails) == 0 {
		t.Fatal("no failed extend of d reported")
	}
	_ = l.Close()
}

// batchless hides the memory backend's Batcher and Inspector.
type batchless struct{ backend.Backend }

func TestObserverBatchesAndInspect(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		b       backend.Backend
		step    string
		inspect bool
	}{
		{"batcher", testkit.Must(memstore.New(nil)), "acquire_batch", true},
		{"fallback", batchless{testkit.Must(memstore.New(nil))}, "acquire", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, rec := newObserved(t, tc.b, lock.Options{BatchTick: time.Millisecond})
			ids := []string{"m1", "m2", "m3"}
			n := 0
			for snap, err := range l.AcquireMany(ctx, ids, time.Minute, nil) {
				if err != nil {
					t.Fatal(err)
				}
				for _, le := range snap.Acquired {
					n++
					_ = le.Release(ctx)
				}
			}
			if n != 3 {
				t.Fatalf("AcquireMany granted %d, want 3", n)
			}
			if st := rec.find(lock.EventStep, func(e lock.Event) bool { return e.Step == tc.step }); len(st) == 0 {
				t.Fatalf("no %q step reported", tc.step)
			}
			in, err := l.Inspect(ctx, "m1")
			switch {
			case tc.inspect && (err != nil || in.Held):
				t.Fatalf("Inspect through the observer: %+v, %v", in, err)
			case !tc.inspect && !errors.Is(err, lock.ErrUnsupported):
				t.Fatalf("Inspect without an Inspector: %v, want ErrUnsupported", err)
			}
			if got := len(rec.find(lock.EventStep, func(e lock.Event) bool { return e.Step == "inspect" })); got != map[bool]int{true: 1, false: 0}[tc.inspect] {
				t.Fatalf("%d inspect steps reported", got)
			}
			_ = l.Close()
		})
	}
}

func TestObserverAndNames(t *testing.T) {
	var got []string
	var f lock.Observer = observerFunc(func(e lock.Event) { got = append(got, fmt.Sprint(e.Kind, "/", e.Outcome)) })
	f.Observe(lock.Event{Kind: lock.EventAcquire, Outcome: lock.OutcomeGrantedAfterWait})
	f.Observe(lock.Event{Kind: lock.EventLeaseLost})
	want := []string{"acquire/granted_after_wait", "lease_lost/unknown"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if lock.StepFailed(nil) || lock.StepFailed(fmt.Errorf("x: %w", lock.ErrQueueFull)) || !lock.StepFailed(errDown) {
		t.Fatal("StepFailed misclassifies")
	}
}

// observerFunc adapts a function to a lock.Observer.
type observerFunc func(lock.Event)

func (f observerFunc) Observe(e lock.Event) { f(e) }
