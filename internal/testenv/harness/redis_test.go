package harness

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redislocker/lock/internal/redis/scripts"
	"github.com/redislocker/lock/internal/testenv/redisserver"
)

func TestMain(m *testing.M) { os.Exit(redisserver.Main(m)) }

// TestStateLeftFenceKey: the harness's StateChecker passes over a fence
// key that expires within its bound, and reports one with no TTL or a
// longer one, as it reports every other key.
func TestStateLeftFenceKey(t *testing.T) {
	h := GoRedis(t, Server(redisserver.SharedAddr(t)), nil)
	ctx := context.Background()
	k := h.ks.For("x")
	t.Cleanup(func() { h.raw.Del(ctx, k.Counters, k.Lock) })
	if err := h.raw.HSet(ctx, k.Counters, "fence", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if left := h.StateLeft(t, "x"); len(left) != 1 {
		t.Fatalf("a fence key with no TTL: StateLeft = %q, want it reported", left)
	}
	h.raw.PExpire(ctx, k.Counters, scripts.FenceIdle)
	if left := h.StateLeft(t, "x"); len(left) != 0 {
		t.Fatalf("a fence key expiring within %v: StateLeft = %q, want nothing", scripts.FenceIdle, left)
	}
	h.raw.PExpire(ctx, k.Counters, 3*scripts.FenceIdle)
	if left := h.StateLeft(t, "x"); len(left) != 1 {
		t.Fatalf("a fence key expiring in %v: StateLeft = %q, want it reported", 3*scripts.FenceIdle, left)
	}
	h.raw.PExpire(ctx, k.Counters, time.Minute)
	h.raw.Set(ctx, k.Lock, "T", time.Minute)
	if left := h.StateLeft(t, "x"); len(left) != 1 || left[0] != k.Lock {
		t.Fatalf("a lock key: StateLeft = %q, want [%s]", left, k.Lock)
	}
}
