package adaptertest

import (
	"errors"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// WaitReplicasWithoutReplicas: on a server without replicas, a grant with
// WaitReplicas 1 is confirmed by none, so it is released and fails with
// ErrNotReplicated; Extend of a lease taken without the option too; a
// request that is not granted (here: enqueued) is answered as usual.
func WaitReplicasWithoutReplicas(t *testing.T, a Adapter) {
	plain, _ := a.Backend(t)
	b := a.Replicated(t, 1, 10*time.Millisecond)
	if g, err := b.Acquire(ctx, Req("w", "A", false)); !errors.Is(err, backend.ErrNotReplicated) || g.Acquired {
		t.Fatalf("Acquire = %+v, %v; want ErrNotReplicated", g, err)
	}
	if n := a.Int(t, "EXISTS", a.Keys.For("w").Lock); n != 0 {
		t.Fatal("the unconfirmed grant was left held")
	}
	if g := MustAcquire(t, plain, Req("w", "P", false)); !g.Acquired {
		t.Fatalf("plain Acquire = %+v", g)
	}
	if err := b.Extend(ctx, "w", "P", time.Minute); !errors.Is(err, backend.ErrNotReplicated) {
		t.Fatalf("Extend = %v; want ErrNotReplicated", err)
	}
	if g, err := b.Acquire(ctx, Req("w", "Q", true)); err != nil || g.Acquired || !g.Queued {
		t.Fatalf("a waiting Acquire of a held id = %+v, %v; want queued, no error", g, err)
	}
	res, err := b.(backend.Batcher).AcquireBatch(ctx, []backend.AcquireRequest{Req("v", "A", false), Req("w", "R", false)})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0].Err, backend.ErrNotReplicated) || res[1].Err != nil || res[1].Acquired {
		t.Fatalf("AcquireBatch = %+v", res)
	}
	_ = b.Leave(ctx, "w", "Q")
	_ = plain.Release(ctx, "w", "P")
}
