package memstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/memstore"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// BenchmarkAcquireRelease measures one uncontended Acquire+Release cycle on
// the real clock.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	var be backend.Backend = testkit.Must(memstore.New(nil))
	r := backend.AcquireRequest{ID: "bench", Token: "token", TTL: time.Minute}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := be.Acquire(ctx, r); err != nil {
			b.Fatal(err)
		}
		if err := be.Release(ctx, r.ID, r.Token); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}

// BenchmarkAcquireReleaseParallel runs uncontended cycles from GOMAXPROCS
// goroutines on one Store, each on its own id.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	ctx := context.Background()
	var be backend.Backend = testkit.Must(memstore.New(nil))
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := next.Add(1)
		r := backend.AcquireRequest{ID: "bench-" + strconv.FormatInt(n, 10), Token: "token", TTL: time.Minute}
		for pb.Next() {
			if _, err := be.Acquire(ctx, r); err != nil {
				b.Error(err)
				return
			}
			if err := be.Release(ctx, r.ID, r.Token); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}
