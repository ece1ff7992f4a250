package scripts

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
// a heartbeat (the holder's remaining TTL). A release wakes the head
// (":<token>"); an enqueue behind a head, and a grant with nobody left,
// publish nothing.
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
