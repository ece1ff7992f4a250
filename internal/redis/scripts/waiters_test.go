package scripts

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// acquireTTL runs acquire for token with lease TTL ttl and returns the
// grant.
func (o *opsScripts) acquireTTL(token string, ttl time.Duration, wait bool) backend.Grant {
	o.t.Helper()
	req := backend.AcquireRequest{ID: "id", Token: token, TTL: ttl, Wait: wait, WaiterTTL: time.Minute}
	k, a := o.acquireCall(NewConsts(100, 100, Classic), req)
	r, err := o.eval(Acquire, k, a).Int64Slice()
	if err != nil {
		o.t.Fatal(err)
	}
	g, err := ParseAcquire(r)
	if err != nil {
		o.t.Fatal(err)
	}
	return g
}

// records returns the waiter records of the test's id, without their
// deadlines: "<lease TTL ms>:<inbox>" per token.
func (o *opsScripts) records() map[string]string {
	out := map[string]string{}
	for tok, v := range o.c.HGetAll(context.Background(), o.k.Waiters).Val() {
		_, rest, _ := strings.Cut(v, ":")
		out[tok] = rest
	}
	return out
}

// A queued token has a waiter record ("<deadline>:<lease TTL ms>:<inbox>") exactly
// while it is in the queue: written by the enqueue, rewritten by a
// retry with another TTL, removed by a grant, a leave, the purge of a dead
// head by any step and a heartbeat that finds the entry dead. The record
// key expires with the queue.
func TestWaiterRecordFollowsTheQueue(t *testing.T) {
	o := newOps(t, "id")
	ctx := context.Background()
	want := func(what string, recs map[string]string) {
		t.Helper()
		got := o.records()
		if len(got) != len(recs) {
			t.Fatalf("%s: records %v, want %v", what, got, recs)
		}
		for k, v := range recs {
			if got[k] != v {
				t.Fatalf("%s: records %v, want %v", what, got, recs)
			}
		}
		q := o.c.ZRange(ctx, o.k.Queue, 0, -1).Val()
		if len(q) != len(recs) {
			t.Fatalf("%s: queue %v, records %v: want one record per entry", what, q, got)
		}
		if len(recs) > 0 {
			if d := o.c.PTTL(ctx, o.k.Waiters).Val(); d <= 0 || d > QueueTTLFactor*time.Minute {
				t.Fatalf("%s: records key PTTL %v, want within (0, %v]", what, d, QueueTTLFactor*time.Minute)
			}
		}
	}
	kill := o.kill
	cs := NewConsts(100, 100, Classic)
	inbox := InboxAddress(InboxClassic, o.inbox)
	rec := func(ttl time.Duration) string { return Millis(ttl) + ":" + inbox }
	m1, m2, s15 := rec(time.Minute), rec(2*time.Minute), rec(1500*time.Millisecond)

	o.acquireTTL("H", time.Minute, false)
	o.acquireTTL("W1", time.Minute, true)
	want("W1 queued", map[string]string{"W1": m1})
	o.acquireTTL("W1", 2*time.Minute, true)
	want("W1 retried with another TTL", map[string]string{"W1": m2})
	for _, tok := range []string{"W2", "W3", "W4", "W5"} {
		o.acquireTTL(tok, 1500*time.Millisecond, true)
	}
	want("5 queued", map[string]string{"W1": m2, "W2": s15, "W3": s15, "W4": s15, "W5": s15})

	k, a := cs.Leave(o.k, "W2")
	if err := o.eval(Leave, k, a).Err(); err != nil {
		t.Fatal(err)
	}
	want("W2 left", map[string]string{"W1": m2, "W3": s15, "W4": s15, "W5": s15})

	kill("W3")
	k, a = cs.Heartbeat(o.k, []string{"W3", "W4"}, time.Minute)
	if err := o.eval(Heartbeat, k, a).Err(); err != nil {
		t.Fatal(err)
	}
	want("W3 dead, found by a heartbeat", map[string]string{"W1": m2, "W4": s15, "W5": s15})

	k, a = o.releaseCall(cs, "H")
	if err := o.eval(Release, k, a).Err(); err != nil {
		t.Fatal(err)
	}
	if g := o.acquireTTL("W1", 2*time.Minute, true); !g.Acquired {
		t.Fatalf("W1 after H's release: %+v, want a grant", g)
	}
	want("W1 granted", map[string]string{"W4": s15, "W5": s15})

	kill("W4")
	o.acquireTTL("W6", time.Minute, true) // the lock is held: no purge
	want("W4 dead at the head, left by an enqueue", map[string]string{"W4": s15, "W5": s15, "W6": m1})

	kill("W5")
	kill("W6")
	k, a = o.releaseCall(cs, "W1")
	if err := o.eval(Release, k, a).Err(); err != nil {
		t.Fatal(err)
	}
	want("W4, W5 and W6 purged by a release", map[string]string{})
	if n := o.c.Exists(ctx, o.k.Waiters).Val(); n != 0 {
		t.Fatalf("the records key exists with no waiter queued")
	}
}
