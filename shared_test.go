package lock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/testkit"
	"github.com/redislocker/lock/memorybackend"
)

// counting is a backend that counts its Acquire and AcquireBatch steps.
// Embedding the interface hides the inner backend's optional
// capabilities, Sharer among them.
type counting struct {
	backend.Backend
	steps atomic.Int64
}

func (c *counting) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	c.steps.Add(1)
	return c.Backend.Acquire(ctx, req)
}

// Acquire, AcquireMany and Do refuse a bad Capacity or Permits with an
// *ArgumentError naming the field, before any I/O.
func TestSharedOptionsValidated(t *testing.T) {
	mb, _ := memorybackend.New(nil)
	cb := &counting{Backend: mb}
	l := newLocker(t, cb, nil)
	ctx := context.Background()
	for _, c := range []struct {
		o     lock.AcquireOptions
		field string
	}{
		{lock.AcquireOptions{Capacity: -1}, "opts.Capacity"},
		{lock.AcquireOptions{Capacity: 3, Permits: -1}, "opts.Permits"},
		{lock.AcquireOptions{Capacity: 3, Permits: 4}, "opts.Permits"},
		{lock.AcquireOptions{Permits: 2}, "opts.Permits"},
		{lock.AcquireOptions{Capacity: 1, Permits: 2}, "opts.Permits"},
	} {
		var ae *backend.ArgumentError
		_, err := l.Acquire(ctx, "x", time.Second, &c.o)
		if !errors.As(err, &ae) || ae.Arg != c.field {
			t.Errorf("Acquire(%+v) = %v; want an *ArgumentError naming %s", c.o, err, c.field)
		}
		_, err = lock.Do(ctx, l, "x", time.Second, func(context.Context, *lock.Lease) (int, error) { return 0, nil }, &c.o)
		if !errors.As(err, &ae) || ae.Arg != c.field {
			t.Errorf("Do(%+v) = %v; want an *ArgumentError naming %s", c.o, err, c.field)
		}
		for _, err := range l.AcquireMany(ctx, []string{"x", "y"}, time.Second, &c.o) {
			if !errors.As(err, &ae) || ae.Arg != c.field {
				t.Errorf("AcquireMany(%+v) = %v; want an *ArgumentError naming %s", c.o, err, c.field)
			}
		}
	}
	if n := cb.steps.Load(); n != 0 {
		t.Errorf("the backend saw %d Acquire steps; want none: bad input is refused before any I/O", n)
	}
}

// A shared request on a backend that is not a backend.Sharer fails with
// ErrUnsupported before any I/O; a Capacity of 1 is a mutex and needs no
// Sharer.
func TestSharedUnsupported(t *testing.T) {
	mb, _ := memorybackend.New(nil)
	cb := &counting{Backend: mb}
	l := newLocker(t, cb, nil)
	ctx := context.Background()
	_, err := l.Acquire(ctx, "x", time.Second, &lock.AcquireOptions{Capacity: 2})
	if !errors.Is(err, lock.ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Acquire with Capacity 2 on a backend that does not share = %v; want ErrUnsupported", err)
	}
	if n := cb.steps.Load(); n != 0 {
		t.Fatalf("the backend saw %d Acquire steps; want none", n)
	}
	res, err := l.Acquire(ctx, "x", time.Second, &lock.AcquireOptions{Capacity: 1, Permits: 1})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire with Capacity 1 (a mutex) = %+v, %v; want granted", res, err)
	}
	_ = res.Lease.Release(ctx)
}

// sharedLocker returns a Locker on a fresh memory backend, which shares.
func sharedLocker(t *testing.T) *lock.Locker {
	t.Helper()
	mb, err := memorybackend.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := any(mb).(backend.Sharer); !ok || !s.Shares() {
		t.Fatal("memorybackend is not a backend.Sharer")
	}
	return newLocker(t, mb, nil)
}

// mustAcquire acquires id with o, and fails the test unless granted.
func mustAcquire(t *testing.T, l *lock.Locker, id string, o *lock.AcquireOptions) *lock.Lease {
	t.Helper()
	res, err := l.Acquire(context.Background(), id, time.Minute, o)
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire(%q, %+v) = %+v, %v; want granted", id, o, res, err)
	}
	return res.Lease
}

// waitGranted starts an Acquire of id with o and returns a channel that
// gets its lease once granted (nil when it failed).
func waitGranted(t *testing.T, ctx context.Context, l *lock.Locker, id string, o *lock.AcquireOptions) <-chan *lock.Lease {
	ch := make(chan *lock.Lease, 1)
	go func() {
		res, err := l.Acquire(ctx, id, time.Minute, o)
		if err != nil || !res.Acquired {
			if ctx.Err() == nil {
				t.Errorf("Acquire(%q, %+v) = %+v, %v; want granted", id, o, res, err)
			}
			ch <- nil
			return
		}
		ch <- res.Lease
	}()
	return ch
}

// queued waits until id has n waiters, by Inspect.
func queued(t *testing.T, l *lock.Locker, id string, n int) {
	t.Helper()
	testkit.Until(t, 10*time.Second, func() string {
		in, err := l.Inspect(context.Background(), id)
		if err != nil || in.QueueLen != n {
			return fmt.Sprintf("id %q has %d waiters (%v); want %d", id, in.QueueLen, err, n)
		}
		return ""
	})
}

// A semaphore of capacity 2: two leases at once, each with its own
// fence; a third caller waits, and is granted when one is released.
// TryAcquire does not jump a waiter.
func TestSemaphore(t *testing.T) {
	l := sharedLocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sem := &lock.AcquireOptions{Capacity: 2}
	a := mustAcquire(t, l, "s", sem)
	b := mustAcquire(t, l, "s", sem)
	if a.Fence() == b.Fence() {
		t.Fatalf("two leases of one semaphore share the fence %d", a.Fence())
	}
	third := waitGranted(t, ctx, l, "s", sem)
	queued(t, l, "s", 1)
	in, err := l.Inspect(ctx, "s")
	if err != nil || in.Capacity != 2 || len(in.Holders) != 2 {
		t.Fatalf("Inspect = %+v, %v; want capacity 2 and both holders", in, err)
	}
	if res, err := l.TryAcquire(ctx, "s", time.Minute); !errors.Is(err, lock.ErrCapacity) {
		t.Fatalf("TryAcquire of a mutex on a semaphore's id = %+v, %v; want ErrCapacity", res, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c := <-third
	if c == nil {
		t.Fatal("the third caller was not granted")
	}
	if c.Fence() <= max(a.Fence(), b.Fence()) {
		t.Fatalf("the third lease's fence %d is not above the earlier ones (%d, %d)", c.Fence(), a.Fence(), b.Fence())
	}
	_ = b.Release(ctx)
	_ = c.Release(ctx)
}

// A reader-writer lock: readers share; a writer waits for them; a reader
// that comes after a queued writer waits behind it (no writer
// starvation); once the writer releases, the readers behind it are
// granted together.
func TestReadersWriter(t *testing.T) {
	l := sharedLocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 8
	read := &lock.AcquireOptions{Capacity: n}
	write := &lock.AcquireOptions{Capacity: n, Permits: n}
	r1 := mustAcquire(t, l, "rw", read)
	r2 := mustAcquire(t, l, "rw", read)
	w := waitGranted(t, ctx, l, "rw", write)
	queued(t, l, "rw", 1)
	if res, err := l.Acquire(ctx, "rw", time.Minute, &lock.AcquireOptions{Capacity: n, NoWait: true}); err != nil || res.Acquired {
		t.Fatalf("a reader's TryAcquire behind a queued writer = %+v, %v; want refused", res, err)
	}
	r3 := waitGranted(t, ctx, l, "rw", read)
	r4 := waitGranted(t, ctx, l, "rw", read)
	queued(t, l, "rw", 3)
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	wl := <-w
	if wl == nil {
		t.Fatal("the writer was not granted")
	}
	in, err := l.Inspect(ctx, "rw")
	if err != nil || len(in.Holders) != 1 || in.Holders[0].Permits != n || in.QueueLen != 2 {
		t.Fatalf("Inspect with the writer holding = %+v, %v; want one holder of %d permits and 2 readers queued", in, err, n)
	}
	_ = wl.Release(ctx)
	var fences []uint64
	for _, ch := range []<-chan *lock.Lease{r3, r4} {
		le := <-ch
		if le == nil {
			t.Fatal("a reader behind the writer was not granted")
		}
		fences = append(fences, le.Fence())
		defer le.Release(ctx)
	}
	if slices.Min(fences) <= wl.Fence() || fences[0] == fences[1] {
		t.Fatalf("the readers' fences %v after the writer's %d: want distinct and above it", fences, wl.Fence())
	}
}
