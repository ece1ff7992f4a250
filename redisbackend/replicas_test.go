package redisbackend

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
)

// TestWaitReplicasOptions: WaitReplicas and WaitTimeout are validated;
// WAIT needs a client whose pipelines keep to one connection per node.
func TestWaitReplicasOptions(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: time.Second})
	defer client.Close()
	for _, o := range []Options{
		{WaitReplicas: -1},
		{WaitReplicas: 1, WaitTimeout: -time.Second},
		{WaitReplicas: 1, WaitTimeout: time.Microsecond},
		{WaitReplicas: 1, WaitTimeout: time.Second}, // not below ReadTimeout
	} {
		if _, err := New(client, &o); err == nil {
			t.Errorf("New accepted %+v", o)
		}
	}
	if _, err := New(client, &Options{WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond}); err != nil {
		t.Errorf("New rejected a WaitTimeout below ReadTimeout: %v", err)
	}
	type wrapped struct{ *redis.Client }
	if _, err := New(wrapped{client}, &Options{WaitReplicas: 1}); err == nil || !strings.Contains(err.Error(), "WaitReplicas") {
		t.Errorf("New with WaitReplicas on a wrapped client: %v", err)
	}
}

// TestWaitReplicasWithoutReplicas: on a server without replicas, a grant
// with WaitReplicas 1 is confirmed by none, so it is released and fails
// with ErrNotReplicated; Extend of a lease taken without the option too;
// a request that is not granted (here: enqueued) is answered as usual.
func TestWaitReplicasWithoutReplicas(t *testing.T) {
	e := newEnv(t)
	plain, _ := e.backend(nil)
	b, _ := e.backend(&Options{WaitReplicas: 1, WaitTimeout: 10 * time.Millisecond})
	if g, err := b.Acquire(ctx, req("w", "A", false)); !errors.Is(err, ErrNotReplicated) || g.Acquired {
		t.Fatalf("Acquire = %+v, %v; want ErrNotReplicated", g, err)
	}
	if n := e.raw.Exists(ctx, b.keyNames("w").Lock).Val(); n != 0 {
		t.Fatal("the unconfirmed grant was left held")
	}
	if g, err := plain.Acquire(ctx, req("w", "P", false)); err != nil || !g.Acquired {
		t.Fatalf("plain Acquire = %+v, %v", g, err)
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
}
