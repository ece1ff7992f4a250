package scripts

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

func (o *opsScripts) acquire(token string, wait bool) {
	o.t.Helper()
	req := backend.AcquireRequest{ID: "id", Token: token, TTL: time.Minute, Wait: wait, WaiterTTL: time.Minute}
	k, a := o.acquireCall(NewConsts(100, 100, Classic), req)
	if err := o.eval(Acquire, k, a).Err(); err != nil {
		o.t.Fatal(err)
	}
}

func (o *opsScripts) inspect(maxWaiters int) backend.Inspection {
	o.t.Helper()
	k, a := InspectCall(o.k, maxWaiters)
	r, err := o.eval(Inspect, k, a).StringSlice()
	if err != nil {
		o.t.Fatalf("inspect: %v", err)
	}
	in, err := ParseInspect("id", r)
	if err != nil {
		o.t.Fatal(err)
	}
	return in
}

// state is every key of the id and its slot's fence key, with values, for
// read-only checks.
func (o *opsScripts) state() string {
	ctx := context.Background()
	var b strings.Builder
	b.WriteString(o.c.Get(ctx, o.k.Lock).Val())
	b.WriteString("|fence=" + o.c.Get(ctx, o.k.Fence).Val())
	for _, m := range o.c.ZRangeWithScores(ctx, o.k.Queue, 0, -1).Val() {
		b.WriteString("|" + m.Member.(string))
	}
	h := o.c.HGetAll(ctx, o.k.Waiters).Val()
	for _, f := range slices.Sorted(maps.Keys(h)) {
		b.WriteString("|" + f + "=" + h[f])
	}
	return b.String()
}

func TestInspectScript(t *testing.T) {
	o := newOps(t, "id")
	if in := o.inspect(10); in.Held || in.QueueLen != 0 || len(in.Waiters) != 0 {
		t.Fatalf("free id: %+v, want nothing", in)
	}
	o.acquire("H", false)
	for _, w := range []string{"W1", "DEAD", "W2", "W3"} {
		o.acquire(w, true)
	}
	// DEAD's deadline passes; nothing purged it yet.
	o.kill("DEAD")
	_, fence := o.holder()
	before := o.state()
	in := o.inspect(2)
	if after := o.state(); after != before {
		t.Fatalf("inspect changed the state:\n before %s\n after  %s", before, after)
	}
	if !in.Held || in.Fence != fence || in.Holder != backend.Fingerprint("H") {
		t.Fatalf("holder: %+v, want held with fence %d and fingerprint %s", in, fence, backend.Fingerprint("H"))
	}
	if in.TTL <= 0 || in.TTL > time.Minute {
		t.Fatalf("TTL %v, want in (0, 1m]", in.TTL)
	}
	if in.QueueLen != 3 {
		t.Fatalf("QueueLen %d, want the 3 live waiters", in.QueueLen)
	}
	if len(in.Waiters) != 2 || in.Waiters[0].Token != backend.Fingerprint("W1") || in.Waiters[1].Token != backend.Fingerprint("W2") {
		t.Fatalf("Waiters %+v, want W1 and W2 (DEAD skipped, bounded to 2)", in.Waiters)
	}
	if in.Waiters[0].Ticket >= in.Waiters[1].Ticket || in.Waiters[0].QueuedFor != 0 {
		t.Fatalf("Waiters %+v: tickets must increase; QueuedFor is not known on Redis", in.Waiters)
	}
	for _, w := range in.Waiters {
		if w.Deadline <= 0 || w.Deadline > time.Minute {
			t.Fatalf("waiter deadline %v, want in (0, 1m]", w.Deadline)
		}
	}
	if s := o.eval(Inspect, []string{o.k.Lock, o.k.Queue, o.k.Waiters}, []string{"10", "10"}).String(); strings.Contains(s, "W1") || strings.Contains(s, " H ") {
		t.Fatalf("the reply carries a token: %s", s)
	}
	if n := len(o.inspect(500).Waiters); n != 3 {
		t.Fatalf("inspect(500) listed %d waiters, want 3 (the cap is %d)", n, backend.MaxInspectWaiters)
	}
	for _, bad := range [][]string{{"101", "10"}, {"-1", "10"}, {"x", "10"}, {"1", "0"}, {"1"}} {
		err := o.eval(Inspect, []string{o.k.Lock, o.k.Queue, o.k.Waiters}, bad).Err()
		if err == nil || ErrorCode(err.Error()) != CodeBadArg {
			t.Errorf("inspect %v: %v, want LOCKBADARG", bad, err)
		}
	}
}

func TestParseInspectRejectsBadReplies(t *testing.T) {
	for _, r := range [][]string{
		{"1", "2", "3", "ab"},
		{"1", "2", "3", "ab", "1", "5"},
		{"x", "2", "3", "ab", "0"},
		{"1", "2", "3", "ab", "1", "t", "5", "cd"},
	} {
		if _, err := ParseInspect("id", r); err == nil {
			t.Errorf("ParseInspect(%q) accepted it", r)
		}
	}
}

func TestForceReleaseScript(t *testing.T) {
	o := newOps(t, "id")
	ctx := context.Background()
	force := func(fence uint64) error {
		k, a := ForceReleaseCall(o.k, fence, 100, Classic)
		return o.eval(ForceRelease, k, a).Err()
	}
	if err := force(1); !errors.Is(MapError(errMsg(err)), backend.ErrNotHeld) {
		t.Fatalf("free id: %v, want LOCKNOTHELD", err)
	}
	o.acquire("H", false)
	o.acquire("W", true)
	_, fence := o.holder()
	err := force(fence + 1)
	if !errors.Is(MapError(errMsg(err)), backend.ErrNotHeld) || !strings.Contains(errMsg(err), "fence") {
		t.Fatalf("wrong fence: %v, want LOCKNOTHELD naming the fence", err)
	}
	if tok, f := o.holder(); tok != "H" || f != fence {
		t.Fatalf("a refused forced release changed the lock: %s, fence %d", tok, f)
	}
	_, next := o.wakes()
	if err := force(fence); err != nil {
		t.Fatalf("right fence: %v", err)
	}
	// The lock goes to the head, W, as a release hands it off.
	if w := next("the forced release"); w.Token != "W" || w.Grant == nil || w.Grant.Fence <= fence {
		t.Fatalf("wake-up: %+v; want W's grant, with a fence above %d", w, fence)
	}
	if holder, _ := o.holder(); holder != "W" {
		t.Fatalf("lock = %q after the forced release, want W's (a hand-off)", holder)
	}
	// The former holder's release is refused: it no longer holds the lock,
	// and a forced release records no release of it.
	k, a := o.releaseCall(NewConsts(100, 100, Classic), "H")
	if err := o.eval(Release, k, a).Err(); !errors.Is(MapError(errMsg(err)), backend.ErrNotHeld) {
		t.Fatalf("the former holder's release: %v, want LOCKNOTHELD", err)
	}
	// A fence beyond a Lua number's precision is compared exactly.
	big := uint64(1764000000000000123)
	o.c.Set(ctx, o.k.Lock, fmt.Sprint(big, ":X"), time.Minute)
	if err := force(big - 1); err == nil {
		t.Fatal("a fence one below was accepted")
	}
	if err := force(big); err != nil {
		t.Fatalf("a 19-digit fence: %v", err)
	}
	for _, bad := range []string{"0", "-1", "01", "x", ""} {
		k, a := ForceReleaseCall(o.k, 1, 100, Classic)
		a[0] = bad
		if err := o.eval(ForceRelease, k, a).Err(); err == nil || ErrorCode(err.Error()) != CodeBadArg {
			t.Errorf("fence %q: %v, want LOCKBADARG", bad, err)
		}
	}
}

func errMsg(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
