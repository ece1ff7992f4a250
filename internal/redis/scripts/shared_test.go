package scripts

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// acquireShared runs acquire_shared for token on the test's id, of
// capacity cap, for permits, and returns the grant or the mapped error.
func (o *opsScripts) acquireShared(token string, cap, permits int, wait bool) (backend.Grant, error) {
	o.t.Helper()
	req := backend.AcquireRequest{ID: o.id, Token: token, TTL: time.Minute, Wait: wait, WaiterTTL: time.Minute,
		Capacity: cap, Permits: permits}
	k, a := NewConsts(100, 100, Classic).AcquireShared(o.k, req, InboxAddress(InboxClassic, o.inbox))
	r, err := o.eval(AcquireShared, k, a).Int64Slice()
	if err != nil {
		if m := MapError(err.Error()); m != nil {
			return backend.Grant{}, m
		}
		o.t.Fatalf("acquire_shared %s: %v", token, err)
	}
	g, err := ParseAcquire(r)
	if err != nil {
		o.t.Fatal(err)
	}
	return g, nil
}

// release runs release for token, and fails the test unless it released.
func (o *opsScripts) release(token string) {
	o.t.Helper()
	k, a := o.releaseCall(NewConsts(100, 100, Classic), token)
	if err := o.releaseErr(k, a); err != nil {
		o.t.Fatalf("release %s: %v", token, err)
	}
}

// holders returns the fingerprints of the live leases of the test's id,
// with their permits, by inspect: "<fp>x<permits>" in fence order.
func (o *opsScripts) holders() []string {
	var out []string
	for _, h := range o.inspect(100).Holders {
		out = append(out, h.Holder+"x"+string(rune('0'+h.Permits)))
	}
	return out
}

func fpx(token string, permits int) string {
	return backend.Fingerprint(token) + "x" + string(rune('0'+permits))
}

// A shared id of capacity 3, step by step: leases held together while
// they fit; a head that does not fit holds back a later request that
// would (no jumping: the exclusive X is not starved by F); a release
// hands off to every head that fits, in one step, with a grant in each
// wake-up; an exclusive lease excludes all; the id's capacity conflicts
// with a mutex's and another capacity's, until the id is idle.
func TestSharedSteps(t *testing.T) {
	o := newOps(t, "id")
	sub, next := o.wakes()
	defer sub.Close()
	must := func(tok string, permits int, wait bool) backend.Grant {
		t.Helper()
		g, err := o.acquireShared(tok, 3, permits, wait)
		if err != nil {
			t.Fatalf("%s: %v", tok, err)
		}
		return g
	}
	a, b := must("A", 2, false), must("B", 1, false)
	if !a.Acquired || !b.Acquired || b.Fence <= a.Fence {
		t.Fatalf("A (2 of 3) = %+v, B (1) = %+v; want both granted, fences increasing", a, b)
	}
	if again := must("A", 2, false); !again.Acquired || again.Fence != a.Fence {
		t.Fatalf("A again = %+v; want its lease reported, fence %d", again, a.Fence)
	}
	c := must("C", 1, true)
	if c.Acquired || !c.Queued || !c.Head || c.HolderTTL <= 0 {
		t.Fatalf("C (1) with 3 of 3 held = %+v; want queued, the head, told the first lease's end", c)
	}
	x, f := must("X", 3, true), must("F", 1, true)
	if x.Acquired || f.Acquired || !x.Queued || !f.Queued {
		t.Fatalf("X (3) = %+v, F (1) = %+v; want both queued", x, f)
	}
	if rec := o.c.HGet(context.Background(), o.k.Waiters, "X").Val(); !strings.Contains(rec, ":60000/3:") {
		t.Fatalf("X's waiter record %q; want its lease TTL and permits, \":60000/3:\"", rec)
	}
	if _, err := o.acquireShared("D", 4, 1, false); !errors.Is(err, backend.ErrCapacity) {
		t.Fatalf("capacity 4 on an id of capacity 3: %v; want ErrCapacity", err)
	}
	k, args := o.acquireCall(NewConsts(100, 100, Classic), backend.AcquireRequest{ID: o.id, Token: "M", TTL: time.Minute})
	if err := o.eval(Acquire, k, args).Err(); err == nil || !errors.Is(MapError(err.Error()), backend.ErrCapacity) {
		t.Fatalf("a mutex acquire on a shared id: %v; want LOCKCAPACITY", err)
	}

	// A frees 2: C (1) is granted by hand-off; X (3) does not fit, and
	// holds F back although F would fit.
	o.release("A")
	if w := next("C's grant"); w.Token != "C" || w.Grant == nil || w.Grant.Fence <= b.Fence {
		t.Fatalf("wake-up %+v; want C's grant, fence above %d", w, b.Fence)
	}
	if w := next("X told"); w.Token != "X" || w.Grant != nil || w.HolderTTL <= 0 {
		t.Fatalf("wake-up %+v; want X told the first lease's end", w)
	}
	if got, want := strings.Join(o.holders(), ","), fpx("B", 1)+","+fpx("C", 1); got != want {
		t.Fatalf("holders %s, want B and C", got)
	}
	if g := must("F", 1, true); g.Acquired {
		t.Fatalf("F, behind X, with 2 of 3 held = %+v; want not granted (X is ahead)", g)
	}
	o.release("B")
	o.release("C")
	if w := next("X's grant"); w.Token != "X" || w.Grant == nil {
		t.Fatalf("wake-up %+v; want X's grant", w)
	}
	if w := next("F told"); w.Token != "F" || w.HolderTTL <= 0 {
		t.Fatalf("wake-up %+v; want F told X's end", w)
	}
	if got := o.holders(); len(got) != 1 || got[0] != fpx("X", 3) {
		t.Fatalf("holders %v, want X alone (exclusive)", got)
	}
	// Two readers queue behind F: X's release grants all three at once.
	must("G", 1, true)
	must("H", 1, true)
	o.release("X")
	for _, tok := range []string{"F", "G", "H"} {
		if w := next(tok + "'s grant"); w.Token != tok || w.Grant == nil {
			t.Fatalf("wake-up %+v; want %s's grant", w, tok)
		}
	}
	quiet(t, sub, "after the three grants")
	for _, tok := range []string{"F", "G", "H"} {
		o.release(tok)
	}
	if n := o.c.Exists(context.Background(), o.k.Lock, o.k.Queue, o.k.Waiters).Val(); n != 0 {
		t.Fatalf("%d keys of the id left once it is idle; want none", n)
	}
	// Idle: the capacity is forgotten.
	if g, err := o.acquireShared("E", 5, 5, false); err != nil || !g.Acquired {
		t.Fatalf("capacity 5 on the idle id = %+v, %v; want granted", g, err)
	}
}

// A mutex lease and a mutex's waiters conflict with a shared request.
func TestSharedOnMutex(t *testing.T) {
	o := newOps(t, "id")
	o.acquireTTL("M", time.Minute, false)
	if _, err := o.acquireShared("S", 2, 1, true); !errors.Is(err, backend.ErrCapacity) {
		t.Fatalf("a shared request on a held mutex: %v; want ErrCapacity", err)
	}
	if o.c.Exists(context.Background(), o.k.Queue).Val() != 0 {
		t.Fatal("the refused shared request queued")
	}
}

// Every key of a shared id has a TTL: the lock hash lives as long as its
// last lease and as long as the queue keys (so the capacity stays while a
// waiter lives), and goes with them (H2). A release sent again is answered
// done from the release record, a release by a token that never held is
// LOCKNOTHELD (S4, S6).
func TestSharedKeysExpireAndReleaseResent(t *testing.T) {
	o := newOps(t, "id")
	ctx := context.Background()
	a, err := o.acquireShared("A", 2, 2, false)
	if err != nil || !a.Acquired {
		t.Fatalf("A = %+v, %v", a, err)
	}
	if g, err := o.acquireShared("W", 2, 1, true); err != nil || !g.Queued {
		t.Fatalf("W = %+v, %v; want queued", g, err)
	}
	lockTTL := o.c.PTTL(ctx, o.k.Lock).Val()
	for _, k := range []string{o.k.Lock, o.k.Queue, o.k.Waiters} {
		if d := o.c.PTTL(ctx, k).Val(); d <= 0 {
			t.Fatalf("%s has TTL %v; every key must expire", k, d)
		}
	}
	if qTTL := o.c.PTTL(ctx, o.k.Queue).Val(); lockTTL < qTTL || lockTTL < time.Minute-time.Second {
		t.Fatalf("the lock hash lives %v, the queue %v, A's lease a minute: want the hash to outlive both", lockTTL, qTTL)
	}
	o.release("A") // hands off to W
	o.release("A") // the resend: done, from the release record
	k, args := o.releaseCall(NewConsts(100, 100, Classic), "N")
	if err := o.releaseErr(k, args); err == nil || !errors.Is(MapError(err.Error()), backend.ErrNotHeld) {
		t.Fatalf("release by a token that never held: %v, want LOCKNOTHELD", err)
	}
	o.release("W")
	if n := o.c.Exists(ctx, o.k.Lock, o.k.Queue, o.k.Waiters).Val(); n != 0 {
		t.Fatalf("%d keys of the idle shared id left", n)
	}
}
