package faulttest

import (
	"context"
	"testing"
	"time"

	"github.com/redislocker/lock"
)

// TestFenceAfterStateLoss (S3): the first fence of an id after its state is
// lost is greater than every fence before it: after a restart without
// persistence (SHUTDOWN NOSAVE, a fresh server on the same port), after a
// FLUSHALL (a failover to a replica that has none of the id's keys), and
// after the fence key is rolled back to an older value (a failover to a
// replica that missed the last grants).
func TestFenceAfterStateLoss(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter) {
		e := newEnv(t, a)
		l := e.locker(e.backend(e.srv.Addr, clientOpts{}), lock.Options{})
		ids := []string{"order-1", "order-2", "order-3"}
		last := map[string]uint64{}
		stale := map[string]string{} // each id's fence after its first grant
		// cycle acquires and releases every id n times, retrying while the
		// client reconnects, and checks each fence against the last one.
		cycle := func(event string, n int) {
			t.Helper()
			for _, id := range ids {
				for range n {
					var res lock.Result
					deadline := time.Now().Add(10 * time.Second)
					for {
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
						var err error
						res, err = l.TryAcquire(ctx, id, time.Minute)
						cancel()
						if err == nil && res.Acquired {
							break
						}
						if time.Now().After(deadline) {
							t.Fatalf("%s: %s not acquired within 10s: %+v, %v", event, id, res, err)
						}
						time.Sleep(20 * time.Millisecond)
					}
					f := res.Lease.Fence()
					if f <= last[id] {
						t.Fatalf("S3: %s: fence %d of %s, want more than every fence before it (%d)", event, f, id, last[id])
					}
					last[id] = f
					if _, ok := stale[id]; !ok {
						stale[id] = e.raw.HGet(context.Background(), e.ks.For(id).Counters, "fence").Val()
					}
					if err := res.Lease.Release(context.Background()); err != nil {
						t.Fatalf("%s: release %s: %v", event, id, err)
					}
				}
			}
		}
		cycle("before any event", 20)

		e.srv.Shutdown()
		e.srv.Restart()
		cycle("after a restart without persistence", 5)

		if err := e.raw.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		cycle("after FLUSHALL", 5)

		for _, id := range ids {
			k := e.ks.For(id)
			if err := e.raw.HSet(context.Background(), k.Counters, "fence", stale[id]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		cycle("after the fence keys went back to an older value", 5)
	})
}
