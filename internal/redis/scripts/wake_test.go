package scripts

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/wakeup"
)

// subscribed subscribes to channels, waits for the confirmations, and
// returns the subscription and a function that returns its next message,
// failing the test after 5 s.
func subscribed(t *testing.T, c *redis.Client, channels ...string) (*redis.PubSub, func(what string) *redis.Message) {
	ctx := context.Background()
	sub := c.Subscribe(ctx, channels...)
	t.Cleanup(func() { sub.Close() })
	for range channels {
		if _, err := sub.ReceiveTimeout(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return sub, func(what string) *redis.Message {
		t.Helper()
		m, err := sub.ReceiveTimeout(ctx, 5*time.Second)
		msg, ok := m.(*redis.Message)
		if err != nil || !ok {
			t.Fatalf("%s: got %v, %v; want a wake-up", what, m, err)
		}
		return msg
	}
}

// wakes subscribes to the test's inbox channel and returns the
// subscription and a function that returns the next wake-up on it, for the
// test's id, failing the test after 5 s or on any other message.
func (o *opsScripts) wakes() (*redis.PubSub, func(what string) backend.Wake) {
	o.t.Helper()
	sub, next := subscribed(o.t, o.c, o.inbox)
	return sub, func(what string) backend.Wake {
		o.t.Helper()
		m := next(what)
		w, ok := wakeup.ParseInbox(m.Payload)
		if !ok || w.ID != o.id {
			o.t.Fatalf("%s: message %q on the inbox, want a wake-up of %q", what, m.Payload, o.id)
		}
		return w
	}
}

// quiet fails the test unless sub received nothing more: a PING's PONG is
// the next thing it reads.
func quiet(t *testing.T, sub *redis.PubSub, what string) {
	t.Helper()
	ctx := context.Background()
	if err := sub.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.ReceiveTimeout(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	} else if _, ok := m.(*redis.Pong); !ok {
		t.Fatalf("%s: got %v, want nothing (the PONG)", what, m)
	}
}

// Every step that changes the head of a held lock tells the new head when
// the lease ends ("<ms>:<token>"): the grant to the head with waiters left
// (the new lease's TTL), the head's Leave and the purge of a dead head by
// a heartbeat (the holder's remaining TTL). An enqueue behind a head, and a
// grant with nobody left, send nothing.
func TestHeadChangeWhileHeldTellsNewHead(t *testing.T) {
	o := newOps(t, "id")
	ctx := context.Background()
	sub, next := o.wakes()
	told := func(what string, w backend.Wake, token string, max time.Duration) {
		t.Helper()
		if w.Token != token || w.Grant != nil || w.HolderTTL < time.Millisecond || w.HolderTTL > max {
			t.Fatalf("%s: %+v, want %s told a holder TTL within (0, %v]", what, w, token, max)
		}
	}
	o.acquire("H", false)
	o.acquire("W", true)
	o.acquire("X", true)
	o.acquire("Y", true)
	// H's lease ends with no step (as by its TTL): W's own acquire takes
	// the lock, and X, the head now, is told the new lease's TTL.
	if err := o.c.Del(ctx, o.k.Lock).Err(); err != nil {
		t.Fatal(err)
	}
	if g := o.acquireTTL("W", time.Minute, true); !g.Acquired {
		t.Fatalf("W after the lease ended: %+v, want a grant", g)
	}
	if w := next("the grant to W"); w != (backend.Wake{ID: "id", Token: "X", HolderTTL: time.Minute}) {
		t.Fatalf("the grant to W sent %+v, want X told 1m", w)
	}
	o.acquire("Z", true) // behind the head: nobody is told
	k, a := NewConsts(100, 100, Classic).Leave(o.k, "X")
	if err := o.eval(Leave, k, a).Err(); err != nil {
		t.Fatal(err)
	}
	told("X's Leave", next("X's Leave"), "Y", time.Minute)
	// Y's entry dies: a heartbeat of Z purges it, and tells Z.
	o.kill("Y")
	k, a = NewConsts(100, 100, Classic).Heartbeat(o.k, []string{"Z"}, time.Minute)
	if err := o.eval(Heartbeat, k, a).Err(); err != nil {
		t.Fatal(err)
	}
	told("the purge of Y by a heartbeat", next("the purge of Y"), "Z", time.Minute)
	// W releases: Z is granted, with nobody left: one message.
	k, a = o.releaseCall(NewConsts(100, 100, Classic), "W")
	if err := o.eval(Release, k, a).Err(); err != nil {
		t.Fatal(err)
	}
	w := next("W's release")
	if w.Token != "Z" || w.Grant == nil {
		t.Fatalf("W's release sent %+v, want Z's grant", w)
	}
	if holder, f := o.holder(); holder != "Z" || f != w.Grant.Fence {
		t.Fatalf("lock = %q, fence %d after W's release, want Z with the grant's fence %d", holder, f, w.Grant.Fence)
	}
	quiet(t, sub, "after an enqueue behind the head and a grant with nobody left")
}

// A release with live waiters hands the lock off to the head in the same
// step: the lock is the head's, with the TTL it queued with and a higher
// fence; its entry is gone; its wake-up carries the grant and the next
// head is told the new lease's TTL. A dead head is purged, not granted.
func TestReleaseHandsOff(t *testing.T) {
	o := newOps(t, "id")
	ctx := context.Background()
	_, next := o.wakes()
	before := o.acquireTTL("H", time.Minute, false).Fence
	o.acquireTTL("W", 1500*time.Millisecond, true)
	o.acquireTTL("X", time.Minute, true)
	o.acquireTTL("Y", time.Minute, true)
	release := func(tok string) {
		t.Helper()
		k, a := o.releaseCall(NewConsts(100, 100, Classic), tok)
		if err := o.eval(Release, k, a).Err(); err != nil {
			t.Fatal(err)
		}
	}
	release("H")
	grant := next("H's release")
	if grant.Token != "W" || grant.Grant == nil || grant.Grant.TTL != 1500*time.Millisecond || grant.Grant.Fence <= before {
		t.Fatalf("H's release sent %+v, want W's grant with TTL 1.5s and a fence above %d", grant, before)
	}
	if now := time.Now(); grant.Grant.StoreTime.Before(now.Add(-time.Minute)) || grant.Grant.StoreTime.After(now.Add(time.Minute)) {
		t.Fatalf("the grant's StoreTime %v is not the server's clock (now %v)", grant.Grant.StoreTime, now)
	}
	if holder, f := o.holder(); holder != "W" || f != grant.Grant.Fence {
		t.Fatalf("lock = %q, fence %d after the hand-off, want W with the grant's fence %d", holder, f, grant.Grant.Fence)
	}
	if ttl := o.c.PTTL(ctx, o.k.Lock).Val(); ttl <= 0 || ttl > 1500*time.Millisecond {
		t.Fatalf("lock TTL %v after the hand-off, want (0, 1.5s]", ttl)
	}
	if f, _ := o.c.Get(ctx, o.k.Fence).Uint64(); f != grant.Grant.Fence {
		t.Fatalf("the slot's fence key %d, want the grant's %d", f, grant.Grant.Fence)
	}
	if _, ok := o.records()["W"]; ok || o.c.ZScore(ctx, o.k.Queue, "W").Err() == nil {
		t.Fatal("W's entry is still queued after the hand-off")
	}
	if w := next("the next head"); w != (backend.Wake{ID: "id", Token: "X", HolderTTL: 1500 * time.Millisecond}) {
		t.Fatalf("the next head was told %+v, want X told 1.5s", w)
	}
	// X's entry dies: W's release purges it and hands off to Y.
	o.kill("X")
	release("W")
	if w := next("W's release"); w.Token != "Y" || w.Grant == nil || w.Grant.Fence <= grant.Grant.Fence {
		t.Fatalf("W's release sent %+v, want Y's grant with a fence above %d", w, grant.Grant.Fence)
	}
	if holder, _ := o.holder(); holder != "Y" {
		t.Fatalf("lock = %q, want Y: a dead head is purged, not granted", holder)
	}
}
