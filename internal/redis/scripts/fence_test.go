package scripts

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// grantFence acquires the id for tok with s (an acquire script) and
// returns the fence.
func (o *opsScripts) grantFence(s Script, tok string) uint64 {
	o.t.Helper()
	return o.grantFenceTTL(s, tok, time.Minute)
}

func (o *opsScripts) grantFenceTTL(s Script, tok string, ttl time.Duration) uint64 {
	o.t.Helper()
	ak, aa := o.acquireCall(NewConsts(10, 10, Classic), backend.AcquireRequest{ID: o.id, Token: tok, TTL: ttl})
	r, err := run(o.t, o.c, s, ak, aa).Int64Slice()
	if err != nil || r[0] != 1 {
		o.t.Fatalf("%s not granted to %s: %v, %v", o.id, tok, r, err)
	}
	return uint64(r[1])
}

func (o *opsScripts) releaseOK(s Script, tok string) {
	o.t.Helper()
	rk, ra := NewConsts(10, 10, Classic).Release(o.k, tok)
	run(o.t, o.c, s, rk, ra)
}

// TestFencesNeverGoBack (S3): an id's fences strictly increase in grant
// order, also when the id's state is forgotten (its keys deleted, as after
// a restart without persistence or a failover to a replica that missed
// them), when its fence key expired while idle, and when the server's
// clock is behind the last fence (a clock that stepped back).
func TestFencesNeverGoBack(t *testing.T) {
	o := newOps(t, "f")
	c, k, ctx := o.c, o.k, context.Background()
	const idle = 300 * time.Millisecond
	acquire, release := withFenceIdle(t, Acquire, idle), withFenceIdle(t, Release, idle)

	var last uint64
	next := func(what string) {
		t.Helper()
		tok := fmt.Sprint("T", last)
		f := o.grantFenceTTL(acquire, tok, idle) // the fence key lives max(idle, lease)
		if f <= last {
			t.Fatalf("%s: fence %d, want more than the last fence %d", what, f, last)
		}
		last = f
		o.releaseOK(release, tok)
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
	f := o.grantFence(acquire, "P")
	o.releaseOK(release, "P")
	o.grantFence(acquire, "Q")
	o.releaseOK(release, "P") // resent: answered as done
	if v := c.Get(ctx, k.Lock).Val(); v != "Q" {
		t.Fatalf("lock = %q after a resent release, want Q untouched", v)
	}
	o.releaseOK(release, "Q")
	o.releaseOK(release, "Q") // resent
	rk, ra := NewConsts(10, 10, Classic).Release(k, "P")
	if err := c.Eval(ctx, release.Source, rk, anys(ra)...).Err(); err == nil || MapError(err.Error()) != backend.ErrNotHeld {
		t.Fatalf("release by P after Q's release = %v, want LOCKNOTHELD", err)
	}
	if g := o.grantFence(acquire, "R"); g <= f {
		t.Fatalf("fence %d after %d", g, f)
	}
}
