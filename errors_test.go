package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
)

// The sentinels' messages are part of the API: users log and compare them.
// ErrNotAcquired and ErrLeaseLost are the core's own; the others are
// package backend's, under the same name.
func TestSentinelMessages(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		msg  string
	}{
		{"ErrNotHeld", lock.ErrNotHeld, "lock: not held"},
		{"ErrNotAcquired", lock.ErrNotAcquired, "lock: not acquired"},
		{"ErrLeaseLost", lock.ErrLeaseLost, "lock: lease lost"},
		{"ErrClosed", lock.ErrClosed, "lock: closed"},
		{"ErrQueueFull", lock.ErrQueueFull, "lock: queue full"},
		{"ErrNotReplicated", backend.ErrNotReplicated, "lock: not acknowledged by enough replicas"},
		{"ErrInvalidArgument", lock.ErrInvalidArgument, "lock: invalid argument"},
		{"ErrBackend", lock.ErrBackend, "lock: backend error"},
	} {
		if got := c.err.Error(); got != c.msg {
			t.Errorf("lock.%s.Error() = %q, want %q", c.name, got, c.msg)
		}
	}
	for _, c := range []struct {
		name      string
		ours, bes error
	}{
		{"ErrNotHeld", lock.ErrNotHeld, backend.ErrNotHeld},
		{"ErrClosed", lock.ErrClosed, backend.ErrClosed},
		{"ErrQueueFull", lock.ErrQueueFull, backend.ErrQueueFull},
		{"ErrNotReplicated", backend.ErrNotReplicated, backend.ErrNotReplicated},
		{"ErrInvalidArgument", lock.ErrInvalidArgument, backend.ErrInvalidArgument},
		{"ErrBackend", lock.ErrBackend, backend.ErrBackend},
	} {
		if c.ours != c.bes {
			t.Errorf("lock.%s is not backend.%s", c.name, c.name)
		}
	}
}

// failingLeave wraps a backend whose Leave fails, so that a cancelled wait
// returns two errors: its own and the cleanup's.
type failingLeave struct{ backend.Backend }

var errLeave = errors.New("connection reset")

func (f failingLeave) Leave(context.Context, string, string) error { return errLeave }

// checkText fails unless err's text is one line, with no message printed
// twice and one "lock: " prefix per joined part.
func checkText(t *testing.T, what string, err error, want ...error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: nil error", what)
		return
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Errorf("%s: %q does not match %v", what, err, w)
		}
	}
	s := err.Error()
	if strings.Contains(s, "\n") {
		t.Errorf("%s: error text has a newline: %q", what, s)
	}
	parts := strings.Split(s, "; ")
	for i, p := range parts {
		if n := strings.Count(p, "lock: "); n > 1 {
			t.Errorf("%s: part %q repeats the prefix %d times", what, p, n)
		}
		for j, q := range parts {
			if i != j && strings.Contains(p, q) {
				t.Errorf("%s: %q repeats %q", what, s, q)
			}
		}
	}
}

// Error texts are one line, never repeat a message or the "lock: "
// prefix, and still match every error they carry.
func TestErrorTexts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		ctx := context.Background()
		holder := newLocker(t, store.NewBackend(), nil)
		held, err := holder.Acquire(ctx, "x", time.Hour, nil)
		if err != nil || !held.Acquired {
			t.Fatal(held, err)
		}

		// A queued Acquire cancelled, whose cleanup fails too.
		l := newLocker(t, failingLeave{store.NewBackend()}, nil)
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = l.Acquire(cctx, "x", time.Minute, nil)
		cancel()
		checkText(t, "cancelled Acquire with a failed cleanup", err, context.DeadlineExceeded, errLeave, lock.ErrBackend)

		// A queued AcquireMany cancelled.
		cctx, cancel = context.WithTimeout(ctx, time.Second)
		for _, err = range holder.AcquireMany(cctx, []string{"x"}, time.Minute, nil) {
		}
		cancel()
		checkText(t, "cancelled AcquireMany", err, context.DeadlineExceeded)
		if strings.Contains(err.Error(), `""`) {
			t.Errorf("cancelled AcquireMany: %q prints an empty id", err)
		}

		// Do that does not acquire, and Do whose fn fails after the lease
		// was lost.
		_, err = lock.Do(ctx, holder, "x", time.Minute, func(context.Context, *lock.Lease) (int, error) { return 0, nil },
			&lock.AcquireOptions{NoWait: true})
		checkText(t, "Do not acquired", err, lock.ErrNotAcquired)
		fnErr := errors.New("job failed")
		_, err = lock.Do(ctx, holder, "y", time.Minute, func(ctx context.Context, le *lock.Lease) (int, error) {
			store.ExpireNow("y")
			_ = le.Extend(ctx, time.Minute) // finds it not held
			return 0, fnErr
		}, nil)
		checkText(t, "Do with a lost lease and a failed fn", err, fnErr, lock.ErrLeaseLost)

		// Release after the lease was lost, twice.
		store.ExpireNow("x")
		_ = held.Lease.Release(ctx)
		checkText(t, "Release after loss, again", held.Lease.Release(ctx), lock.ErrNotHeld)

		// A waiter when its Locker closes, whose cleanup fails.
		lc, err := lock.New(failingLeave{store.NewBackend()}, &lock.Options{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		blocker, _ := holder.Acquire(ctx, "z", time.Hour, nil)
		done := make(chan error, 1)
		go func() {
			_, err := lc.Acquire(ctx, "z", time.Minute, nil)
			done <- err
		}()
		synctest.Wait()
		_ = lc.Close()
		checkText(t, "waiter at Close with a failed cleanup", <-done, lock.ErrClosed, errLeave)
		_ = blocker.Lease.Release(ctx)

		// Bad options.
		_, err = lock.New(store.NewBackend(), &lock.Options{WaiterTimeout: -time.Second})
		checkText(t, "New with a negative WaiterTimeout", err, lock.ErrInvalidArgument)
	})
}
