package lock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/backendkit/memstore"
)

// stalling is a backend whose client ignores deadlines, over a store that
// can freeze: while frozen, every step waits (whatever its ctx says) until
// the store thaws, and then runs, as the commands a stopped Redis finds in
// its socket buffers run when it resumes. It hides the inner backend's
// optional capabilities but Inspector, so the Locker uses its fallbacks.
type stalling struct {
	backend.Backend
	mu   sync.Mutex
	thaw chan struct{} // nil while not frozen
}

func (s *stalling) freeze() {
	s.mu.Lock()
	s.thaw = make(chan struct{})
	s.mu.Unlock()
}

func (s *stalling) unfreeze() {
	s.mu.Lock()
	if s.thaw != nil {
		close(s.thaw)
		s.thaw = nil
	}
	s.mu.Unlock()
}

// stall waits while the store is frozen, and returns a ctx the client
// ignores, as go-redis without ContextTimeoutEnabled ignores deadlines.
func (s *stalling) stall(ctx context.Context) context.Context {
	s.mu.Lock()
	c := s.thaw
	s.mu.Unlock()
	if c != nil {
		<-c
	}
	return context.WithoutCancel(ctx)
}

func (s *stalling) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	return s.Backend.Acquire(s.stall(ctx), req)
}

func (s *stalling) Release(ctx context.Context, id, token string) error {
	return s.Backend.Release(s.stall(ctx), id, token)
}

func (s *stalling) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	return s.Backend.Extend(s.stall(ctx), id, token, ttl)
}

func (s *stalling) Leave(ctx context.Context, id, token string) error {
	return s.Backend.Leave(s.stall(ctx), id, token)
}

func (s *stalling) Heartbeat(ctx context.Context, ws []backend.Waiter, ttl time.Duration) ([]backend.HeartbeatResult, error) {
	return s.Backend.Heartbeat(s.stall(ctx), ws, ttl)
}

func (s *stalling) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (func(), error) {
	return s.Backend.Subscribe(s.stall(ctx), id, fn)
}

func (s *stalling) Inspect(ctx context.Context, id string, n int) (backend.Inspection, error) {
	return fallback.Inspect(s.stall(ctx), s.Backend, id, n)
}

// deadlineSlack is the task's bound: a call returns within 50 ms of its
// ctx's deadline. Under synctest the time is exact.
const deadlineSlack = 50 * time.Millisecond

// checkBounded fails unless err matches context.DeadlineExceeded and not
// ErrBackend, and the call returned within deadlineSlack of deadline.
func checkBounded(t *testing.T, what string, deadline time.Time, err error) {
	t.Helper()
	late := time.Since(deadline)
	if late > deadlineSlack {
		t.Errorf("%s returned %v after its ctx's deadline; want at most %v", what, late, deadlineSlack)
	}
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, lock.ErrBackend) {
		t.Errorf("%s = %v; want an error matching context.DeadlineExceeded and not ErrBackend", what, err)
	}
}

// checkClean fails unless the store keeps neither a holder nor a waiter
// of id.
func checkClean(t *testing.T, store *memstore.Store, what, id string) {
	t.Helper()
	if tok, ok := store.Holder(id); ok {
		t.Errorf("%s: %q is still held (by %s) once the stalled steps returned", what, id, backend.Fingerprint(tok))
	}
	if w := store.Waiters(id); len(w) > 0 {
		t.Errorf("%s: %q still has %d queue entries once the stalled steps returned", what, id, len(w))
	}
}

// Every Locker call returns within 50 ms of its ctx's deadline, with the
// ctx's error, while the store is frozen and the client ignores
// deadlines; once the store thaws, the steps left in the background run,
// and what they left is cleaned up by token (no holder, no queue entry).
func TestCallsReturnAtDeadlineWhileStalled(t *testing.T) {
	const wait = 500 * time.Millisecond
	cases := []struct {
		name string
		// frozen: the store freezes before call; otherwise call freezes
		// it once it has set up what it needs.
		frozen bool
		call   func(ctx context.Context, l, other *lock.Locker, st *state) error
	}{
		{"Acquire", true, func(ctx context.Context, l, _ *lock.Locker, _ *state) error {
			_, err := l.Acquire(ctx, "x", time.Minute, nil)
			return err
		}},
		{"TryAcquire", true, func(ctx context.Context, l, _ *lock.Locker, _ *state) error {
			_, err := l.TryAcquire(ctx, "x", time.Minute)
			return err
		}},
		{"Acquire queued, then the Leave stalls", false, func(ctx context.Context, l, other *lock.Locker, st *state) error {
			st.hold(other, "x")
			done := make(chan error, 1)
			go func() {
				_, err := l.Acquire(ctx, "x", time.Minute, nil)
				done <- err
			}()
			synctest.Wait() // queued, waiting for a wake-up
			st.s.freeze()
			return <-done
		}},
		{"Do", true, func(ctx context.Context, l, _ *lock.Locker, _ *state) error {
			_, err := lock.Do(ctx, l, "x", time.Minute, func(context.Context, *lock.Lease) (int, error) {
				return 0, errors.New("fn must not run")
			}, nil)
			return err
		}},
		{"Do, then the release stalls", false, func(ctx context.Context, l, _ *lock.Locker, st *state) error {
			_, err := lock.Do(ctx, l, "x", time.Minute, func(fctx context.Context, _ *lock.Lease) (int, error) {
				st.s.freeze()
				<-fctx.Done()
				return 0, fctx.Err()
			}, nil)
			return err
		}},
		{"AcquireMany", true, func(ctx context.Context, l, _ *lock.Locker, _ *state) error {
			var last error
			for _, err := range l.AcquireMany(ctx, []string{"x", "y"}, time.Minute, nil) {
				last = err
			}
			return last
		}},
		{"Release", false, func(ctx context.Context, l, _ *lock.Locker, st *state) error {
			le := st.hold(l, "x")
			st.s.freeze()
			return le.Release(ctx)
		}},
		{"Extend", false, func(ctx context.Context, l, _ *lock.Locker, st *state) error {
			le := st.hold(l, "x")
			st.s.freeze()
			return le.Extend(ctx, time.Minute)
		}},
		{"Inspect", true, func(ctx context.Context, l, _ *lock.Locker, _ *state) error {
			_, err := l.Inspect(ctx, "x")
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := newStore(t)
				st := &state{t: t, s: &stalling{Backend: store.NewBackend()}}
				l := newLocker(t, st.s, nil)
				other := newLocker(t, store.NewBackend(), nil)
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				defer cancel()
				deadline, _ := ctx.Deadline()
				if c.frozen {
					st.s.freeze()
				}
				err := c.call(ctx, l, other, st)
				checkBounded(t, c.name, deadline, err)
				st.s.unfreeze()
				synctest.Wait() // the stray steps and their cleanups run
				for _, le := range st.leases {
					if err := le.Release(context.Background()); err != nil {
						t.Errorf("Release of a lease the case took (after its stray steps ran): %v", err)
					}
				}
				for _, id := range []string{"x", "y"} {
					checkClean(t, store, c.name, id)
				}
			})
		})
	}
}

// state is what a case of TestCallsReturnAtDeadlineWhileStalled set up.
type state struct {
	t      *testing.T
	s      *stalling
	leases []*lock.Lease // released at the end (again, for one a case released)
}

// hold acquires id with l and fails the test unless it is granted.
func (st *state) hold(l *lock.Locker, id string) *lock.Lease {
	st.t.Helper()
	res, err := l.Acquire(context.Background(), id, time.Minute, nil)
	if err != nil || !res.Acquired {
		st.t.Fatal(res, err)
	}
	st.leases = append(st.leases, res.Lease)
	return res.Lease
}

// A Release whose ctx ended while it was stalled records its outcome when
// the step returns: the lease is released then, Lost closes, and a later
// Release returns nil without I/O.
func TestStrayReleaseRecordsItsOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		s := &stalling{Backend: store.NewBackend()}
		l := newLocker(t, s, nil)
		res, err := l.Acquire(context.Background(), "x", time.Minute, nil)
		if err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		s.freeze()
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(time.Second)
			cancel()
		}()
		start := time.Now()
		err = res.Lease.Release(ctx)
		if took := time.Since(start); !errors.Is(err, context.Canceled) || took > time.Second+deadlineSlack {
			t.Fatalf("Release cancelled after 1s while stalled = %v after %v; want context.Canceled within %v of the cancel", err, took, deadlineSlack)
		}
		select {
		case <-res.Lease.Lost():
			t.Fatal("Lost closed while the release had not reached the store")
		default:
		}
		s.unfreeze()
		synctest.Wait()
		select {
		case <-res.Lease.Lost():
		default:
			t.Fatal("Lost still open after the stray release returned")
		}
		if err := res.Lease.Release(context.Background()); err != nil {
			t.Fatalf("Release after the stray release succeeded = %v; want nil", err)
		}
		checkClean(t, store, "stray release", "x")
	})
}

// Close waits for the steps that callers stopped waiting for, 5 seconds
// at most, and then closes the backend all the same, with a warning; the
// step's goroutine ends when its client returns.
func TestCloseBoundedByStrayStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		s := &stalling{Backend: store.NewBackend()}
		var logs bytes.Buffer
		var mu sync.Mutex
		l, err := lock.New(s, &lock.Options{Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))})
		if err != nil {
			t.Fatal(err)
		}
		s.freeze()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := l.Acquire(ctx, "x", time.Minute, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire while frozen = %v; want context.DeadlineExceeded", err)
		}
		start := time.Now()
		_ = l.Close()
		if took := time.Since(start); took != 5*time.Second {
			t.Errorf("Close with a stray step stuck in the client took %v; want the 5 s bound", took)
		}
		mu.Lock()
		out := logs.String()
		mu.Unlock()
		if !strings.Contains(out, "steps still running") {
			t.Errorf("Close logged %q; want a warning about the step still running", out)
		}
		s.unfreeze()
		synctest.Wait() // the stray step returns; its cleanup finds the backend closed
	})
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (lw *lockedWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(p)
}

// clientTimeout is a client's own timeout, such as a dial timeout: like
// Go's net timeouts, it matches context.DeadlineExceeded.
type clientTimeout struct{}

func (clientTimeout) Error() string        { return "dial tcp 127.0.0.1:6379: i/o timeout" }
func (clientTimeout) Timeout() bool        { return true }
func (clientTimeout) Is(target error) bool { return target == context.DeadlineExceeded }

// timingOut is a backend whose steps fail with the client's own timeout.
type timingOut struct{ backend.Backend }

func (timingOut) Acquire(context.Context, backend.AcquireRequest) (backend.Grant, error) {
	return backend.Grant{}, backend.WithKind(backend.KindUnsent, clientTimeout{})
}

// A client's own timeout, while the caller's ctx lives, is a backend
// failure: it matches ErrBackend (and the client's error), and the
// observer counts an OutcomeError, not OutcomeCancelled. The caller's own
// deadline is a cancellation.
func TestClientTimeoutIsBackendError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		var mu sync.Mutex
		var outcomes []lock.Outcome
		obs := observerFunc(func(e lock.Event) {
			if e.Kind == lock.EventAcquire {
				mu.Lock()
				outcomes = append(outcomes, e.Outcome)
				mu.Unlock()
			}
		})
		l := newLocker(t, timingOut{store.NewBackend()}, &lock.Options{Observer: obs})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := l.Acquire(ctx, "x", time.Minute, nil)
		if !errors.Is(err, lock.ErrBackend) || !errors.As(err, new(clientTimeout)) {
			t.Errorf("Acquire with a client timeout = %v; want an error matching ErrBackend and the client's error", err)
		}
		if want := `lock: backend acquire "x": `; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Acquire with a client timeout says %q; want it to start with %q", err, want)
		}

		s := &stalling{Backend: store.NewBackend()}
		lc := newLocker(t, s, &lock.Options{Observer: obs})
		s.freeze()
		short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancelShort()
		_, err = lc.Acquire(short, "y", time.Minute, nil)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, lock.ErrBackend) {
			t.Errorf("Acquire past its own deadline = %v; want context.DeadlineExceeded, not ErrBackend", err)
		}
		s.unfreeze()
		synctest.Wait()

		mu.Lock()
		defer mu.Unlock()
		if len(outcomes) != 2 || outcomes[0] != lock.OutcomeError || outcomes[1] != lock.OutcomeCancelled {
			t.Errorf("observed outcomes %v; want [error cancelled]", outcomes)
		}
	})
}
