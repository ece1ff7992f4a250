package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

var ctx = context.Background()

func TestNewOptions(t *testing.T) {
	e := newEnv(t)
	b, err := concrete(New(e.raw, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lim := b.e.Config().Limits
	if b.Prefix() != "lock:" || lim.MaxWaiters != 10000 || lim.PurgeLimit != 100 {
		t.Errorf("defaults: prefix %q, max waiters %d, purge limit %d; want lock:, 10000, 100", b.Prefix(), lim.MaxWaiters, lim.PurgeLimit)
	}
	if b.Resolution() != time.Millisecond || fallback.Resolution(b) != time.Millisecond {
		t.Errorf("Resolution = %v, want 1ms", b.Resolution())
	}
	for _, o := range []Options{{Prefix: "a{"}, {Prefix: "}"}, {MaxWaiters: -1}, {PurgeLimit: -1}, {PurgeLimit: 100001}} {
		if _, err := New(e.raw, &o); !adaptertest.IsArgumentError(err, "opts.") {
			t.Errorf("New(%+v) = %v; want an *ArgumentError naming the field", o, err)
		}
	}
	if _, err := New(nil, nil); !adaptertest.IsArgumentError(err, "client") {
		t.Errorf("New(nil) = %v; want an *ArgumentError naming the client", err)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": e.addr}})
	defer ring.Close()
	if _, err := New(ring, nil); !adaptertest.IsArgumentError(err, "client") {
		t.Errorf("New(*redis.Ring) = %v; want an *ArgumentError naming the client", err)
	}
}

func TestAcquireFreeAndRetry(t *testing.T) {
	e, b := newEnvBackend(t)
	g := mustAcquire(t, b, req("a", "A", false))
	if !g.Acquired || g.Fence == 0 || g.TTL != 10*time.Second || g.Queued {
		t.Fatalf("first grant = %+v, want acquired, a fence, ttl 10s", g)
	}
	pttl := e.raw.PTTL(ctx, b.keyNames("a").Lock).Val()
	if pttl <= 9*time.Second || pttl > 10*time.Second {
		t.Fatalf("lock PTTL = %v, want the relative 10s lease", pttl)
	}
	// S6: a retried acquire by the holder is a no-op reporting the lease.
	r := req("a", "A", true)
	r.TTL = time.Hour
	g2 := mustAcquire(t, b, r)
	if !g2.Acquired || g2.Fence != g.Fence || g2.TTL > 10*time.Second || g2.TTL <= 0 || g2.Queued {
		t.Fatalf("retried grant = %+v, want acquired with fence %d and the remaining TTL", g2, g.Fence)
	}
	if n := e.raw.Exists(ctx, b.keyNames("a").Queue).Val(); n != 0 {
		t.Fatal("a retried acquire enqueued the holder")
	}
	if err := b.Release(ctx, "a", "A"); err != nil {
		t.Fatal(err)
	}
	// The fence goes on past the last one.
	if g3 := mustAcquire(t, b, req("a", "B", false)); !g3.Acquired || g3.Fence <= g.Fence {
		t.Fatalf("grant after release = %+v, want a fence above %d", g3, g.Fence)
	}
}

func TestFairTryAcquireAndQueueOrder(t *testing.T) {
	e, b := newEnvBackend(t)
	other, _ := e.backend(nil)
	w := adaptertest.Subscribed(t, other, "q") // the waiters' process

	mustAcquire(t, b, req("q", "A", false))
	var tickets []uint64
	for i, tok := range []string{"B", "C", "D"} {
		g := mustAcquire(t, other, req("q", tok, true))
		if g.Acquired || !g.Queued || g.HolderTTL <= 0 || g.Head != (i == 0) {
			t.Fatalf("enqueue %s = %+v, want queued behind a held lock, head only for the first", tok, g)
		}
		tickets = append(tickets, g.Ticket)
	}
	if !(tickets[0] < tickets[1] && tickets[1] < tickets[2]) {
		t.Fatalf("tickets %v do not strictly increase in enqueue order", tickets)
	}
	// Re-acquiring keeps the place and the ticket.
	if g := mustAcquire(t, other, req("q", "C", true)); g.Ticket != tickets[1] || g.Head {
		t.Fatalf("re-enqueue of C = %+v, want ticket %d kept, not head", g, tickets[1])
	}
	// Without Wait nothing is enqueued; a non-queued requester never jumps.
	if g := mustAcquire(t, other, req("q", "E", false)); g.Acquired || g.Queued {
		t.Fatalf("try of E = %+v, want neither acquired nor queued", g)
	}

	if err := b.Release(ctx, "q", "A"); err != nil {
		t.Fatal(err)
	}
	// The release hands off to the head, B, and tells C, the head now;
	// then the test's marker.
	e.raw.Publish(ctx, other.Inbox("q"), adaptertest.InboxMsg("q", ":marker"))
	if got := w.Until(t, "marker"); len(got) != 2 || !adaptertest.IsGrant(got[0], "q", "B") ||
		got[1].Token != "C" || got[1].HolderTTL <= 0 || got[1].Grant != nil {
		t.Fatalf("wake-ups after release = %+v, want B's grant and C told the holder's TTL", got)
	}
	// B holds: C, D and E must not get it.
	for _, tok := range []string{"C", "D", "E"} {
		g := mustAcquire(t, other, req("q", tok, tok != "E"))
		if g.Acquired || g.HolderTTL <= 0 {
			t.Fatalf("acquire of %s while B holds = %+v, want not acquired, the holder's TTL", tok, g)
		}
	}
	for _, tok := range []string{"B", "C", "D"} {
		g := mustAcquire(t, other, req("q", tok, true))
		if !g.Acquired {
			t.Fatalf("%s, granted by hand-off, does not hold: %+v", tok, g)
		}
		if err := other.Release(ctx, "q", tok); err != nil {
			t.Fatal(err)
		}
	}
	// Every grant removed its entry: nothing queued is left.
	if n := e.raw.ZCard(ctx, b.keyNames("q").Queue).Val(); n != 0 {
		t.Fatalf("%d queue entries left after every waiter was granted", n)
	}
}

func TestReleaseAndExtendAreOwnerOnly(t *testing.T) {
	e, b := newEnvBackend(t)
	k := b.keyNames("r")
	first := mustAcquire(t, b, req("r", "A", false))
	if err := b.Release(ctx, "r", "B"); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Release by a non-owner = %v, want ErrNotHeld", err)
	}
	if err := b.Extend(ctx, "r", "B", time.Hour); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Extend by a non-owner = %v, want ErrNotHeld", err)
	}
	if v := owner(e.raw.Get(ctx, k.Lock).Val()); v != "A" {
		t.Fatalf("lock = %q after a non-owner's release/extend, want A", v)
	}
	if err := b.Extend(ctx, "r", "A", time.Hour); err != nil {
		t.Fatal(err)
	}
	if d := e.raw.PTTL(ctx, k.Lock).Val(); d < 59*time.Minute {
		t.Fatalf("PTTL after Extend(1h) = %v", d)
	}
	if g := mustAcquire(t, b, req("r", "A", false)); g.Fence != first.Fence {
		t.Fatalf("fence after extend = %d, want %d (extend keeps the fence)", g.Fence, first.Fence)
	}
	if err := b.Release(ctx, "r", "A"); err != nil {
		t.Fatal(err)
	}
	// The same release again (a client's resend after a lost reply) is
	// answered nil: it did release. It changes nothing.
	if err := b.Release(ctx, "r", "A"); err != nil {
		t.Fatalf("second Release by the same token = %v, want nil (a resent release)", err)
	}
	mustAcquire(t, b, req("r", "B2", false))
	if err := b.Release(ctx, "r", "A"); err != nil {
		t.Fatalf("a resent Release after another token took the lock = %v, want nil", err)
	}
	if v := owner(e.raw.Get(ctx, k.Lock).Val()); v != "B2" {
		t.Fatalf("lock = %q after a resent release, want B2 (untouched)", v)
	}
	if err := b.Release(ctx, "r", "B2"); err != nil {
		t.Fatal(err)
	}
	// The gap the release records close: A's resend after B2's release
	// came in between is still answered as done.
	if err := b.Release(ctx, "r", "A"); err != nil {
		t.Fatalf("a resent Release after another token's release = %v, want nil", err)
	}
	if err := b.Release(ctx, "r", "never"); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Release by a token that never held the id = %v, want ErrNotHeld", err)
	}

	// An expired lease can be neither extended (no re-creation) nor released.
	r := req("r", "C", false)
	r.TTL = 20 * time.Millisecond
	mustAcquire(t, b, r)
	testkit.Eventually(t, adaptertest.Deadline, "the 20ms lease expires", func() bool { return e.raw.Exists(ctx, k.Lock).Val() == 0 })
	if err := b.Extend(ctx, "r", "C", time.Hour); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Extend after expiry = %v, want ErrNotHeld", err)
	}
	if e.raw.Exists(ctx, k.Lock).Val() != 0 {
		t.Fatal("Extend re-created an expired lock")
	}
	if err := b.Release(ctx, "r", "C"); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Release after expiry = %v, want ErrNotHeld", err)
	}
}

func TestLeave(t *testing.T) {
	e, b := newEnvBackend(t)
	w := adaptertest.Subscribed(t, b, "l")
	k := b.keyNames("l")

	mustAcquire(t, b, req("l", "A", false))
	mustAcquire(t, b, req("l", "B", true))
	mustAcquire(t, b, req("l", "C", true))
	// Leaving a queue one is not in, or twice, is fine.
	for range 2 {
		if err := b.Leave(ctx, "l", "X"); err != nil {
			t.Fatalf("Leave of an unknown token: %v", err)
		}
	}
	// The holder leaving releases (a grant that raced a cancel) and hands
	// off to B.
	if err := b.Leave(ctx, "l", "A"); err != nil {
		t.Fatal(err)
	}
	if got := owner(e.raw.Get(ctx, k.Lock).Val()); got != "B" {
		t.Fatalf("Leave by the holder: lock = %q, want handed off to B", got)
	}
	if x := w.Next(t); !adaptertest.IsGrant(x, "l", "B") {
		t.Fatalf("wake after the holder left = %+v, want B's grant", x)
	}
	if x := w.Next(t); x.Token != "C" || x.HolderTTL <= 0 {
		t.Fatalf("wake after the holder left = %+v, want C told the holder's TTL", x)
	}
	// B, granted, leaves: the grant is released and handed off to C.
	if err := b.Leave(ctx, "l", "B"); err != nil {
		t.Fatal(err)
	}
	if x := w.Next(t); !adaptertest.IsGrant(x, "l", "C") {
		t.Fatalf("wake after B left = %+v, want C's grant", x)
	}
	if err := b.Leave(ctx, "l", "B"); err != nil {
		t.Fatalf("second Leave: %v", err)
	}
	res, err := b.Heartbeat(ctx, []backend.Waiter{{ID: "l", Token: "B"}, {ID: "l", Token: "C"}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Queued || res[1].Queued {
		t.Fatalf("heartbeat after B left = %+v, want B and C gone (C holds)", res)
	}
	if err := b.LeaveBatch(ctx, []backend.Waiter{{ID: "l", Token: "C"}, {ID: "other", Token: "C"}}); err != nil {
		t.Fatal(err)
	}
	if left := e.keysOf(escapeForTest(e.prefix)); len(left) != 0 {
		t.Fatalf("keys left after everyone left: %v, want none of the id's", left)
	}
}

func escapeForTest(prefix string) string {
	ks, err := keys.New(prefix)
	if err != nil {
		panic(err)
	}
	return ks.PrefixPattern()
}

func TestHeartbeat(t *testing.T) {
	e, b := newEnvBackend(t)
	w := adaptertest.Subscribed(t, b, "h1")

	mustAcquire(t, b, req("h1", "A", false))
	mustAcquire(t, b, req("h1", "B", true))
	mustAcquire(t, b, req("h1", "C", true))
	mustAcquire(t, b, req("h2", "X", true)) // free: granted, not queued
	before := waiterDeadline(e, b.keyNames("h1"), "C")
	ws := []backend.Waiter{wt("h1", "C"), wt("h2", "X"), wt("h1", "B"), wt("h1", "nobody")}
	res, err := b.Heartbeat(ctx, ws, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want := []backend.HeartbeatResult{{Queued: true}, {}, {Queued: true}, {}}
	if fmt.Sprint(res) != fmt.Sprint(want) {
		t.Fatalf("heartbeat = %+v, want %+v", res, want)
	}
	after := waiterDeadline(e, b.keyNames("h1"), "C")
	if after < before+float64(50*time.Minute/time.Millisecond) {
		t.Fatalf("C's deadline %v -> %v: not refreshed to now+1h", before, after)
	}
	if n := e.raw.ZCard(ctx, b.keyNames("h1").Queue).Val(); n != 2 {
		t.Fatalf("heartbeat re-added an unknown waiter: %d entries", n)
	}
	if d := e.raw.PTTL(ctx, b.keyNames("h1").Queue).Val(); d < 2*time.Hour {
		t.Fatalf("queue PTTL after a 1h heartbeat = %v, want >= 3h", d)
	}

	// The lock expires without a release: a heartbeat finds it free and
	// hands it off to the head, B (reported queued: its wake-up carries
	// the grant).
	if err := e.raw.Del(ctx, b.keyNames("h1").Lock).Err(); err != nil {
		t.Fatal(err)
	}
	res, err = b.Heartbeat(ctx, []backend.Waiter{wt("h1", "C"), wt("h1", "B")}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != (backend.HeartbeatResult{Queued: true}) || res[1] != (backend.HeartbeatResult{Queued: true}) {
		t.Fatalf("heartbeat with a free lock = %+v, want C and B queued, neither ready", res)
	}
	if x := w.Next(t); !adaptertest.IsGrant(x, "h1", "B") {
		t.Fatalf("heartbeat wake = %+v, want B's grant", x)
	}
	if got := owner(e.raw.Get(ctx, b.keyNames("h1").Lock).Val()); got != "B" {
		t.Fatalf("lock = %q after the heartbeat, want B", got)
	}
	if res, err := b.Heartbeat(ctx, nil, time.Hour); err != nil || len(res) != 0 {
		t.Fatalf("empty heartbeat = %v, %v", res, err)
	}
}

// TestPurgeEveryExpiredWaiter: expired waiters are removed by the server's
// clock, at most PurgeLimit per step, all of them over enough steps; a live
// waiter is never purged; a waiter behind dead ones gets the lock.
func TestPurgeEveryExpiredWaiter(t *testing.T) {
	e := newEnv(t)
	const limit, dead = 10, 25
	b, _ := e.backend(&Options{PurgeLimit: limit})
	// The setup must end before the first dead waiter's deadline, or an
	// enqueue step purges some already. On a loaded machine it may not:
	// then try again on a fresh id with a doubled waiter TTL.
	var k keys.ID
	var id string
	var latestDead float64
	for ttl := 30 * time.Millisecond; ; ttl *= 2 {
		id = fmt.Sprint("p", ttl.Milliseconds())
		k = b.keyNames(id)
		mustAcquire(t, b, req(id, "holder", false))
		short := req(id, "", true)
		short.WaiterTTL = ttl
		for i := range dead {
			short.Token = fmt.Sprintf("dead-%02d", i)
			mustAcquire(t, b, short)
		}
		mustAcquire(t, b, req(id, "live", true)) // 10s waiter TTL
		setupEnd := float64(e.serverMillis())
		deadlines := e.raw.HGetAll(ctx, k.Waiters).Val()
		earliestDead := math.Inf(1)
		latestDead = 0
		for tok, v := range deadlines {
			if w, ok := keys.ParseWaiter(v); ok && strings.HasPrefix(tok, "dead-") {
				earliestDead = min(earliestDead, float64(w.Deadline))
				latestDead = max(latestDead, float64(w.Deadline))
			}
		}
		if len(deadlines) == dead+1 && setupEnd < earliestDead {
			break
		}
		if ttl > 5*time.Second {
			t.Fatalf("the setup of %d waiters outlasted a %v waiter TTL", dead, ttl)
		}
		t.Logf("setup outlasted the dead waiters' %v TTL (%d of %d deadlines left): again with %v", ttl, len(deadlines), dead+1, 2*ttl)
	}
	testkit.Eventually(t, adaptertest.Deadline, "the server's clock passes the dead waiters' deadlines", func() bool {
		return float64(e.serverMillis()) > latestDead
	})
	// Each step purges at most `limit`; the live waiter stays.
	for want := int64(dead + 1 - limit); want > 1-limit; want -= limit {
		if _, err := b.Heartbeat(ctx, []backend.Waiter{wt(id, "live")}, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if n := e.raw.ZCard(ctx, k.Queue).Val(); n != max(want, 1) {
			t.Fatalf("queue has %d entries after a purge step, want %d (limit %d per step)", n, max(want, 1), limit)
		}
	}
	if _, err := b.Heartbeat(ctx, []backend.Waiter{wt(id, "live")}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := e.raw.ZRange(ctx, k.Queue, 0, -1).Val(); len(got) != 1 || got[0] != "live" {
		t.Fatalf("queue after purging = %v, want only the live waiter", got)
	}
	if got := e.raw.HKeys(ctx, k.Waiters).Val(); len(got) != 1 || got[0] != "live" {
		t.Fatalf("waiter records after purging = %v, want only the live waiter's", got)
	}
	if err := b.Release(ctx, id, "holder"); err != nil {
		t.Fatal(err)
	}
	if g := mustAcquire(t, b, req(id, "live", true)); !g.Acquired {
		t.Fatalf("the live waiter behind purged ones was not granted: %+v", g)
	}
}

// TestDeadHeadIsPurgedAndNextWoken: when a release or an acquire finds the
// head dead, the next live waiter is woken, not the dead one.
func TestDeadHeadIsPurgedAndNextWoken(t *testing.T) {
	e, b := newEnvBackend(t)
	w := adaptertest.Subscribed(t, b, "d")
	k := b.keyNames("d")
	mustAcquire(t, b, req("d", "A", false))
	dead := req("d", "dead", true)
	dead.WaiterTTL = 20 * time.Millisecond
	mustAcquire(t, b, dead)
	mustAcquire(t, b, req("d", "live", true))
	deadline := waiterDeadline(e, k, "dead")
	testkit.Eventually(t, adaptertest.Deadline, "the dead waiter's deadline passes", func() bool { return float64(e.serverMillis()) > deadline })
	if err := b.Release(ctx, "d", "A"); err != nil {
		t.Fatal(err)
	}
	if x := w.Next(t); !adaptertest.IsGrant(x, "d", "live") {
		t.Fatalf("wake after release = %+v, want the live waiter's grant, not the dead head's", x)
	}

	// Free lock, dead head: a newcomer's acquire purges it and hands off
	// to the next head.
	mustAcquire(t, b, req("d", "live", true)) // live takes it
	mustAcquire(t, b, dead)                   // dead-2 (same token) queues again
	mustAcquire(t, b, req("d", "next", true))
	deadline = waiterDeadline(e, k, "dead")
	// Free the lock behind the queue's back, as an expiry would.
	e.raw.Del(ctx, k.Lock)
	testkit.Eventually(t, adaptertest.Deadline, "the dead waiter's deadline passes", func() bool { return float64(e.serverMillis()) > deadline })
	if g := mustAcquire(t, b, req("d", "newcomer", true)); g.Acquired || !g.Head || g.HolderTTL <= 0 {
		t.Fatalf("newcomer = %+v, want queued as the head, next holding", g)
	}
	if x := w.Next(t); !adaptertest.IsGrant(x, "d", "next") {
		t.Fatalf("wake after the dead head was purged = %+v, want next's grant", x)
	}
}

func TestQueueFull(t *testing.T) {
	e := newEnv(t)
	b, _ := e.backend(&Options{MaxWaiters: 2})
	mustAcquire(t, b, req("f", "A", false))
	mustAcquire(t, b, req("f", "B", true))
	mustAcquire(t, b, req("f", "C", true))
	if _, err := b.Acquire(ctx, req("f", "D", true)); !errors.Is(err, backend.ErrQueueFull) {
		t.Fatalf("third waiter: %v, want ErrQueueFull", err)
	}
	if n := e.raw.ZCard(ctx, b.keyNames("f").Queue).Val(); n != 2 {
		t.Fatalf("queue has %d entries, want 2: a full queue enqueues nothing", n)
	}
	// A queued waiter keeps its place in a full queue.
	if g := mustAcquire(t, b, req("f", "C", true)); !g.Queued {
		t.Fatalf("re-acquire of a queued waiter in a full queue = %+v", g)
	}
	// A try without Wait is not refused.
	if g, err := b.Acquire(ctx, req("f", "D", false)); err != nil || g.Acquired {
		t.Fatalf("try in a full queue = %+v, %v", g, err)
	}
	res, err := b.AcquireBatch(ctx, []backend.AcquireRequest{req("f", "D", true), req("f2", "D", true), req("f", "B", true)})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0].Err, backend.ErrQueueFull) || res[1].Err != nil || !res[1].Acquired || res[2].Err != nil || !res[2].Queued || !res[2].Head {
		t.Fatalf("batch = %+v, want queue full / acquired / queued head", res)
	}
}

// TestTTLOnEveryKey (H2): every key has a TTL, whatever state an id is
// in (keysOf checks the keys of hash slots: the fence key at most an hour,
// the release records at most keys.ReleaseKeep), and an id that is done
// leaves no key of its own.
func TestTTLOnEveryKey(t *testing.T) {
	e, b := newEnvBackend(t)
	ids := []string{"held", "queued", "a{b}c", "%7B", "x:y}:lock"}
	for _, id := range ids {
		mustAcquire(t, b, req(id, "A", false))
		mustAcquire(t, b, req(id, "B", true))
	}
	if err := b.Release(ctx, "queued", "A"); err != nil {
		t.Fatal(err)
	}
	all := e.keysOf(escapeForTest(e.prefix))
	if len(all) != 3*len(ids)-2 {
		t.Fatalf("keys = %v, want lock, q, w for held ids and lock for the one handed off to B", all)
	}
	ks, _ := keys.New(e.prefix)
	for key, pttl := range all {
		id, suffix, err := ks.Parse(key)
		if err != nil {
			t.Fatalf("key %q does not parse: %v", key, err)
		}
		if !strings.Contains(strings.Join(ids, "\n"), id) {
			t.Fatalf("key %q has unknown id %q", key, id)
		}
		if pttl <= 0 {
			t.Errorf("key %q (suffix %s) has PTTL %v: every key must expire", key, suffix, pttl)
		}
	}
	for _, id := range ids {
		if id != "queued" {
			if err := b.Release(ctx, id, "A"); err != nil {
				t.Fatal(err)
			}
		}
		if g := mustAcquire(t, b, req(id, "B", true)); !g.Acquired {
			t.Fatalf("B not granted on %q: %+v", id, g)
		}
		if err := b.Release(ctx, id, "B"); err != nil {
			t.Fatal(err)
		}
	}
	for key := range e.keysOf(escapeForTest(e.prefix)) {
		t.Errorf("key %q left after every lock was released", key)
	}
}

func TestCancelledContextAndClose(t *testing.T) {
	e := newEnv(t)
	b, cnt := e.backend(nil)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Acquire(cctx, req("c", "A", false)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a cancelled ctx = %v", err)
	}
	if n, _, names := cnt.Take(); n != 0 {
		t.Fatalf("a cancelled call sent %d commands: %s", n, names)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	checks := map[string]error{
		"Close":   b.Close(),
		"Release": b.Release(ctx, "c", "A"),
		"Extend":  b.Extend(ctx, "c", "A", time.Second),
		"Leave":   b.Leave(ctx, "c", "A"),
	}
	_, checks["Acquire"] = b.Acquire(ctx, req("c", "A", false))
	_, checks["Heartbeat"] = b.Heartbeat(ctx, []backend.Waiter{wt("c", "A")}, time.Second)
	_, checks["AcquireBatch"] = b.AcquireBatch(ctx, []backend.AcquireRequest{req("c", "A", false)})
	checks["LeaveBatch"] = b.LeaveBatch(ctx, []backend.Waiter{wt("c", "A")})
	_, checks["Subscribe"] = b.Subscribe(ctx, "c", func(backend.Wake) {})
	for name, err := range checks {
		if !errors.Is(err, backend.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

// TestDeadEntryBeyondLimitStaysDead: an entry past its deadline that the
// purge LIMIT left in place is neither refreshed nor granted; its owner
// counts as not queued.
func TestDeadEntryBeyondLimitStaysDead(t *testing.T) {
	e := newEnv(t)
	b, _ := e.backend(&Options{PurgeLimit: 1})
	k := b.keyNames("z")
	mustAcquire(t, b, req("z", "holder", false))
	short := req("z", "", true)
	short.WaiterTTL = 20 * time.Millisecond
	var tickets = map[string]uint64{}
	for _, tok := range []string{"d1", "d2", "d3", "d4"} {
		short.Token = tok
		tickets[tok] = mustAcquire(t, b, short).Ticket
	}
	last := waiterDeadline(e, k, "d4")
	testkit.Eventually(t, adaptertest.Deadline, "every short deadline passes", func() bool { return float64(e.serverMillis()) > last })
	// One purge per step (d1); d3 is dead although still in the sets.
	res, err := b.Heartbeat(ctx, []backend.Waiter{wt("z", "d3")}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Queued {
		t.Fatalf("heartbeat of a dead entry left by the LIMIT = %+v, want not queued (never refreshed)", res[0])
	}
	// d4 comes back: it is not queued any more, so it gets a new ticket.
	g := mustAcquire(t, b, req("z", "d4", true))
	if !g.Queued || g.Ticket <= tickets["d4"] {
		t.Fatalf("re-enqueue of a dead entry = %+v, want a new ticket after %d", g, tickets["d4"])
	}
	// The lock frees; d4, dead-then-requeued, is granted only once it heads
	// the queue as a live waiter, never through its dead entry.
	if err := b.Release(ctx, "z", "holder"); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if g := mustAcquire(t, b, req("z", "d4", true)); g.Acquired {
			if n := e.raw.ZCard(ctx, k.Queue).Val(); n != 0 {
				t.Fatalf("d4 granted with %d entries still queued", n)
			}
			return
		}
	}
	t.Fatal("d4 was never granted after the dead entries were purged")
}

// TestHolderTTLNeverZeroWhileHeld: in a lease's last millisecond PTTL is
// 0 while the key still exists; the grant must still report a held lock
// (HolderTTL >= 1ms), as 0 means "free, waiters ahead" and the core would
// not re-check at the holder's expiry. miniredis's manual clock makes the
// last millisecond reachable.
func TestHolderTTLNeverZeroWhileHeld(t *testing.T) {
	m := miniredis.RunT(t)
	e := newEnvAt(t, m.Addr())
	b, _ := e.backend(nil)
	r := req("t", "A", false)
	r.TTL = 10 * time.Millisecond
	mustAcquire(t, b, r)
	m.FastForward(9*time.Millisecond + 500*time.Microsecond)
	if d := e.raw.PTTL(ctx, b.keyNames("t").Lock).Val(); d != 0 {
		t.Skipf("miniredis PTTL in the last millisecond = %v, the edge is not reachable", d)
	}
	g := mustAcquire(t, b, req("t", "B", true))
	if g.Acquired || g.HolderTTL < time.Millisecond {
		t.Fatalf("grant in the holder's last millisecond = %+v, want not acquired with HolderTTL >= 1ms", g)
	}
}

// owner returns the owner token of a lock key's value, "<fence>:<token>",
// or v itself when it has no fence.
func owner(v string) string {
	if tok, _, ok := keys.ParseLock(v); ok {
		return tok
	}
	return v
}

// waiterDeadline returns token's deadline (ms of the server's clock) in
// the waiter records of k, or 0 when it has none.
func waiterDeadline(e *env, k keys.ID, token string) float64 {
	w, _ := keys.ParseWaiter(e.raw.HGet(ctx, k.Waiters, token).Val())
	return float64(w.Deadline)
}
