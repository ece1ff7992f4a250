package scripts

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

// releaseErr runs release with k and a and returns its error (nil for the
// reply 1); any other reply fails the test.
func (o *opsScripts) releaseErr(k, a []string) error {
	o.t.Helper()
	r, err := o.eval(Release, k, a).Int64()
	if err == nil && r != 1 {
		o.t.Fatalf("release replied %d, want 1", r)
	}
	return err
}

// marks returns the marks in the release records of the test's id's slot
// of the periods from that of since to the current one.
func (o *opsScripts) marks(since time.Time) []string {
	o.t.Helper()
	var out []string
	for p := keys.Period(since); p <= keys.Period(time.Now()); p++ {
		out = append(out, o.c.SMembers(context.Background(), o.ks.Released(o.k.Slot, p)).Val()...)
	}
	return out
}

// notHeld fails the test unless err is a LOCKNOTHELD error reply.
func notHeld(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || MapError(err.Error()) != backend.ErrNotHeld {
		t.Fatalf("%s = %v, want LOCKNOTHELD", what, err)
	}
}

// The resend gap: a release sent again (the same KEYS and ARGV, as a client
// resends a command whose reply was lost) is answered 1 whatever grants and
// releases of the id came in between, and touches no later holder; the
// record is found in the period after its own too (its record is the
// "before" one then), not two periods later. A token whose lease expired
// without a release is refused (LOCKNOTHELD) even after other tokens'
// releases of the id, in the same records.
func TestReleaseResentAfterOthers(t *testing.T) {
	o := newOps(t, "id")
	ctx := context.Background()
	cs := NewConsts(100, 100, Classic)
	start := time.Now()

	o.acquireTTL("A", time.Minute, false)
	ak, aa := o.releaseCall(cs, "A")
	if err := o.releaseErr(ak, aa); err != nil {
		t.Fatalf("A's release: %v", err)
	}
	o.acquireTTL("B", time.Minute, false)
	if err := o.releaseErr(o.releaseCall(cs, "B")); err != nil {
		t.Fatalf("B's release: %v", err)
	}
	if err := o.releaseErr(ak, aa); err != nil {
		t.Fatalf("A's release sent again after B acquired and released: %v, want 1", err)
	}
	if tok, _ := o.holder(); tok != "" {
		t.Fatalf("lock held by %q after a resent release, want free", tok)
	}
	// A later holder is not touched by the resend.
	c := o.acquireTTL("C", time.Minute, false)
	if err := o.releaseErr(ak, aa); err != nil {
		t.Fatalf("A's release sent again while C holds the lock: %v, want 1", err)
	}
	if tok, f := o.holder(); tok != "C" || f != c.Fence {
		t.Fatalf("lock = %q, fence %d after A's resent release, want C's (fence %d) untouched", tok, f, c.Fence)
	}
	if d := o.c.PTTL(ctx, o.k.Lock).Val(); d <= 0 || d > time.Minute {
		t.Fatalf("C's lease PTTL %v after A's resent release, want within (0, 1m]", d)
	}
	if err := o.releaseErr(o.releaseCall(cs, "C")); err != nil {
		t.Fatalf("C's release: %v", err)
	}

	// A's record, sent in the next period (its record is the one before)
	// and two periods later (gone from both).
	p := keys.Period(time.Now())
	if ak[4] != o.ks.Released(o.k.Slot, p) {
		p-- // the period turned since A's release
	}
	mark := keys.ReleaseMark(o.id, "A")
	next, _ := cs.Release(o.k, "A", mark, o.ks.Released(o.k.Slot, p+1), o.ks.Released(o.k.Slot, p))
	if err := o.releaseErr(next, aa); err != nil {
		t.Fatalf("A's release sent again in the next period: %v, want 1", err)
	}
	later, _ := cs.Release(o.k, "A", mark, o.ks.Released(o.k.Slot, p+2), o.ks.Released(o.k.Slot, p+1))
	notHeld(t, "A's release sent again two periods later", o.releaseErr(later, aa))

	// E's lease ends without a release (as by its TTL): its release is
	// refused, before and after other tokens' releases, and while another
	// token holds the lock.
	o.acquireTTL("E", time.Minute, false)
	o.c.Del(ctx, o.k.Lock)
	notHeld(t, "the release of E, whose lease ended", o.releaseErr(o.releaseCall(cs, "E")))
	for _, tok := range []string{"F", "G"} {
		o.acquireTTL(tok, time.Minute, false)
		if err := o.releaseErr(o.releaseCall(cs, tok)); err != nil {
			t.Fatalf("%s's release: %v", tok, err)
		}
	}
	notHeld(t, "the release of E after F's and G's releases", o.releaseErr(o.releaseCall(cs, "E")))
	h := o.acquireTTL("H", time.Minute, false)
	notHeld(t, "the release of E while H holds the lock", o.releaseErr(o.releaseCall(cs, "E")))
	if tok, f := o.holder(); tok != "H" || f != h.Fence {
		t.Fatalf("lock = %q, fence %d after E's refused release, want H's (fence %d)", tok, f, h.Fence)
	}
	// One mark per release, none for a resend or a refused release.
	var want []string
	for _, tok := range []string{"A", "B", "C", "F", "G"} {
		want = append(want, keys.ReleaseMark(o.id, tok))
	}
	if got := o.marks(start); !sameSet(got, want) {
		t.Fatalf("the slot's records hold %q, want the marks of A, B, C, F and G: %q", got, want)
	}
}

// sameSet reports whether a and b hold the same strings, each once.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b) && len(slices.Compact(a)) == len(b)
}

// sameSlot returns an id other than id whose keys hash to id's slot.
func sameSlot(t *testing.T, id string) string {
	t.Helper()
	want := keys.SlotOf(id)
	for i := range 1 << 20 {
		if other := fmt.Sprint("other-", i); keys.SlotOf(other) == want {
			return other
		}
	}
	t.Fatalf("no id of slot %d", want)
	return ""
}

// The release records are per id: a release of token T on id X does not
// make a release of T on another id Y of the same slot (whose record is
// the same key) answer 1, whether T never held Y or held it until its
// lease ended.
func TestReleaseRecordsArePerID(t *testing.T) {
	o := newOps(t, "x")
	ctx := context.Background()
	cs := NewConsts(100, 100, Classic)
	start := time.Now()
	y := &opsScripts{t: t, c: o.c, id: sameSlot(t, o.id), ks: o.ks, inbox: o.inbox}
	y.k = o.ks.For(y.id)
	if y.k.Slot != o.k.Slot || y.k.Fence != o.k.Fence {
		t.Fatalf("ids %s and %s: slots %d and %d, want one", o.id, y.id, o.k.Slot, y.k.Slot)
	}
	grant := func(o *opsScripts, tok string) {
		t.Helper()
		k, a := o.acquireCall(cs, backend.AcquireRequest{ID: o.id, Token: tok, TTL: time.Minute})
		if r, err := o.eval(Acquire, k, a).Int64Slice(); err != nil || r[0] != 1 {
			t.Fatalf("%s not granted to %s: %v, %v", o.id, tok, r, err)
		}
	}

	grant(o, "T")
	xk, xa := o.releaseCall(cs, "T")
	if err := o.releaseErr(xk, xa); err != nil {
		t.Fatalf("T's release of %s: %v", o.id, err)
	}
	yk, ya := y.releaseCall(cs, "T")
	if yk[4] != xk[4] || yk[5] != xk[5] {
		t.Fatalf("the release records of %s (%v) and %s (%v) differ, want the slot's", o.id, xk[5:7], y.id, yk[5:7])
	}
	notHeld(t, "T's release of "+y.id+", never held, after its release of "+o.id, y.releaseErr(yk, ya))

	grant(y, "T")
	o.c.Del(ctx, y.k.Lock) // T's lease of Y ends without a release
	notHeld(t, "T's release of "+y.id+", whose lease ended, after its release of "+o.id, y.releaseErr(y.releaseCall(cs, "T")))
	if err := o.releaseErr(xk, xa); err != nil {
		t.Fatalf("T's release of %s sent again: %v, want 1", o.id, err)
	}

	// T's release of Y is recorded beside that of X, and each is answered.
	grant(y, "T")
	yk, ya = y.releaseCall(cs, "T")
	if err := y.releaseErr(yk, ya); err != nil {
		t.Fatalf("T's release of %s: %v", y.id, err)
	}
	for _, r := range [][2][]string{{xk, xa}, {yk, ya}} {
		if err := o.releaseErr(r[0], r[1]); err != nil {
			t.Fatalf("a release sent again (KEYS %v): %v, want 1", r[0][:1], err)
		}
	}
	want := []string{keys.ReleaseMark(o.id, "T"), keys.ReleaseMark(y.id, "T")}
	if got := o.marks(start); !sameSet(got, want) {
		t.Fatalf("the slot's records hold %q, want the marks of T's releases of %s and %s: %q", got, o.id, y.id, want)
	}
}
