package scripts

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/internal/wakefns"
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

// Every step that changes the head of a held lock tells the new head when
// the lease ends ("<ms>:<token>"): the grant to the head with waiters left
// (the new lease's TTL), the head's Leave and the purge of a dead head by
// a heartbeat (the holder's remaining TTL). A release wakes a head that
// takes no hand-off (":<token>"); an enqueue behind a head, and a grant
// with nobody left, publish nothing.
func TestHeadChangeWhileHeldTellsNewHead(t *testing.T) {
	o := newOps(t, "id")
	ctx := context.Background()
	sub, nextMsg := subscribed(t, o.c, o.k.Channel)
	next := func(what string) string { return nextMsg(what).Payload }
	told := func(what, payload, token string, max time.Duration) {
		t.Helper()
		ms, tok, _ := strings.Cut(payload, ":")
		n, err := strconv.Atoi(ms)
		if err != nil || tok != token || n < 1 || time.Duration(n)*time.Millisecond > max {
			t.Fatalf("%s: payload %q, want \"<1..%d>:%s\"", what, payload, max.Milliseconds(), token)
		}
	}
	o.acquire("H", false)
	o.acquire("W", true)
	o.acquire("X", true)
	o.acquire("Y", true)
	// Waiters of an older version (no records): woken, never granted.
	o.legacy("W", "X", "Y")
	k, a := NewConsts(100, 100, Classic).Release(o.k, "H")
	if err := o.eval(Release, k, a).Err(); err != nil {
		t.Fatal(err)
	}
	if p := next("release"); p != ":W" {
		t.Fatalf("release: payload %q, want \":W\"", p)
	}
	o.acquire("W", true) // granted: X is the head now
	told("the grant to W", next("the grant to W"), "X", time.Minute)
	o.acquire("Z", true) // behind the head: nobody is told
	o.legacy("Z")
	k, a = NewConsts(100, 100, Classic).Leave(o.k, "X")
	if err := o.eval(Leave, k, a).Err(); err != nil {
		t.Fatal(err)
	}
	told("X's Leave", next("X's Leave"), "Y", time.Minute)
	// Y's entry dies: a heartbeat of Z purges it, and tells Z.
	if err := o.c.ZAdd(ctx, o.k.Deadlines, redis.Z{Score: 1, Member: "Y"}).Err(); err != nil {
		t.Fatal(err)
	}
	k, a = NewConsts(100, 100, Classic).Heartbeat(o.k, []string{"Z"}, time.Minute)
	if err := o.eval(Heartbeat, k, a).Err(); err != nil {
		t.Fatal(err)
	}
	told("the purge of Y by a heartbeat", next("the purge of Y"), "Z", time.Minute)
	// W releases, Z is woken and granted with nobody left: one message.
	k, a = NewConsts(100, 100, Classic).Release(o.k, "W")
	if err := o.eval(Release, k, a).Err(); err != nil {
		t.Fatal(err)
	}
	if p := next("W's release"); p != ":Z" {
		t.Fatalf("W's release: payload %q, want \":Z\"", p)
	}
	o.acquire("Z", true)
	if err := sub.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.ReceiveTimeout(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	} else if _, ok := m.(*redis.Pong); !ok {
		t.Fatalf("after an enqueue behind the head and a grant with nobody left: got %v, want nothing (the PONG)", m)
	}
}

// A release with live waiters hands the lock off to the head in the same
// step: the lock is the head's, with the TTL it queued with and a higher
// fence; its entry is gone; its wake-up carries the grant and the next
// head is told the new lease's TTL. A dead head is purged, not granted.
func TestReleaseHandsOff(t *testing.T) {
	o := newOps(t, "id")
	ctx := context.Background()
	_, nextMsg := subscribed(t, o.c, o.k.Channel)
	o.acquireTTL("H", time.Minute, false)
	before, _ := o.c.HGet(ctx, o.k.Counters, "fence").Uint64()
	o.acquireTTL("W", 1500*time.Millisecond, true)
	o.acquireTTL("X", time.Minute, true)
	o.acquireTTL("Y", time.Minute, true)
	release := func(tok string) {
		t.Helper()
		k, a := NewConsts(100, 100, Classic).Release(o.k, tok)
		if err := o.eval(Release, k, a).Err(); err != nil {
			t.Fatal(err)
		}
	}
	release("H")
	p := nextMsg("H's release").Payload
	grant := wakefns.Parse("id", p)
	if grant.Token != "W" || grant.Grant == nil || grant.Grant.TTL != 1500*time.Millisecond || grant.Grant.Fence <= before {
		t.Fatalf("H's release sent %q, want W's grant with TTL 1.5s and a fence above %d", p, before)
	}
	if now := time.Now(); grant.Grant.StoreTime.Before(now.Add(-time.Minute)) || grant.Grant.StoreTime.After(now.Add(time.Minute)) {
		t.Fatalf("the grant's StoreTime %v is not the server's clock (now %v)", grant.Grant.StoreTime, now)
	}
	if holder := o.c.Get(ctx, o.k.Lock).Val(); holder != "W" {
		t.Fatalf("lock = %q after the hand-off, want W", holder)
	}
	if ttl := o.c.PTTL(ctx, o.k.Lock).Val(); ttl <= 0 || ttl > 1500*time.Millisecond {
		t.Fatalf("lock TTL %v after the hand-off, want (0, 1.5s]", ttl)
	}
	if f, _ := o.c.HGet(ctx, o.k.Counters, "fence").Uint64(); f != grant.Grant.Fence {
		t.Fatalf("fence key %d, want the grant's %d", f, grant.Grant.Fence)
	}
	if _, ok := o.records()["W"]; ok || o.c.ZScore(ctx, o.k.Queue, "W").Err() == nil {
		t.Fatal("W's entry is still queued after the hand-off")
	}
	if p := nextMsg("the next head").Payload; p != "1500:X" {
		t.Fatalf("the next head was told %q, want \"1500:X\"", p)
	}
	// X's entry dies: W's release purges it and hands off to Y.
	if err := o.c.ZAdd(ctx, o.k.Deadlines, redis.Z{Score: 1, Member: "X"}).Err(); err != nil {
		t.Fatal(err)
	}
	release("W")
	if w := wakefns.Parse("id", nextMsg("W's release").Payload); w.Token != "Y" || w.Grant == nil || w.Grant.Fence <= grant.Grant.Fence {
		t.Fatalf("W's release sent %+v, want Y's grant with a fence above %d", w, grant.Grant.Fence)
	}
	if holder := o.c.Get(ctx, o.k.Lock).Val(); holder != "Y" {
		t.Fatalf("lock = %q, want Y: a dead head is purged, not granted", holder)
	}
}
