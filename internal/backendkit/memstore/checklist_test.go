package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/memstore"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// The scenarios below drive one id, "x", through the backend interface with
// a ManualClock. Every scenario runs on a fresh Store, so fences and tickets
// both start at 1. Wake-ups are recorded by a subscriber on the Backend that
// queues every waiter. A second Backend of the same Store, with no waiter,
// must hear none of them: a wake-up reaches only the named waiter's process.

const (
	id        = "x"
	ttl       = 10 * time.Second
	waiterTTL = 5 * time.Second
)

var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

type env struct {
	ctx   context.Context
	clock *memstore.ManualClock
	store *memstore.Store
	b     backend.Backend

	mu    sync.Mutex
	wakes []backend.Wake
}

func newEnv(t *testing.T, opts memstore.Options) *env {
	t.Helper()
	e := &env{ctx: context.Background(), clock: memstore.NewManualClock(epoch)}
	opts.Clock = e.clock
	opts.NoHandOff = !handOff(opts)
	e.store = testkit.Must(memstore.NewStore(&opts))
	e.b = e.store.NewBackend()
	other := e.store.NewBackend()
	cancel, err := e.b.Subscribe(e.ctx, id, func(w backend.Wake) {
		e.mu.Lock()
		e.wakes = append(e.wakes, w)
		e.mu.Unlock()
	})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	cancelOther, err := other.Subscribe(e.ctx, id, func(w backend.Wake) {
		t.Errorf("a wake-up reached a process with no waiter: %+v", w)
	})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		cancelOther()
		other.Close()
		e.b.Close()
	})
	return e
}

// takeWakes returns the wake-ups delivered since the last call.
func (e *env) takeWakes() []backend.Wake {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.wakes
	e.wakes = nil
	return w
}

type op struct {
	desc string
	run  func(t *testing.T, e *env)
}

// Grant shorthands.
func granted(fence uint64, ttl time.Duration) backend.Grant {
	return backend.Grant{Acquired: true, Fence: fence, TTL: ttl}
}

func queued(ticket uint64, head bool, holderTTL time.Duration) backend.Grant {
	return backend.Grant{Queued: true, Ticket: ticket, Head: head, HolderTTL: holderTTL}
}

func refused(holderTTL time.Duration) backend.Grant {
	return backend.Grant{HolderTTL: holderTTL}
}

func acquireOp(tok string, lease time.Duration, wait bool, want backend.Grant, wantErr error) op {
	return op{fmt.Sprintf("Acquire(%s, ttl=%v, wait=%v)", tok, lease, wait), func(t *testing.T, e *env) {
		g, err := e.b.Acquire(e.ctx, backend.AcquireRequest{ID: id, Token: tok, TTL: lease, Wait: wait, WaiterTTL: waiterTTL})
		if !errors.Is(err, wantErr) || (err == nil) != (wantErr == nil) {
			t.Fatalf("err = %v, want %v", err, wantErr)
		}
		if err == nil && g != want {
			t.Fatalf("grant = %+v, want %+v", g, want)
		}
	}}
}

// try is an Acquire without Wait; wait is an Acquire with Wait.
func try(tok string, want backend.Grant) op  { return acquireOp(tok, ttl, false, want, nil) }
func wait(tok string, want backend.Grant) op { return acquireOp(tok, ttl, true, want, nil) }

func release(tok string, wantErr error) op {
	return op{fmt.Sprintf("Release(%s)", tok), func(t *testing.T, e *env) {
		if err := e.b.Release(e.ctx, id, tok); !errors.Is(err, wantErr) || (err == nil) != (wantErr == nil) {
			t.Fatalf("err = %v, want %v", err, wantErr)
		}
	}}
}

func extend(tok string, d time.Duration, wantErr error) op {
	return op{fmt.Sprintf("Extend(%s, %v)", tok, d), func(t *testing.T, e *env) {
		if err := e.b.Extend(e.ctx, id, tok, d); !errors.Is(err, wantErr) || (err == nil) != (wantErr == nil) {
			t.Fatalf("err = %v, want %v", err, wantErr)
		}
	}}
}

func leave(tok string) op {
	return op{fmt.Sprintf("Leave(%s)", tok), func(t *testing.T, e *env) {
		if err := e.b.Leave(e.ctx, id, tok); err != nil {
			t.Fatalf("err = %v, want nil (Leave is idempotent)", err)
		}
	}}
}

// beat heartbeats tok and expects r.
func beat(tok string, r backend.HeartbeatResult) op {
	return op{fmt.Sprintf("Heartbeat(%s)", tok), func(t *testing.T, e *env) {
		got, err := e.b.Heartbeat(e.ctx, []backend.Waiter{{ID: id, Token: tok}}, waiterTTL)
		if err != nil {
			t.Fatalf("err = %v", err)
		}
		if len(got) != 1 || got[0] != r {
			t.Fatalf("results = %+v, want [%+v]", got, r)
		}
	}}
}

var (
	alive = backend.HeartbeatResult{Queued: true}
	ready = backend.HeartbeatResult{Queued: true, Ready: true}
	gone  = backend.HeartbeatResult{}
)

func advance(d time.Duration) op {
	return op{fmt.Sprintf("Advance(%v)", d), func(t *testing.T, e *env) { e.clock.Advance(d) }}
}

func expireNow() op {
	return op{"ExpireNow", func(t *testing.T, e *env) { e.store.ExpireNow(id) }}
}

// holder checks the holder; "" means none.
func holder(tok string) op {
	return op{fmt.Sprintf("Holder == %q", tok), func(t *testing.T, e *env) {
		got, ok := e.store.Holder(id)
		if got != tok || ok != (tok != "") {
			t.Fatalf("Holder = %q, %v; want %q", got, ok, tok)
		}
	}}
}

// queue checks the live waiters in ticket order.
func queue(toks ...string) op {
	return op{fmt.Sprintf("Waiters == %v", toks), func(t *testing.T, e *env) {
		if got := e.store.Waiters(id); !slices.Equal(got, toks) {
			t.Fatalf("Waiters = %v, want %v", got, toks)
		}
	}}
}

// rawQueue checks the queue length, expired entries not yet purged included.
func rawQueue(n int) op {
	return op{fmt.Sprintf("raw queue length == %d", n), func(t *testing.T, e *env) {
		if got := e.store.QueueLen(id); got != n {
			t.Fatalf("raw queue length = %d, want %d", got, n)
		}
	}}
}

// woke checks the wake-ups delivered since the last check: one per token,
// in order, each naming the id and the head's token.
func woke(toks ...string) op {
	return op{fmt.Sprintf("woke %v", toks), func(t *testing.T, e *env) {
		var want []backend.Wake
		for _, tok := range toks {
			want = append(want, backend.Wake{ID: id, Token: tok})
		}
		if got := e.takeWakes(); !reflect.DeepEqual(got, want) {
			t.Fatalf("wake-ups = %+v, want %+v", got, want)
		}
	}}
}

// told checks the wake-ups delivered since the last check: one that tells
// tok it became the head of a held lock, whose holder has holderTTL left.
func told(tok string, holderTTL time.Duration) op {
	return op{fmt.Sprintf("told %s (holder TTL %v)", tok, holderTTL), func(t *testing.T, e *env) {
		want := []backend.Wake{{ID: id, Token: tok, HolderTTL: holderTTL}}
		if got := e.takeWakes(); !reflect.DeepEqual(got, want) {
			t.Fatalf("wake-ups = %+v, want %+v", got, want)
		}
	}}
}

func length(n int) op {
	return op{fmt.Sprintf("Len == %d", n), func(t *testing.T, e *env) {
		if got := e.store.Len(); got != n {
			t.Fatalf("Len = %d, want %d", got, n)
		}
	}}
}

func TestChecklist(t *testing.T) {
	hour := time.Hour
	tests := []struct {
		name string
		opts memstore.Options
		ops  []op
	}{
		{name: "1 grant on a free id", ops: []op{
			length(0),
			try("A", granted(1, ttl)),
			holder("A"), queue(), length(1), woke(),
			release("A", nil),
			holder(""), length(0), woke(),
		}},
		{name: "1 grant takes the next fence, strictly increasing", ops: []op{
			try("A", granted(1, ttl)), release("A", nil),
			try("B", granted(2, ttl)), advance(ttl),
			try("C", granted(3, ttl)), expireNow(),
			wait("D", granted(4, ttl)),
		}},
		{name: "1 retry by the holder is a no-op with the remaining TTL", ops: []op{
			try("A", granted(1, ttl)),
			advance(3 * time.Second),
			try("A", granted(1, 7*time.Second)),
			wait("A", granted(1, 7*time.Second)),
			acquireOp("A", hour, true, granted(1, 7*time.Second), nil),
			holder("A"), queue(),
		}},
		{name: "1 retry by the holder is a no-op while others wait", ops: []op{
			try("A", granted(1, ttl)),
			wait("B", queued(1, true, ttl)),
			wait("A", granted(1, ttl)),
			queue("B"), holder("A"),
		}},
		{name: "1 an expired lease is free", ops: []op{
			try("A", granted(1, ttl)),
			advance(ttl - time.Nanosecond),
			try("B", refused(time.Nanosecond)),
			advance(time.Nanosecond),
			holder(""),
			try("B", granted(2, ttl)),
			try("A", refused(ttl)),
		}},
		{name: "2 waiters queue in ticket order and keep their ticket", ops: []op{
			try("A", granted(1, ttl)),
			wait("B", queued(1, true, ttl)),
			wait("C", queued(2, false, ttl)),
			advance(time.Second),
			wait("D", queued(3, false, ttl-time.Second)),
			wait("C", queued(2, false, ttl-time.Second)),
			queue("B", "C", "D"),
			release("A", nil), woke("B"),
			wait("C", queued(2, false, 0)),
			wait("B", granted(2, ttl)), queue("C", "D"), told("C", ttl),
			release("B", nil), woke("C"),
			wait("C", granted(3, ttl)), told("D", ttl),
			release("C", nil), woke("D"),
			try("D", granted(4, ttl)),
			release("D", nil), woke(),
			length(0),
		}},
		{name: "2 without Wait nothing is enqueued", ops: []op{
			try("A", granted(1, ttl)),
			try("B", refused(ttl)),
			queue(), rawQueue(0),
			wait("C", queued(1, true, ttl)),
			try("C", queued(1, true, ttl)),
		}},
		{name: "1 a newcomer cannot jump the queue", ops: []op{
			try("A", granted(1, ttl)),
			wait("B", queued(1, true, ttl)),
			release("A", nil), woke("B"),
			try("N", refused(0)),
			wait("N", queued(2, false, 0)),
			try("B", granted(2, ttl)),
			queue("N"), holder("B"),
		}},
		{name: "2 a full queue returns ErrQueueFull and enqueues nothing", opts: memstore.Options{MaxWaiters: 2}, ops: []op{
			try("A", granted(1, ttl)),
			wait("B", queued(1, true, ttl)),
			wait("C", queued(2, false, ttl)),
			acquireOp("D", ttl, true, backend.Grant{}, backend.ErrQueueFull),
			queue("B", "C"),
			wait("C", queued(2, false, ttl)),
			try("D", refused(ttl)),
			leave("B"),
			wait("D", queued(3, false, ttl)),
			queue("C", "D"),
		}},
		{name: "3 release by a non-holder returns ErrNotHeld and changes nothing", ops: []op{
			release("A", backend.ErrNotHeld), length(0),
			try("A", granted(1, ttl)),
			wait("B", queued(1, true, ttl)),
			release("B", backend.ErrNotHeld),
			release("", backend.ErrNotHeld),
			holder("A"), queue("B"), woke(),
			release("A", nil), woke("B"),
			release("A", backend.ErrNotHeld), woke(),
		}},
		{name: "3 release after expiry returns ErrNotHeld", ops: []op{
			try("A", granted(1, ttl)),
			advance(ttl),
			release("A", backend.ErrNotHeld),
			length(0),
			try("A", granted(2, ttl)), expireNow(),
			release("A", backend.ErrNotHeld),
		}},
		{name: "4 extend sets a new expiry and keeps the fence", ops: []op{
			try("A", granted(1, ttl)),
			advance(8 * time.Second),
			extend("A", ttl, nil),
			try("A", granted(1, ttl)),
			advance(9 * time.Second),
			holder("A"),
			extend("A", time.Second, nil),
			try("A", granted(1, time.Second)),
		}},
		{name: "4 extend never re-creates an expired lock", ops: []op{
			try("A", granted(1, ttl)),
			advance(ttl),
			extend("A", ttl, backend.ErrNotHeld),
			holder(""), length(0),
			try("B", granted(2, ttl)),
			expireNow(),
			extend("B", ttl, backend.ErrNotHeld),
			holder(""),
		}},
		{name: "4 extend by a non-holder returns ErrNotHeld and changes nothing", ops: []op{
			extend("A", ttl, backend.ErrNotHeld), length(0),
			try("A", granted(1, ttl)),
			advance(time.Second),
			extend("B", hour, backend.ErrNotHeld),
			try("A", granted(1, ttl-time.Second)),
		}},
		{name: "5 leave releases a grant that raced the cancel and wakes the next", ops: []op{
			try("A", granted(1, ttl)),
			wait("B", queued(1, true, ttl)),
			wait("C", queued(2, false, ttl)),
			release("A", nil), woke("B"),
			wait("B", granted(2, ttl)), told("C", ttl),
			leave("B"),
			holder(""), queue("C"), woke("C"),
			wait("C", granted(3, ttl)),
		}},
		{name: "5 leave of the head of a free lock wakes the new head", ops: []op{
			try("A", granted(1, ttl)),
			wait("B", queued(1, true, ttl)),
			wait("C", queued(2, false, ttl)),
			release("A", nil), woke("B"),
			leave("B"), woke("C"),
			queue("C"),
			leave("C"), woke(),
			leave("C"), leave("nobody"),
			length(0),
		}},
		{name: "5 leave of a waiter behind the head or under a held lock wakes nobody", ops: []op{
			try("A", granted(1, ttl)),
			wait("B", queued(1, true, ttl)),
			wait("C", queued(2, false, ttl)),
			leave("C"), queue("B"), woke(),
			leave("B"), queue(), woke(),
			holder("A"), length(1),
		}},
		{name: "6 a live waiter with heartbeats is never purged", ops: []op{
			acquireOp("A", hour, false, granted(1, hour), nil),
			wait("B", queued(1, true, hour)),
			advance(4 * time.Second), beat("B", alive),
			advance(4 * time.Second), beat("B", alive),
			advance(4 * time.Second), beat("B", alive),
			advance(4 * time.Second), beat("B", alive),
			wait("C", queued(2, false, hour-16*time.Second)),
			advance(4 * time.Second), beat("B", alive),
			advance(4*time.Second + time.Millisecond),
			queue("B"), rawQueue(2),
			wait("D", queued(3, false, hour-24*time.Second-time.Millisecond)),
			queue("B", "D"), rawQueue(2),
			release("A", nil), woke("B"),
			beat("B", ready), woke("B"),
		}},
		{name: "6 heartbeat never re-adds a waiter that is gone", ops: []op{
			try("A", granted(1, ttl)),
			wait("B", queued(1, true, ttl)),
			advance(waiterTTL),
			beat("B", gone),
			queue(), rawQueue(0),
			wait("C", queued(2, true, ttl-waiterTTL)),
			leave("C"),
			beat("C", gone),
			beat("nobody", gone),
			queue(),
		}},
		{name: "1 purge removes every expired waiter, not only the head", opts: memstore.Options{MaxWaiters: 2}, ops: []op{
			acquireOp("A", hour, false, granted(1, hour), nil),
			wait("B", queued(1, true, hour)),
			wait("C", queued(2, false, hour)),
			advance(3 * time.Second),
			beat("B", alive),
			advance(3 * time.Second), // C expired behind a live head
			queue("B"), rawQueue(2),
			wait("D", queued(3, false, hour-6*time.Second)),
			queue("B", "D"), rawQueue(2),
		}},
		{name: "1 purge is bounded by PurgeLimit per step", opts: memstore.Options{PurgeLimit: 2}, ops: []op{
			acquireOp("A", hour, false, granted(1, hour), nil),
			wait("W1", queued(1, true, hour)),
			wait("W2", queued(2, false, hour)),
			wait("W3", queued(3, false, hour)),
			wait("W4", queued(4, false, hour)),
			wait("W5", queued(5, false, hour)),
			wait("L", queued(6, false, hour)),
			advance(4 * time.Second), beat("L", alive), rawQueue(6),
			advance(2 * time.Second),
			queue("L"), rawQueue(6),
			try("N", refused(hour-6*time.Second)), rawQueue(4), told("W3", hour-6*time.Second),
			beat("L", alive), rawQueue(2), told("W5", hour-6*time.Second),
			wait("L", queued(6, true, hour-6*time.Second)), rawQueue(1),
			queue("L"), woke(),
		}},
		{name: "1 an expired entry beyond the purge limit is neither kept nor refreshed", opts: memstore.Options{PurgeLimit: 1}, ops: []op{
			acquireOp("A", hour, false, granted(1, hour), nil),
			wait("W0", queued(1, true, hour)),
			advance(time.Second),
			wait("W1", queued(2, false, hour-time.Second)),
			wait("L", queued(3, false, hour-time.Second)),
			advance(3500 * time.Millisecond), beat("L", alive),
			advance(1500 * time.Millisecond), // W0 and W1 expired, L live
			expireNow(), woke(), rawQueue(3),
			// The step purges W0 (the limit), finds its own entry expired
			// and removes it, so W1 joins again at the tail.
			wait("W1", queued(4, false, 0)),
			woke("L"), queue("L", "W1"), rawQueue(2),
			beat("W0", gone),
		}},
		{name: "7 a purge that removes the head of a free lock wakes the new head", ops: []op{
			try("A", granted(1, ttl)),
			wait("B", queued(1, true, ttl)),
			advance(3 * time.Second),
			wait("C", queued(2, false, ttl-3*time.Second)),
			release("A", nil), woke("B"),
			advance(3 * time.Second),
			try("N", refused(0)),
			woke("C"), queue("C"),
		}},
		{name: "7 heartbeat wakes the head of a free lock", ops: []op{
			try("A", granted(1, ttl)),
			wait("B", queued(1, true, ttl)),
			wait("C", queued(2, false, ttl)),
			expireNow(), woke(),
			holder(""),
			beat("C", alive), woke("B"),
			beat("B", ready), woke("B"),
		}},
		{name: "7 a lease found expired wakes the head", ops: []op{
			acquireOp("A", 4*time.Second, false, granted(1, 4*time.Second), nil),
			wait("B", queued(1, true, 4*time.Second)),
			advance(4 * time.Second), woke(),
			try("N", refused(0)),
			woke("B"),
			try("N", refused(0)),
			woke(),
		}},
		{name: "7 no wake-up without waiters; while the lock is held only a new head is told", ops: []op{
			try("A", granted(1, ttl)),
			release("A", nil), woke(),
			try("A", granted(2, ttl)),
			wait("B", queued(1, true, ttl)),
			beat("B", alive),
			extend("A", ttl, nil),
			wait("C", queued(2, false, ttl)),
			wait("D", queued(3, false, ttl)),
			woke(),
			advance(time.Second),
			leave("B"),
			told("C", ttl-time.Second),
		}},
		{name: "7 a heartbeat that purges the head of a held lock tells the new head", ops: []op{
			try("A", granted(1, ttl)),
			wait("B", queued(1, true, ttl)),
			advance(3 * time.Second),
			wait("C", queued(2, false, ttl-3*time.Second)),
			advance(3 * time.Second),
			beat("C", alive),
			told("C", ttl-6*time.Second),
			holder("A"), queue("C"),
		}},
		{name: "H2 nothing is left once every lock and waiter is gone", ops: []op{
			try("A", granted(1, ttl)),
			wait("B", queued(1, true, ttl)),
			wait("C", queued(2, false, ttl)),
			length(1),
			release("A", nil),
			wait("B", granted(2, ttl)),
			leave("C"),
			length(1),
			release("B", nil),
			length(0),
			try("D", granted(3, ttl)),
			wait("E", queued(3, true, ttl)),
			advance(ttl), // lease and waiter both ended, no step since
			length(0),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts)
			for i, o := range tc.ops {
				t.Logf("step %d: %s", i, o.desc)
				o.run(t, e)
			}
		})
	}
}

// handOffLimit marks the Options of a test of direct hand-off: the other
// tests drive the wake-then-acquire protocol, the fallback.
const handOffLimit = 7777

// handOff reports whether opts are those of a hand-off test.
func handOff(opts memstore.Options) bool { return opts.PurgeLimit == handOffLimit }

// waitAt is an Acquire with Wait for lease, by a Store that hands off: it
// expects the requester queued with ticket (head or not), the holder's TTL,
// and the store's clock as StoreTime.
func waitAt(tok string, lease time.Duration, ticket uint64, head bool, holderTTL time.Duration) op {
	return op{fmt.Sprintf("Acquire(%s, ttl=%v, wait)", tok, lease), func(t *testing.T, e *env) {
		g, err := e.b.Acquire(e.ctx, backend.AcquireRequest{ID: id, Token: tok, TTL: lease, Wait: true, WaiterTTL: waiterTTL})
		want := queued(ticket, head, holderTTL)
		want.StoreTime = e.clock.Now()
		if err != nil || g != want {
			t.Fatalf("grant = %+v, %v; want %+v", g, err, want)
		}
	}}
}

// handed checks the wake-ups since the last check: tok's grant by hand-off
// (fence, lease, the store's clock now), then, unless next is "", next
// told the new lease's TTL.
func handed(tok string, fence uint64, lease time.Duration, next string) op {
	return op{fmt.Sprintf("handed off to %s (fence %d, ttl %v), told %q", tok, fence, lease, next), func(t *testing.T, e *env) {
		want := []backend.Wake{{ID: id, Token: tok, Grant: &backend.HandOff{Fence: fence, TTL: lease, StoreTime: e.clock.Now()}}}
		if next != "" {
			want = append(want, backend.Wake{ID: id, Token: next, HolderTTL: lease})
		}
		if got := e.takeWakes(); !reflect.DeepEqual(got, want) {
			t.Fatalf("wake-ups = %+v, want %+v", got, want)
		}
	}}
}

// TestChecklistHandOff: checklist item 14 on a Store that hands off (the
// default): each step that frees the lock, or finds it free, grants it to
// the live head with the TTL it queued with and the next fence, and tells
// the next head; a dead head is purged, never granted.
func TestChecklistHandOff(t *testing.T) {
	const short = 3 * time.Second
	opts := memstore.Options{PurgeLimit: handOffLimit}
	tests := []struct {
		name string
		ops  []op
	}{
		{name: "a release hands off; a heartbeat that finds the lease ended hands off", ops: []op{
			try("A", granted(1, ttl)),
			waitAt("B", short, 1, true, ttl),
			waitAt("C", ttl, 2, false, ttl),
			release("A", nil),
			handed("B", 2, short, "C"), holder("B"), queue("C"),
			advance(short),
			beat("C", alive),
			handed("C", 3, ttl, ""), holder("C"), queue(),
			release("C", nil), length(0),
		}},
		{name: "a dead head is purged, not granted", ops: []op{
			try("A", granted(1, ttl)),
			waitAt("B", ttl, 1, true, ttl),
			waitAt("C", ttl, 2, false, ttl),
			advance(3 * time.Second), beat("C", alive), advance(3 * time.Second),
			release("A", nil),
			handed("C", 2, ttl, ""), holder("C"), queue(),
		}},
		{name: "a newcomer's acquire on an expired lease hands off to the head ahead", ops: []op{
			try("A", granted(1, ttl)),
			waitAt("B", ttl, 1, true, ttl),
			expireNow(),
			waitAt("C", ttl, 2, true, ttl),
			handed("B", 2, ttl, ""), holder("B"), queue("C"),
		}},
		{name: "the holder's leave hands off; so does the granted head's", ops: []op{
			try("A", granted(1, ttl)),
			waitAt("B", ttl, 1, true, ttl),
			waitAt("C", short, 2, false, ttl),
			leave("A"),
			handed("B", 2, ttl, "C"),
			leave("B"),
			handed("C", 3, short, ""), holder("C"), queue(),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, opts)
			for i, o := range tc.ops {
				t.Logf("step %d: %s", i, o.desc)
				o.run(t, e)
			}
		})
	}
}
