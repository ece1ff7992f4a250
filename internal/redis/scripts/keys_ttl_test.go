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

// The TTLs of the slot keys in lib.lua are package keys' FenceIdle (the
// fence key of a slot) and ReleaseKeep (a release record).
func TestSlotKeyTTLsMatchLua(t *testing.T) {
	want := []string{
		fmt.Sprintf("local FENCE_IDLE_ARG = '%d'\n", keys.FenceIdle.Milliseconds()),
		fmt.Sprintf("local RELEASE_KEEP = '%d'\n", keys.ReleaseKeep.Milliseconds()),
	}
	for _, w := range want {
		for _, s := range append(All(), Inspect, ForceRelease) {
			if !strings.Contains(s.Source, w) {
				t.Fatalf("%s does not hold %q", s.Name, w)
			}
		}
	}
}

// withSlotTTLs returns s with FENCE_IDLE (the TTL of a slot's fence key)
// set to idle and RELEASE_KEEP (that of a release record) to keep, so that
// a test sees the slot keys go without waiting an hour.
func withSlotTTLs(t testing.TB, s Script, idle, keep time.Duration) Script {
	src := s.Source
	for _, r := range []struct {
		f        string
		old, new time.Duration
	}{
		{"local FENCE_IDLE_ARG = '%d'\n", keys.FenceIdle, idle},
		{"local RELEASE_KEEP = '%d'\n", keys.ReleaseKeep, keep},
	} {
		old := fmt.Sprintf(r.f, r.old.Milliseconds())
		if !strings.Contains(src, old) {
			t.Fatalf("%s: no %q to replace", s.Name, old)
		}
		src = strings.Replace(src, old, fmt.Sprintf(r.f, r.new.Milliseconds()), 1)
	}
	return newScript(s.Name, src)
}

// withFenceIdle returns s with FENCE_IDLE set to d (and RELEASE_KEEP
// unchanged).
func withFenceIdle(t testing.TB, s Script, d time.Duration) Script {
	return withSlotTTLs(t, s, d, keys.ReleaseKeep)
}

// TestEveryKeyExpires locks 2,000 distinct ids once each (acquire and
// release), leaves 200 more held until their lease ends and 100 more with
// a waiter that stops heartbeating, on a server of its own, with the
// TTLs of the slot keys (fence keys, release records) cut to 5s. Every key
// left must have a TTL within the bound, and once the bound has passed no
// key may be left (H2).
func TestEveryKeyExpires(t *testing.T) {
	c := ownClient(t)
	ctx := context.Background()
	const idle = 5 * time.Second
	acquire, release := withSlotTTLs(t, Acquire, idle, idle), withSlotTTLs(t, Release, idle, idle)
	for _, s := range []Script{acquire, release} {
		if err := c.ScriptLoad(ctx, s.Source).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := usedMemory(t, c)
	ks, _ := keys.New("ttl:")
	cs := NewConsts(10, 100, Classic)
	lease := 4 * time.Second
	slots := map[int]bool{}
	for i := range 2300 {
		id := fmt.Sprint("order-", i)
		k := ks.For(id)
		slots[k.Slot] = true
		ak, aa := cs.Acquire(k, backend.AcquireRequest{ID: id, Token: "A", TTL: lease}, testInbox(ks))
		if r, _ := run(t, c, acquire, ak, aa).Int64Slice(); len(r) == 0 || r[0] != 1 {
			t.Fatalf("%s not granted: %v", id, r)
		}
		switch {
		case i < 2000:
			rk, ra := releaseCall(cs, ks, id, "A")
			run(t, c, release, rk, ra)
		case i >= 2200:
			wk, wa := cs.Acquire(k, backend.AcquireRequest{ID: id, Token: "W", TTL: lease, Wait: true, WaiterTTL: 500 * time.Millisecond}, testInbox(ks))
			if r, _ := run(t, c, acquire, wk, wa).Int64Slice(); len(r) == 0 || r[4] != 1 {
				t.Fatalf("%s: waiter not queued: %v", id, r)
			}
		}
	}
	var fences, records int
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		switch maxTTL, ok := ks.SlotKey(key); {
		case ok && maxTTL == keys.FenceIdle:
			fences++
		case ok:
			records++
		}
		pttl := c.PTTL(ctx, key).Val()
		if pttl == -1 || pttl > idle { // -2: it expired since the SCAN
			t.Errorf("key %q has PTTL %v, want within (0, %v]", key, pttl, idle)
		}
	}
	if fences < len(slots) || records == 0 {
		t.Fatalf("%d fence keys and %d release records after locking 2,300 ids of %d slots, want a fence key per slot and some records",
			fences, records, len(slots))
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

// Every grant sets its slot's fence key, with the TTL keys.FenceIdle
// (acquire, a hand-off by a release, acquire_many at its end); every
// release sets its record's TTL to keys.ReleaseKeep. Neither depends on
// the lease: the fence of a held lease is in its lock key.
func TestSlotKeysTTL(t *testing.T) {
	o := newOps(t, "id")
	ctx := context.Background()
	cs := NewConsts(100, 100, Classic)
	fenceTTL := func(what string, f uint64) {
		t.Helper()
		if v, _ := o.c.Get(ctx, o.k.Fence).Uint64(); v != f {
			t.Fatalf("%s: fence key %d, want the grant's fence %d", what, v, f)
		}
		// A minute of slack: the TTL is set in this step, read just after.
		if d := o.c.PTTL(ctx, o.k.Fence).Val(); d <= keys.FenceIdle-time.Minute || d > keys.FenceIdle {
			t.Fatalf("%s: fence key PTTL %v, want about %v", what, d, keys.FenceIdle)
		}
	}
	// A lease longer than FenceIdle does not make the fence key live longer.
	g := o.acquireTTL("H", 2*keys.FenceIdle, false)
	fenceTTL("a grant", g.Fence)
	o.acquireTTL("W", time.Minute, true)
	o.c.PExpire(ctx, o.k.Fence, time.Minute)
	rk, ra := o.releaseCall(cs, "H")
	run(t, o.c, Release, rk, ra)
	w, f := o.holder()
	if w != "W" {
		t.Fatalf("lock holder %q after H's release, want W (a hand-off)", w)
	}
	fenceTTL("a hand-off", f)
	rec := rk[4]
	if d := o.c.PTTL(ctx, rec).Val(); d <= 0 || d > keys.ReleaseKeep {
		t.Fatalf("release record PTTL %v, want within (0, %v]", d, keys.ReleaseKeep)
	}
	o.c.PExpire(ctx, o.k.Fence, time.Minute)
	out := runAcquireMany(t, o.c, cs, o.ks, []backend.AcquireRequest{{ID: "other", Token: "A", TTL: time.Minute}}, false, 0)
	if !out[0].Acquired {
		t.Fatalf("acquire_many: %+v", out[0])
	}
	if o.ks.For("other").Slot == o.k.Slot {
		t.Fatal("the test wants ids of two slots")
	}
	if d := o.c.PTTL(ctx, o.ks.For("other").Fence).Val(); d <= keys.FenceIdle-time.Minute || d > keys.FenceIdle {
		t.Fatalf("acquire_many: fence key PTTL %v, want about %v", d, keys.FenceIdle)
	}
}
