package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/internal/testenv/testkit"
	"github.com/redislocker/lock/memorybackend"
)

// BenchmarkLockerAcquireRelease measures the core's own cost: an
// uncontended Acquire + Release through a Locker on the memory backend.
// Compare with memorybackend's BenchmarkAcquireRelease (the backend alone).
func BenchmarkLockerAcquireRelease(b *testing.B) {
	benchAcquireRelease(b, nil)
}

// BenchmarkLockerAcquireReleaseObserved is BenchmarkLockerAcquireRelease
// with an Observer that does nothing: the cost of the events and of the
// step wrapper.
func BenchmarkLockerAcquireReleaseObserved(b *testing.B) {
	benchAcquireRelease(b, &lock.Options{Observer: observerFunc(func(lock.Event) {})})
}

// BenchmarkLockerAcquireReleaseCancellable is BenchmarkLockerAcquireRelease
// with a ctx that can end (a deadline far away, as a request's ctx has):
// each step then runs on a goroutine of its own, so that the call can
// return when the ctx ends whatever the backend's client does.
func BenchmarkLockerAcquireReleaseCancellable(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	benchAcquireReleaseCtx(b, ctx, nil)
}

// benchAcquireRelease runs uncontended Acquire + Release cycles through a
// Locker with options o on the memory backend.
func benchAcquireRelease(b *testing.B, o *lock.Options) {
	benchAcquireReleaseCtx(b, context.Background(), o)
}

// benchAcquireReleaseCtx is benchAcquireRelease under ctx.
func benchAcquireReleaseCtx(b *testing.B, ctx context.Context, o *lock.Options) {
	l := mustLocker(testkit.Must(memorybackend.New(nil)), o)
	defer l.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		res, err := l.Acquire(ctx, "bench", time.Minute, nil)
		if err != nil || !res.Acquired {
			b.Fatal(res, err)
		}
		if err := res.Lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}
