package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/memorybackend"
)

// BenchmarkLockerAcquireRelease measures the core's own cost: an
// uncontended Acquire + Release through a Locker on the memory backend.
// Compare with memorybackend's BenchmarkAcquireRelease (the backend alone).
func BenchmarkLockerAcquireRelease(b *testing.B) {
	ctx := context.Background()
	mb, _ := memorybackend.New(nil)
	l, err := lock.New(mb, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		res, err := l.Acquire(ctx, "bench", time.Minute)
		if err != nil || !res.Acquired {
			b.Fatal(res, err)
		}
		if err := res.Lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}
