package scripts

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// An enqueue behind a held lock (the contended path, which learns from
// ZADD NX whether the requester has an entry): a live waiter that asks
// again keeps its ticket and gets a fresh deadline; one past its deadline
// is dead, and queues anew at the tail with a new ticket.
func TestEnqueueBehindHeldLock(t *testing.T) {
	o := newOps(t, "id")
	o.acquireTTL("H", time.Minute, false)
	w1 := o.acquireTTL("W1", time.Minute, true)
	w2 := o.acquireTTL("W2", time.Minute, true)
	if !w1.Queued || !w1.Head || !w2.Queued || w2.Head || w2.Ticket <= w1.Ticket {
		t.Fatalf("W1 %+v, W2 %+v: want both queued, W1 the head, tickets increasing", w1, w2)
	}
	before := o.deadline("W1")
	again := o.acquireTTL("W1", 2*time.Minute, true)
	if !again.Queued || !again.Head || again.Ticket != w1.Ticket || again.HolderTTL <= 0 {
		t.Fatalf("W1 asking again = %+v, want queued, the head, its ticket %d kept, the holder's TTL", again, w1.Ticket)
	}
	if d := o.deadline("W1"); d < before {
		t.Fatalf("W1's deadline went back: %d -> %d", before, d)
	}
	o.kill("W1")
	anew := o.acquireTTL("W1", time.Minute, true)
	if !anew.Queued || anew.Head || anew.Ticket <= w2.Ticket {
		t.Fatalf("W1 past its deadline, asking again = %+v; want queued anew behind W2 (ticket above %d), not the head", anew, w2.Ticket)
	}
	if d := o.deadline("W1"); d <= 1 {
		t.Fatalf("W1's record after queueing anew has deadline %d, want a live one", d)
	}
}

// A full queue (at max waiters) refuses a new waiter, unless a bounded
// sweep of its first entries finds dead ones; a waiter that is queued
// already is never refused.
func TestFullQueueSweep(t *testing.T) {
	o := newOps(t, "id")
	cs := NewConsts(3, 100, Classic)
	acquire := func(token string) (backend.Grant, error) {
		req := backend.AcquireRequest{ID: "id", Token: token, TTL: time.Minute, Wait: true, WaiterTTL: time.Minute}
		k, a := o.acquireCall(cs, req)
		r, err := o.eval(Acquire, k, a).Int64Slice()
		if err != nil {
			return backend.Grant{}, err
		}
		return ParseAcquire(r)
	}
	o.acquireTTL("H", time.Minute, false)
	for _, tok := range []string{"A", "B", "C"} {
		if g, err := acquire(tok); err != nil || !g.Queued {
			t.Fatalf("%s = %+v, %v; want queued", tok, g, err)
		}
	}
	full := func(err error) bool { return err != nil && errors.Is(MapError(err.Error()), backend.ErrQueueFull) }
	if _, err := acquire("D"); !full(err) {
		t.Fatalf("D on a full queue: %v, want LOCKQUEUEFULL", err)
	}
	if g, err := acquire("B"); err != nil || !g.Queued {
		t.Fatalf("B, queued already, on a full queue = %+v, %v; want queued", g, err)
	}
	o.kill("B")
	g, err := acquire("D")
	if err != nil || !g.Queued {
		t.Fatalf("D on a full queue with a dead entry = %+v, %v; want queued (the sweep removed B)", g, err)
	}
	if n := o.c.ZCard(context.Background(), o.k.Queue).Val(); n != 3 {
		t.Fatalf("queue holds %d entries, want 3 (A, C, D)", n)
	}
	if _, ok := o.records()["B"]; ok {
		t.Fatal("B's record is left after the sweep")
	}
}

// A heartbeat sweeps the dead entries right behind the first live waiter
// it lists, wherever that waiter stands: with the queue A, B (dead), C,
// D (dead), E under a held lock, C's heartbeat removes D, and A's
// heartbeat then removes B; the live waiters all stay, in their order.
func TestHeartbeatSweepsBehindLiveWaiter(t *testing.T) {
	o := newOps(t, "id")
	cs := NewConsts(100, 100, Classic)
	o.acquireTTL("H", time.Minute, false)
	for _, tok := range []string{"A", "B", "C", "D", "E"} {
		if g := o.acquireTTL(tok, time.Minute, true); !g.Queued {
			t.Fatalf("%s = %+v, want queued", tok, g)
		}
	}
	o.kill("B")
	o.kill("D")
	heartbeat := func(tok string) {
		t.Helper()
		k, a := cs.Heartbeat(o.k, []string{tok}, time.Minute)
		r, err := o.eval(Heartbeat, k, a).Int64Slice()
		if err != nil || len(r) != 1 || !ParseHeartbeat(r[0]).Queued {
			t.Fatalf("heartbeat of %s = %v, %v; want it queued", tok, r, err)
		}
	}
	queue := func() []string {
		t.Helper()
		q, err := o.c.ZRange(context.Background(), o.k.Queue, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	heartbeat("C")
	// B, ahead of C, may stay: the sweep need not look there.
	if got := strings.Replace(fmt.Sprint(queue()), "B ", "", 1); got != "[A C E]" {
		t.Fatalf("queue after C's heartbeat = %v, want [A C E] with or without B (D, dead behind C, swept)", queue())
	}
	if _, ok := o.records()["D"]; ok {
		t.Fatal("D's record is left after the sweep")
	}
	heartbeat("A")
	if got, want := fmt.Sprint(queue()), "[A C E]"; got != want {
		t.Fatalf("queue after A's heartbeat = %s, want %s (B, dead behind A, swept)", got, want)
	}
	if _, ok := o.records()["B"]; ok {
		t.Fatal("B's record is left after the sweep")
	}
}
