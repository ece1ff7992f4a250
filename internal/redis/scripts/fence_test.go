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
	rk, ra := o.releaseCall(NewConsts(10, 10, Classic), tok)
	run(o.t, o.c, s, rk, ra)
}

// TestFencesNeverGoBack (S3): an id's fences strictly increase in grant
// order, also when the id's state is forgotten (its keys and its slot's
// fence key deleted, as after a restart without persistence or a failover
// to a replica that missed them), when the slot's fence key expired while
// idle, and when the server's clock is behind the slot's last fence (a
// clock that stepped back).
func TestFencesNeverGoBack(t *testing.T) {
	o := newOps(t, "f")
	c, k, ctx := o.c, o.k, context.Background()
	const idle = 300 * time.Millisecond
	acquire, release := withFenceIdle(t, Acquire, idle), withFenceIdle(t, Release, idle)

	var last uint64
	next := func(what string) {
		t.Helper()
		tok := fmt.Sprint("T", last)
		f := o.grantFenceTTL(acquire, tok, idle)
		if f <= last {
			t.Fatalf("%s: fence %d, want more than the last fence %d", what, f, last)
		}
		last = f
		o.releaseOK(release, tok)
	}
	for range 100 {
		next("back-to-back grants")
	}
	c.Del(ctx, k.Lock, k.Queue, k.Fence, k.Waiters)
	next("after the id's keys were deleted")
	deadline := time.Now().Add(10 * time.Second)
	for c.Exists(ctx, k.Fence).Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the fence key outlived its %v idle bound by 10s", idle)
		}
		time.Sleep(10 * time.Millisecond)
	}
	next("after the fence key expired while idle")

	// A fence key ahead of the clock (the clock stepped back 10 minutes).
	ahead := last + uint64((10 * time.Minute).Microseconds())
	c.Set(ctx, k.Fence, fmt.Sprint(ahead), time.Hour)
	last = ahead
	next("with the clock behind the last fence")
	if last != ahead+1 {
		t.Fatalf("fence %d with the clock behind the last fence %d, want %d", last, ahead, ahead+1)
	}
	// A release's mark survives the next grant and release (a resent
	// release of an earlier holder is still answered as done), and a
	// resent release does not take a fence or touch the holder.
	f := o.grantFence(acquire, "P")
	o.releaseOK(release, "P")
	q := o.grantFence(acquire, "Q")
	o.releaseOK(release, "P") // resent: answered as done
	if tok, fq := o.holder(); tok != "Q" || fq != q {
		t.Fatalf("lock = %s (fence %d) after a resent release, want Q's (fence %d) untouched", tok, fq, q)
	}
	o.releaseOK(release, "Q")
	o.releaseOK(release, "Q") // resent
	o.releaseOK(release, "P") // resent after Q's release: still done
	// N never held the lock.
	rk, ra := o.releaseCall(NewConsts(10, 10, Classic), "N")
	if err := evalsha(ctx, c, release, rk, ra).Err(); err == nil || MapError(err.Error()) != backend.ErrNotHeld {
		t.Fatalf("release by N, which never held the lock = %v, want LOCKNOTHELD", err)
	}
	if g := o.grantFence(acquire, "R"); g <= q || q <= f {
		t.Fatalf("fences %d, %d, %d: want increasing", f, q, g)
	}
}
