package lock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/testenv/testkit"
	"github.com/redislocker/lock/memorybackend"
)

var errOutage = errors.New("connection reset by peer")

// spyBackend wraps a backend: it records each waiting Acquire step (its
// send time and its context's deadline, per id), and fails the first
// failWaits of them (all of them when failWaits < 0) with a client error
// of unknown outcome, before they reach the store. It hands off when the
// wrapped backend does; it batches nothing, so each id's step is its own.
type spyBackend struct {
	backend.Backend
	mu        sync.Mutex
	failWaits int
	waits     map[string][]time.Time
	deadlines []time.Time // of the failed steps; zero: none
}

func (s *spyBackend) HandsOff() bool { return fallback.HandsOff(s.Backend) }

func (s *spyBackend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	if req.Wait {
		s.mu.Lock()
		if s.waits == nil {
			s.waits = map[string][]time.Time{}
		}
		s.waits[req.ID] = append(s.waits[req.ID], time.Now())
		fail := s.failWaits != 0
		if s.failWaits > 0 {
			s.failWaits--
		}
		if fail {
			d, _ := ctx.Deadline()
			s.deadlines = append(s.deadlines, d)
		}
		s.mu.Unlock()
		if fail {
			return backend.Grant{}, backend.WithKind(backend.KindUnknown, errOutage)
		}
	}
	return s.Backend.Acquire(ctx, req)
}

// waitSteps returns the send times of id's waiting steps.
func (s *spyBackend) waitSteps(id string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.waits[id]...)
}

// manyResult is what an AcquireMany sequence yielded.
type manyResult struct {
	snaps []Snapshot
	err   error
}

// goAcquireMany runs AcquireMany on its own goroutine: each snapshot is
// sent on snaps as it is yielded, and the whole result on done at the end.
func goAcquireMany(l *Locker, ids []string, opts *AcquireOptions) (snaps chan Snapshot, done chan manyResult) {
	snaps, done = make(chan Snapshot, len(ids)+1), make(chan manyResult, 1)
	go func() {
		var r manyResult
		for s, err := range l.AcquireMany(context.Background(), ids, time.Minute, opts) {
			if err != nil {
				r.err = err
				continue
			}
			r.snaps = append(r.snaps, s)
			snaps <- s
		}
		done <- r
	}()
	return snaps, done
}

// holdLock takes id on a Locker of its own over store, and returns the
// lease.
func holdLock(t *testing.T, store *memorybackend.Store, id string) *Lease {
	t.Helper()
	holder := quietLocker(store.NewBackend(), nil)
	t.Cleanup(func() { _ = holder.Close() })
	res, err := holder.Acquire(context.Background(), id, time.Minute, nil)
	if err != nil || !res.Acquired {
		t.Fatalf("holder's Acquire of %s: %+v, %v", id, res, err)
	}
	return res.Lease
}

// queueLen returns the number of live waiters of id in store.
func queueLen(t *testing.T, store *memorybackend.Store, id string) int {
	t.Helper()
	in, err := store.NewBackend().(backend.Inspector).Inspect(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	return in.QueueLen
}

// AcquireMany retries a failed waiting step like Acquire does: an outage
// shorter than WaiterTimeout costs the call nothing (the id queues once
// the store answers, and is granted when released); one that lasts
// WaiterTimeout ends it with the step's error, no retry being sent, or
// allowed to run, past WaiterTimeout after the first failure.
func TestAcquireManyRetriesFailedStep(t *testing.T) {
	const waiterTimeout = 3 * time.Second
	t.Run("short outage", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := testkit.Must(memorybackend.NewStore(nil))
			held := holdLock(t, store, "b")
			spy := &spyBackend{Backend: store.NewBackend(), failWaits: 3}
			l := quietLocker(spy, &Options{WaiterTimeout: waiterTimeout})
			defer l.Close()
			_, done := goAcquireMany(l, []string{"a", "b"}, nil)
			time.Sleep(waiterTimeout / 2)
			steps := spy.waitSteps("b")
			if len(steps) != 4 {
				t.Fatalf("b's waiting steps: %d; want 3 failed and 1 that queued it", len(steps))
			}
			if n := queueLen(t, store, "b"); n != 1 {
				t.Fatalf("b's queue after the outage: %d waiters; want the AcquireMany queued", n)
			}
			if err := held.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatalf("AcquireMany across a short outage: %v; want no error", r.err)
			}
			got := map[string]bool{}
			for _, s := range r.snaps {
				for _, le := range s.Acquired {
					got[le.ID()] = true
					_ = le.Release(context.Background())
				}
			}
			if !got["a"] || !got["b"] {
				t.Fatalf("granted %v; want a and b", got)
			}
		})
	})
	t.Run("long outage", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := testkit.Must(memorybackend.NewStore(nil))
			holdLock(t, store, "b")
			spy := &spyBackend{Backend: store.NewBackend(), failWaits: -1}
			l := quietLocker(spy, &Options{WaiterTimeout: waiterTimeout})
			defer l.Close()
			_, done := goAcquireMany(l, []string{"a", "b"}, nil)
			r := <-done
			steps := spy.waitSteps("b")
			if !errors.Is(r.err, errOutage) || !errors.Is(r.err, ErrBackend) {
				t.Fatalf("AcquireMany across a long outage: %v; want the step's error", r.err)
			}
			if len(steps) < 3 {
				t.Fatalf("b's waiting steps: %d; want the failed step retried", len(steps))
			}
			end := steps[0].Add(waiterTimeout)
			if last := steps[len(steps)-1]; last.After(end) {
				t.Errorf("a retry sent %v after the first failure; want none past WaiterTimeout (%v)", last.Sub(steps[0]), waiterTimeout)
			}
			spy.mu.Lock()
			for i, d := range spy.deadlines[1:] {
				if d.IsZero() || d.After(end) {
					t.Errorf("retry %d ran with deadline %v after the first failure; want at most WaiterTimeout", i+1, d.Sub(steps[0]))
				}
			}
			spy.mu.Unlock()
			if len(r.snaps) != 1 || len(r.snaps[0].Acquired) != 1 || r.snaps[0].Acquired[0].ID() != "a" {
				t.Fatalf("snapshots %+v; want the one with a's lease, yielded before the outage ended the call", r.snaps)
			}
			_ = r.snaps[0].Acquired[0].Release(context.Background())
			if n := queueLen(t, store, "b"); n != 0 {
				t.Fatalf("b's queue after the call ended: %d waiters; want it left", n)
			}
		})
	})
}

// AcquireMany takes a grant by hand-off as it comes: no waiting step
// after the release, and no tick waited for.
func TestAcquireManyTakesHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := testkit.Must(memorybackend.NewStore(nil))
		held := holdLock(t, store, "b")
		spy := &spyBackend{Backend: store.NewBackend()}
		if !spy.HandsOff() {
			t.Fatal("the memory backend does not hand off; the test needs it")
		}
		l := quietLocker(spy, nil)
		defer l.Close()
		snaps, done := goAcquireMany(l, []string{"b"}, nil)
		synctest.Wait()
		queued := len(spy.waitSteps("b"))
		if queued != 1 {
			t.Fatalf("b's waiting steps before the release: %d; want 1 (it queued)", queued)
		}
		// Time passes before the release, as it does outside a bubble: a
		// grant no later than the waiter's last step is taken for stale.
		time.Sleep(time.Second)
		released := time.Now()
		if err := held.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		s := <-snaps
		if len(s.Acquired) != 1 || s.Acquired[0].ID() != "b" || s.Acquired[0].Fence() <= held.Fence() {
			t.Fatalf("snapshot after the release: %+v; want b's new lease", s)
		}
		if d := time.Since(released); d >= l.tick {
			t.Errorf("the grant was yielded %v after the release; want it at once, not at a tick (%v)", d, l.tick)
		}
		if !s.Acquired[0].ValidUntil().After(time.Now()) {
			t.Errorf("the handed-off lease is valid until %v; want a validity", s.Acquired[0].ValidUntil())
		}
		if n := len(spy.waitSteps("b")); n != queued {
			t.Errorf("b's waiting steps after the release: %d; want %d (no step for a grant by hand-off)", n, queued)
		}
		if r := <-done; r.err != nil {
			t.Fatal(r.err)
		}
		if err := s.Acquired[0].Release(context.Background()); err != nil {
			t.Fatalf("releasing the handed-off lease: %v; want it held", err)
		}
	})
}
