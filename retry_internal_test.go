package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// ctxFake is a stepFake whose Acquire sees the step's context.
type ctxFake struct {
	stepFake
	acquireCtx func(context.Context, backend.AcquireRequest) (backend.Grant, error)
}

func (f *ctxFake) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	f.rec("acquire")
	return f.acquireCtx(ctx, req)
}

func countOf(calls []string, name string) int {
	n := 0
	for _, c := range calls {
		if c == name {
			n++
		}
	}
	return n
}

// A step that never reached the store (backend.Unsent) is not followed by
// a cleanup: one step, no Leave.
func TestUnsentStepSkipsCleanup(t *testing.T) {
	refused := errors.New("dial tcp: connection refused")
	f := &stepFake{acquire: func(backend.AcquireRequest) (backend.Grant, error) {
		return backend.Grant{}, backend.WithKind(backend.KindUnsent, refused)
	}}
	l := quietLocker(f, nil)
	defer l.Close()
	_, err := l.Acquire(context.Background(), "x", time.Second, nil)
	if !errors.Is(err, ErrBackend) || !errors.Is(err, refused) || !fallback.Unsent(err) {
		t.Fatalf("err = %v; want it to match ErrBackend and the client error, and to stay unsent", err)
	}
	if got := f.callsCopy(); len(got) != 1 || got[0] != "acquire" {
		t.Fatalf("calls = %v; want [acquire]: a step that never reached the store needs no cleanup round trip", got)
	}
}

// An AcquireMany whose first round never reached the store sends no
// cleanup either.
func TestUnsentAcquireManySkipsCleanup(t *testing.T) {
	f := &stepFake{acquire: func(backend.AcquireRequest) (backend.Grant, error) {
		return backend.Grant{}, backend.WithKind(backend.KindUnsent, errors.New("no connection"))
	}}
	l := quietLocker(f, nil)
	defer l.Close()
	var err error
	for _, e := range l.AcquireMany(context.Background(), []string{"a", "b"}, time.Second, nil) {
		if e != nil {
			err = e
		}
	}
	if !fallback.Unsent(err) {
		t.Fatalf("err = %v; want the unsent step's error", err)
	}
	if got := f.callsCopy(); countOf(got, "leave") != 0 {
		t.Fatalf("calls = %v; want no leave after a first round that never reached the store", got)
	}
}

// failingAcquire runs an Acquire of "x" on a Locker over f and waits for
// it to fail with stepErr, within a generous multiple of waiterTimeout.
func failingAcquire(t *testing.T, f backend.Backend, waiterTimeout time.Duration, stepErr error) {
	t.Helper()
	l := quietLocker(f, &Options{WaiterTimeout: waiterTimeout})
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		_, err := l.Acquire(context.Background(), "x", time.Second, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, stepErr) {
			t.Fatalf("err = %v; want the failing step's error", err)
		}
	case <-time.After(30 * waiterTimeout): // slack for a loaded machine
		t.Fatalf("a queued caller whose steps keep failing did not give up within %v", 30*waiterTimeout)
	}
}

// A queued caller retries its failed steps for WaiterTimeout from the first
// failure and no longer: every retry runs under a context whose deadline
// is at most WaiterTimeout after the first failed step began, and the call
// then returns the step's error.
func TestQueuedRetriesEndWithinWaiterTimeout(t *testing.T) {
	for _, kind := range []backend.Kind{backend.KindUnsent, backend.KindUnknown} {
		t.Run(kind.String(), func(t *testing.T) {
			const waiterTimeout = 300 * time.Millisecond
			stepErr := errors.New("the store is gone")
			var mu sync.Mutex
			var firstFail time.Time
			var late []string
			f := &ctxFake{}
			f.acquireCtx = func(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
				if !req.Wait {
					return backend.Grant{HolderTTL: time.Hour}, nil // held: the caller queues
				}
				mu.Lock()
				defer mu.Unlock()
				if firstFail.IsZero() {
					firstFail = time.Now()
					return backend.Grant{}, backend.WithKind(kind, stepErr)
				}
				if d, ok := ctx.Deadline(); !ok || d.After(firstFail.Add(waiterTimeout)) {
					late = append(late, time.Until(d).String())
				}
				return backend.Grant{}, backend.WithKind(kind, stepErr)
			}
			failingAcquire(t, f, waiterTimeout, stepErr)
			mu.Lock()
			defer mu.Unlock()
			if len(late) > 0 {
				t.Fatalf("%d retries ran without a deadline at most WaiterTimeout (%v) after the first failure: %v",
					len(late), waiterTimeout, late)
			}
			calls := f.callsCopy()
			if n := countOf(calls, "acquire"); n < 3 {
				t.Fatalf("calls = %v; want the failed step retried", calls)
			}
			wantLeave := 1
			if kind == backend.KindUnsent {
				wantLeave = 0
			}
			if n := countOf(calls, "leave"); n != wantLeave {
				t.Fatalf("calls = %v; want %d leave after a last step of kind %v", calls, wantLeave, kind)
			}
		})
	}
}

// The retries last while the queue entry can still be alive: WaiterTimeout
// from the last step that found the caller queued, not from the first
// failure after it.
func TestQueuedRetriesCountFromLastRefresh(t *testing.T) {
	const waiterTimeout = 400 * time.Millisecond
	stepErr := errors.New("the store is gone")
	var mu sync.Mutex
	var queuedAt time.Time // when the last successful waiting step began, as the fake saw it
	var failures int
	var late []string
	f := &ctxFake{}
	f.acquireCtx = func(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
		if !req.Wait {
			return backend.Grant{HolderTTL: time.Hour}, nil
		}
		mu.Lock()
		defer mu.Unlock()
		if queuedAt.IsZero() {
			queuedAt = time.Now()
			// Queued at the head; the holder's lease ends soon: the caller
			// steps again then, and that step fails.
			return backend.Grant{Queued: true, Ticket: 1, Head: true, HolderTTL: waiterTimeout / 4}, nil
		}
		failures++
		if d, ok := ctx.Deadline(); failures > 1 && (!ok || d.After(queuedAt.Add(waiterTimeout))) {
			late = append(late, fmt.Sprint(ok, " ", d.Sub(queuedAt)))
		}
		return backend.Grant{}, backend.WithKind(backend.KindUnknown, stepErr)
	}
	failingAcquire(t, f, waiterTimeout, stepErr)
	mu.Lock()
	defer mu.Unlock()
	if failures < 2 {
		t.Fatalf("%d failed steps; want the failed step retried", failures)
	}
	if len(late) > 0 {
		t.Fatalf("%d retries ran past WaiterTimeout (%v) after the last step that found the caller queued (deadline set, deadline after it): %v",
			len(late), waiterTimeout, late)
	}
}
