package scripts

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/keys"
	"github.com/redislocker/lock/internal/redistest"
)

// grantFence acquires id for tok with s (an acquire script) and returns
// the fence.
func grantFence(t *testing.T, c *redis.Client, s Script, k keys.ID, id, tok string) uint64 {
	t.Helper()
	return grantFenceTTL(t, c, s, k, id, tok, time.Minute)
}

func grantFenceTTL(t *testing.T, c *redis.Client, s Script, k keys.ID, id, tok string, ttl time.Duration) uint64 {
	t.Helper()
	ak, aa := NewConsts(10, 10, Classic).Acquire(k, backend.AcquireRequest{ID: id, Token: tok, TTL: ttl})
	r, err := run(t, c, s, ak, aa).Int64Slice()
	if err != nil || r[0] != 1 {
		t.Fatalf("%s not granted to %s: %v, %v", id, tok, r, err)
	}
	return uint64(r[1])
}

func releaseOK(t *testing.T, c *redis.Client, s Script, k keys.ID, tok string) {
	t.Helper()
	rk, ra := NewConsts(10, 10, Classic).Release(k, tok)
	run(t, c, s, rk, ra)
}

// TestFencesNeverGoBack (S3): an id's fences strictly increase in grant
// order, also when the id's state is forgotten (its keys deleted, as after
// a restart without persistence or a failover to a replica that missed
// them), when its fence key expired while idle, and when the server's
// clock is behind the last fence (a clock that stepped back).
func TestFencesNeverGoBack(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	ks, _ := keys.New(redistest.Prefix(t))
	t.Cleanup(func() { cleanup(t, c, ks) })
	const idle = 300 * time.Millisecond
	acquire, release := withFenceIdle(t, Acquire, idle), withFenceIdle(t, Release, idle)

	k := ks.For("f")
	var last uint64
	next := func(what string) {
		t.Helper()
		tok := fmt.Sprint("T", last)
		f := grantFenceTTL(t, c, acquire, k, "f", tok, idle) // the fence key lives max(idle, lease)
		if f <= last {
			t.Fatalf("%s: fence %d, want more than the last fence %d", what, f, last)
		}
		last = f
		releaseOK(t, c, release, k, tok)
	}
	for range 100 {
		next("back-to-back grants")
	}
	c.Del(ctx, k.Lock, k.Queue, k.Deadlines, k.Counters, k.Waiters)
	next("after the id's keys were deleted")
	deadline := time.Now().Add(10 * time.Second)
	for c.Exists(ctx, k.Counters).Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the fence key outlived its %v idle bound by 10s", idle)
		}
		time.Sleep(10 * time.Millisecond)
	}
	next("after the fence key expired while idle")

	// A fence key ahead of the clock (the clock stepped back 10 minutes).
	ahead := last + uint64((10 * time.Minute).Microseconds())
	c.HSet(ctx, k.Counters, "fence", fmt.Sprint(ahead))
	last = ahead
	next("with the clock behind the last fence")
	if last != ahead+1 {
		t.Fatalf("fence %d with the clock behind the last fence %d, want %d", last, ahead, ahead+1)
	}
	// A release's mark survives the next grant (a resent release of the
	// previous holder is still answered as done).
	f := grantFence(t, c, acquire, k, "f", "P")
	releaseOK(t, c, release, k, "P")
	grantFence(t, c, acquire, k, "f", "Q")
	releaseOK(t, c, release, k, "P") // resent: answered as done
	if v := c.Get(ctx, k.Lock).Val(); v != "Q" {
		t.Fatalf("lock = %q after a resent release, want Q untouched", v)
	}
	releaseOK(t, c, release, k, "Q")
	releaseOK(t, c, release, k, "Q") // resent
	rk, ra := NewConsts(10, 10, Classic).Release(k, "P")
	if err := c.Eval(ctx, release.Source, rk, anys(ra)...).Err(); err == nil || MapError(err.Error()) != backend.ErrNotHeld {
		t.Fatalf("release by P after Q's release = %v, want LOCKNOTHELD", err)
	}
	if g := grantFence(t, c, acquire, k, "f", "R"); g <= f {
		t.Fatalf("fence %d after %d", g, f)
	}
}

// TestFenceKeyOfAnOlderVersion checks that an id whose counters hash was
// left by an older version of the scripts (fence, ticket and rel fields,
// no TTL) is taken over: fences go on above its fence, its release record
// still answers a resent release, and the key gets a TTL.
func TestFenceKeyOfAnOlderVersion(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	ks, _ := keys.New(redistest.Prefix(t))
	t.Cleanup(func() { cleanup(t, c, ks) })
	k := ks.For("old")
	c.HSet(ctx, k.Counters, "fence", 41, "ticket", 7, "rel", "X")
	releaseOK(t, c, Release, k, "X") // X's resent release
	if f := grantFence(t, c, Acquire, k, "old", "A"); f <= 41 {
		t.Fatalf("fence %d over an older hash with fence 41, want more", f)
	}
	if d := c.PTTL(ctx, k.Counters).Val(); d <= 0 {
		t.Fatalf("the fence key has PTTL %v after a grant, want a TTL", d)
	}
	releaseOK(t, c, Release, k, "A")
	// A release onto an older hash (the lock taken before an upgrade).
	c.Set(ctx, k.Lock, "B", time.Minute)
	c.Del(ctx, k.Counters)
	c.HSet(ctx, k.Counters, "fence", 3) // no TTL
	releaseOK(t, c, Release, k, "B")
	releaseOK(t, c, Release, k, "B") // resent
	if d := c.PTTL(ctx, k.Counters).Val(); d <= 0 {
		t.Fatalf("the fence key has PTTL %v after a release, want a TTL", d)
	}
}
