package scripts

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

func TestFenceIdleMatchesLua(t *testing.T) {
	ms := FenceIdle.Milliseconds()
	for _, want := range []string{fmt.Sprintf("local FENCE_IDLE = %d\n", ms), fmt.Sprintf("local FENCE_IDLE_ARG = '%d'\n", ms)} {
		for _, s := range []Script{Acquire, Release, Extend, AcquireMany} {
			if !strings.Contains(s.Source, want) {
				t.Fatalf("%s does not hold %q", s.Name, want)
			}
		}
	}
}

// withFenceIdle returns s with FENCE_IDLE set to d, so that a test sees
// an id's fence key go without waiting an hour.
func withFenceIdle(t testing.TB, s Script, d time.Duration) Script {
	src := s.Source
	for _, f := range []string{"local FENCE_IDLE = %d\n", "local FENCE_IDLE_ARG = '%d'\n"} {
		old := fmt.Sprintf(f, FenceIdle.Milliseconds())
		if !strings.Contains(src, old) {
			t.Fatalf("%s: no %q to replace", s.Name, old)
		}
		src = strings.Replace(src, old, fmt.Sprintf(f, d.Milliseconds()), 1)
	}
	return newScript(s.Name, src)
}

// TestEveryKeyExpires locks 2,000 distinct ids once each (acquire and
// release), leaves 200 more held until their lease ends and 100 more with
// a waiter that stops heartbeating, on a server of its own, with the fence
// key's idle bound cut to 5s. Every key left must have a TTL within the
// bound, and once the bound has passed no key may be left (H2).
func TestEveryKeyExpires(t *testing.T) {
	c := ownClient(t)
	ctx := context.Background()
	const idle = 5 * time.Second
	acquire, release := withFenceIdle(t, Acquire, idle), withFenceIdle(t, Release, idle)
	for _, s := range []Script{acquire, release} {
		if err := c.ScriptLoad(ctx, s.Source).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := usedMemory(t, c)
	ks, _ := keys.New("ttl:")
	cs := NewConsts(10, 100, Classic)
	lease := 4 * time.Second
	for i := range 2300 {
		id := fmt.Sprint("order-", i)
		k := ks.For(id)
		ak, aa := cs.Acquire(k, backend.AcquireRequest{ID: id, Token: "A", TTL: lease}, testInbox(ks))
		if r, _ := run(t, c, acquire, ak, aa).Int64Slice(); len(r) == 0 || r[0] != 1 {
			t.Fatalf("%s not granted: %v", id, r)
		}
		switch {
		case i < 2000:
			rk, ra := cs.Release(k, "A")
			run(t, c, release, rk, ra)
		case i >= 2200:
			wk, wa := cs.Acquire(k, backend.AcquireRequest{ID: id, Token: "W", TTL: lease, Wait: true, WaiterTTL: 500 * time.Millisecond}, testInbox(ks))
			if r, _ := run(t, c, acquire, wk, wa).Int64Slice(); len(r) == 0 || r[4] != 1 {
				t.Fatalf("%s: waiter not queued: %v", id, r)
			}
		}
	}
	var n int
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
		pttl := c.PTTL(ctx, iter.Val()).Val()
		if pttl == -1 || pttl > idle { // -2: it expired since the SCAN
			t.Errorf("key %q has PTTL %v, want within (0, %v]", iter.Val(), pttl, idle)
		}
	}
	if n < 2300 {
		t.Fatalf("%d keys after locking 2,300 ids, want at least one fence key each", n)
	}
	deadline := time.Now().Add(idle + 10*time.Second) // active expiry runs 10 times a second
	for c.DBSize(ctx).Val() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys left %v after the bound of %v, want none", c.DBSize(ctx).Val(), 10*time.Second, idle)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("keys after the bound: 0; used_memory %+d bytes since before (%.1f bytes per id; allocator and dict sizes, not keys)",
		usedMemory(t, c)-before, float64(usedMemory(t, c)-before)/2300)
}

// FenceKeyExpires accepts a fence key only with a TTL within the bound.
func TestFenceKeyExpires(t *testing.T) {
	for _, c := range []struct {
		pttl, longest time.Duration
		want          bool
	}{
		{-1, time.Minute, false},    // no TTL: left for good
		{-2, time.Minute, false},    // no key (PTTL -2) is not a fence key
		{0, time.Minute, false},     // about to go, but no TTL to trust
		{time.Millisecond, 0, true}, // about to go
		{FenceIdle, 0, true},        // a fresh grant's
		{FenceIdle + time.Minute, time.Minute, true},
		{FenceIdle + time.Minute + 1, time.Minute, false},
	} {
		if got := FenceKeyExpires(c.pttl, c.longest); got != c.want {
			t.Errorf("FenceKeyExpires(%v, %v) = %v, want %v", c.pttl, c.longest, got, c.want)
		}
	}
}
