package harness

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/internal/testenv/redisserver"
)

func TestMain(m *testing.M) { os.Exit(redisserver.Main(m)) }

// TestStateLeft: the harness's StateChecker reports every key of the id,
// with or without a TTL, and never the keys of its hash slot (the fence
// key and the release records, shared by the slot's ids).
func TestStateLeft(t *testing.T) {
	h := GoRedis(t, Server(redisserver.SharedAddr(t)), nil)
	ctx := context.Background()
	k := h.ks.For("x")
	rel := h.ks.Released(k.Slot, 1)
	t.Cleanup(func() { h.raw.Del(ctx, k.Fence, k.Lock, k.Queue, rel) })
	h.raw.Set(ctx, k.Fence, 1, 0)
	h.raw.SAdd(ctx, rel, "m")
	if left := h.StateLeft(t, "x"); len(left) != 0 {
		t.Fatalf("the slot's keys only: StateLeft = %q, want nothing", left)
	}
	h.raw.Set(ctx, k.Lock, "1:T", time.Minute)
	h.raw.ZAdd(ctx, k.Queue, redis.Z{Score: 1, Member: "W"})
	if left := h.StateLeft(t, "x"); len(left) != 2 || left[0] != k.Lock || left[1] != k.Queue {
		t.Fatalf("a lock key with a TTL and a queue without: StateLeft = %q, want [%s %s]", left, k.Lock, k.Queue)
	}
}
