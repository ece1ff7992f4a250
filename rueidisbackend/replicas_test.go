package rueidisbackend

import (
	"errors"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// TestWaitReplicasOptions: WaitReplicas and WaitTimeout are validated.
func TestWaitReplicasOptions(t *testing.T) {
	for _, o := range []Options{
		{WaitReplicas: -1},
		{WaitReplicas: 1, WaitTimeout: -time.Second},
		{WaitReplicas: 1, WaitTimeout: time.Microsecond},
	} {
		if _, err := newBackend(&o); err == nil {
			t.Errorf("newBackend accepted %+v", o)
		}
	}
}

// TestWaitReplicasWithoutReplicas: on a server without replicas, a grant
// with WaitReplicas 1 is confirmed by none, so it is released and fails
// with ErrNotReplicated; Extend too; a request that is not granted is
// answered as usual. In both modes.
func TestWaitReplicasWithoutReplicas(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			plain, _ := e.backend(mode, nil)
			b, _ := e.backend(mode, &Options{WaitReplicas: 1, WaitTimeout: 10 * time.Millisecond})
			if g, err := b.Acquire(ctx, req("w", "A", false)); !errors.Is(err, ErrNotReplicated) || g.Acquired {
				t.Fatalf("Acquire = %+v, %v; want ErrNotReplicated", g, err)
			}
			if n, _ := e.do("EXISTS", b.keyNames("w").Lock).AsInt64(); n != 0 {
				t.Fatal("the unconfirmed grant was left held")
			}
			if g := mustAcquire(t, plain, req("w", "P", false)); !g.Acquired {
				t.Fatalf("plain Acquire = %+v", g)
			}
			if err := b.Extend(ctx, "w", "P", time.Minute); !errors.Is(err, ErrNotReplicated) {
				t.Fatalf("Extend = %v; want ErrNotReplicated", err)
			}
			if g, err := b.Acquire(ctx, req("w", "Q", true)); err != nil || g.Acquired || !g.Queued {
				t.Fatalf("a waiting Acquire of a held id = %+v, %v; want queued, no error", g, err)
			}
			res, err := b.AcquireBatch(ctx, []backend.AcquireRequest{req("v", "A", false), req("w", "R", false)})
			if err != nil {
				t.Fatal(err)
			}
			if !errors.Is(res[0].Err, ErrNotReplicated) || res[1].Err != nil || res[1].Acquired {
				t.Fatalf("AcquireBatch = %+v", res)
			}
			_ = b.Leave(ctx, "w", "Q")
			_ = plain.Release(ctx, "w", "P")
		})
	}
}
