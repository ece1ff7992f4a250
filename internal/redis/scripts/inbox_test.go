package scripts

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// A wake-up goes where the head's record says its process listens, as
// "<n>:<tag><payload>": PUBLISH of an inbox channel ("P") or RPUSH to an
// inbox key ("K", which then expires 60 s after the write). A wake-up the
// inbox refuses (a key of another type) is dropped, and the step goes on:
// the grant it carried stands. Nothing else is sent.
func TestWakeGoesToTheInbox(t *testing.T) {
	o := newOps(t, "id")
	ctx := context.Background()
	prefix := strings.TrimSuffix(o.k.Lock, "{id}:lock")
	inboxW, inboxY, inboxKey := prefix+"inbox:p1:", prefix+"inbox:p3:", prefix+"inbox:p2:{id}"
	t.Cleanup(func() { o.c.Del(ctx, inboxKey) })
	sub, next := subscribed(t, o.c, inboxW, inboxY)
	queue := func(token, inbox string) {
		t.Helper()
		req := backend.AcquireRequest{ID: "id", Token: token, TTL: time.Minute, Wait: true, WaiterTTL: time.Minute}
		k, a := NewConsts(100, 100, Classic).Acquire(o.k, req, inbox)
		if err := o.eval(Acquire, k, a).Err(); err != nil {
			t.Fatal(err)
		}
	}
	step := func(s Script, k, a []string) {
		t.Helper()
		if err := o.eval(s, k, a).Err(); err != nil {
			t.Fatal(err)
		}
	}

	o.acquire("H", false)
	queue("W", InboxAddress(InboxClassic, inboxW))
	queue("X", InboxAddress(InboxKey, inboxKey))
	queue("Y", InboxAddress(InboxClassic, inboxY))
	if r := o.records(); r["W"] != "60000:P"+inboxW || r["X"] != "60000:K"+inboxKey || r["Y"] != "60000:P"+inboxY {
		t.Fatalf("records = %v, want each waiter's inbox", r)
	}

	cs := NewConsts(100, 100, Classic)

	// H releases and hands off to W: W's inbox channel carries "2:id" and
	// the grant "g<fence>,60000,<µs>:W"; X, the head now, is told through
	// its inbox key: "2:id<ms>:X".
	k, a := o.releaseCall(cs, "H")
	step(Release, k, a)
	if m := next("H's release"); m.Channel != inboxW || !strings.HasPrefix(m.Payload, "2:idg") || !strings.Contains(m.Payload, ",60000,") || !strings.HasSuffix(m.Payload, ":W") {
		t.Fatalf("H's release sent %q on %q, want \"2:idg<fence>,60000,<µs>:W\" on W's inbox channel", m.Payload, m.Channel)
	}
	if g := o.acquireTTL("W", time.Minute, true); !g.Acquired {
		t.Fatalf("W after the hand-off: %+v, want it holding", g)
	}
	msgs := o.c.LRange(ctx, inboxKey, 0, -1).Val()
	if len(msgs) != 1 || !strings.HasPrefix(msgs[0], "2:id") || !strings.HasSuffix(msgs[0], ":X") || strings.HasPrefix(msgs[0], "2:id:") {
		t.Fatalf("inbox key after W's grant = %q, want one \"2:id<ms>:X\"", msgs)
	}
	if ttl := o.c.PTTL(ctx, inboxKey).Val(); ttl <= 0 || ttl > 60*time.Second {
		t.Fatalf("inbox key's TTL = %v, want (0, 60s]", ttl)
	}

	// X's inbox key is of another type: W's release still hands off to X,
	// whose wake-up is dropped; Y, the head now, is told on its channel.
	o.c.Del(ctx, inboxKey)
	o.c.Set(ctx, inboxKey, "not a list", time.Minute)
	k, a = o.releaseCall(cs, "W")
	step(Release, k, a)
	if holder, _ := o.holder(); holder != "X" {
		t.Fatalf("lock = %q after W's release, want X: a refused wake-up does not undo the grant", holder)
	}
	if v := o.c.Get(ctx, inboxKey).Val(); v != "not a list" {
		t.Fatalf("X's inbox key = %q, want it untouched", v)
	}
	if m := next("W's release, to Y"); m.Channel != inboxY || m.Payload != "2:id60000:Y" {
		t.Fatalf("W's release sent %q on %q, want \"2:id60000:Y\" on Y's inbox channel", m.Payload, m.Channel)
	}

	// X releases: Y is granted on its inbox channel.
	k, a = o.releaseCall(cs, "X")
	step(Release, k, a)
	if m := next("X's release"); m.Channel != inboxY || !strings.HasPrefix(m.Payload, "2:idg") || !strings.HasSuffix(m.Payload, ":Y") {
		t.Fatalf("X's release sent %q on %q, want \"2:idg...:Y\" on Y's inbox channel", m.Payload, m.Channel)
	}
	quiet(t, sub, "after X's release")
}
