package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// expiryMargin is how long after a lease's expiry the suite assumes the
// store has noticed it: a TTL may end a little late (a store that expires
// in ticks), never early.
const expiryMargin = 100 * time.Millisecond

// expiries returns the ways the suite ends a short lease (ttl, granted by
// a step that returned at returned) without a release: its TTL running out
// on the store's clock, and the harness's Expirer when there is one.
func (e *env) expiries() []string {
	ways := []string{"expired at its TTL"}
	if _, ok := e.h.(Expirer); ok {
		ways = append(ways, "expired by the harness (Expirer)")
	}
	return ways
}

// endLease ends id's lease the given way (one of e.expiries()).
func (e *env) endLease(way, id string, ttl time.Duration, returned time.Time) {
	if way == "expired at its TTL" {
		e.letPass(returned, ttl+expiryMargin)
		return
	}
	e.h.(Expirer).ExpireNow(e.t, id)
}

// retry-remaining-ttl (S2, S6): a retried Acquire by the holder reports
// the TTL that is left, not the TTL it asks for; a lease of the retry
// through the core is valid no longer than the first grant.
func retryRemainingTTL(e *env) {
	const (
		ttl = 10 * time.Second
		gap = 400 * time.Millisecond
	)
	b := e.backend()
	l, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)
	res := fallback.Resolution(b)
	_, advances := e.h.(ClockAdvancer)
	id := e.id()
	tok := e.token("remaining")
	req := backend.AcquireRequest{ID: id, Token: tok, TTL: ttl}
	if g := e.grant(b, req); !g.Acquired {
		e.fatalf("backend Acquire of a free id: %+v", g)
	}
	returned := time.Now()
	e.letPass(returned, gap)
	check := func(what string, g backend.Grant, sent time.Time) {
		e.t.Helper()
		passed := sent.Sub(returned)
		if advances {
			passed = gap
		}
		// The grant happened before returned: at sent, at most ttl-passed
		// is left (plus one unit of the store's resolution, rounding).
		if most := ttl - passed + res; !g.Acquired || g.TTL <= 0 || g.TTL > most {
			e.errorf("%s by the holder, %v after the grant of %v: %+v, want Acquired with the remaining TTL (at most %v), not the TTL asked for",
				what, passed.Round(time.Millisecond), ttl, g, most)
		}
	}
	sent := time.Now()
	check("a retried Acquire", e.grant(b, req), sent)
	sent = time.Now()
	bg, err := fallback.AcquireBatch(ctx, b, []backend.AcquireRequest{req})
	if err != nil || len(bg) != 1 || bg[0].Err != nil {
		e.fatalf("AcquireBatch of a retry: %+v, %v", bg, err)
	}
	check("a retried Acquire in AcquireBatch", bg[0].Grant, sent)
	if !advances {
		r, err := l.Acquire(ctx, id, ttl, &lock.AcquireOptions{Token: tok})
		if err != nil || !r.Acquired {
			e.fatalf("Acquire the holder's token: Acquired=%v err=%v", r.Acquired, err)
		}
		if most := returned.Add(ttl + res); r.Lease.ValidUntil().After(most) {
			e.errorf("a lease from a retried Acquire is valid until %v after the first grant returned, more than its ttl %v: it claims validity the store never granted",
				r.Lease.ValidUntil().Sub(returned), ttl)
		}
	}
	e.mustStep("Release", b.Release(ctx, id, tok))
}

// not-held-after-expiry (S4): once a lease has expired, its token's
// Release returns ErrNotHeld, whether or not another client took the lock
// since, and a new holder's lock is untouched.
func notHeldAfterExpiry(e *env) {
	const ttl = 200 * time.Millisecond
	ra, rb := e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	for _, way := range e.expiries() {
		for _, taken := range []bool{false, true} {
			id := e.id()
			old, cur := e.token("old"), e.token("new")
			if g := e.grant(ra, backend.AcquireRequest{ID: id, Token: old, TTL: ttl}); !g.Acquired {
				e.fatalf("backend Acquire of a free id: %+v", g)
			}
			e.endLease(way, id, ttl, time.Now())
			what := "nobody took the lock since"
			if taken {
				what = "another client holds it now"
				if g := e.grant(rb, backend.AcquireRequest{ID: id, Token: cur, TTL: longTTL}); !g.Acquired {
					e.fatalf("the lease %s, but another client's Acquire: %+v", way, g)
				}
			}
			if err := ra.Release(ctx, id, old); !errors.Is(err, backend.ErrNotHeld) {
				e.errorf("backend Release of a lease that %s (%s): %v, want ErrNotHeld", way, what, err)
			}
			if taken {
				if err := rb.Release(ctx, id, cur); err != nil {
					e.errorf("the new holder's Release after the old token's Release: %v, want nil (its lock must be untouched)", err)
				}
			}
		}
	}
}

// extend-never-revives (S4): Extend of a lease that has expired returns
// ErrNotHeld and never re-creates the lock: another client can take the
// id at once, and the old token's Release says ErrNotHeld.
func extendNeverRevives(e *env) {
	const ttl = 200 * time.Millisecond
	ra, rb := e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	for _, way := range e.expiries() {
		id := e.id()
		old := e.token("old")
		if g := e.grant(ra, backend.AcquireRequest{ID: id, Token: old, TTL: ttl}); !g.Acquired {
			e.fatalf("backend Acquire of a free id: %+v", g)
		}
		e.endLease(way, id, ttl, time.Now())
		if err := ra.Extend(ctx, id, old, longTTL); !errors.Is(err, backend.ErrNotHeld) {
			e.errorf("backend Extend of a lease that %s: %v, want ErrNotHeld", way, err)
		}
		other := e.token("other")
		g := e.grant(rb, backend.AcquireRequest{ID: id, Token: other, TTL: longTTL})
		if !g.Acquired {
			e.errorf("after Extend of a lease that %s, another client's Acquire: %+v, want a grant (Extend must not re-create the lock)", way, g)
			_ = ra.Release(ctx, id, old)
			continue
		}
		e.mustStep("Release", rb.Release(ctx, id, other))
	}
}

// fence-after-idle (S3): fences strictly increase per id across the id's
// idle periods: after a release, an expiry, a queue that emptied, and
// (with a Forgetter) after the store forgot everything it may forget.
func fenceAfterIdle(e *env) {
	f, canForget := e.h.(Forgetter)
	if !canForget {
		e.skipCase("no Forgetter: checking fences across releases and expiries only, not across the store forgetting an idle id")
	}
	ra, rb := e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	id := e.id()
	var fences []uint64
	idle := func(after string) {
		e.t.Helper()
		if canForget {
			f.ForgetIdle(e.t, id)
			after += ", and the store forgot the idle id (Forgetter)"
		}
		tok := e.token("next")
		g := e.grant(rb, backend.AcquireRequest{ID: id, Token: tok, TTL: longTTL})
		if !g.Acquired {
			e.fatalf("after %s, Acquire of the free id: %+v", after, g)
		}
		if n := len(fences); n > 0 && g.Fence <= fences[n-1] {
			e.errorf("after %s: fence %d, not above the previous fence %d (all: %v): fences must never go back, even after the id's state is gone",
				after, g.Fence, fences[n-1], fences)
		}
		fences = append(fences, g.Fence)
		e.mustStep("Release", rb.Release(ctx, id, tok))
	}
	idle("a first grant")
	idle("a release")
	const ttl = 200 * time.Millisecond
	tok := e.token("short")
	if g := e.grant(ra, backend.AcquireRequest{ID: id, Token: tok, TTL: ttl}); !g.Acquired {
		e.fatalf("Acquire of the free id: %+v", g)
	} else {
		fences = append(fences, g.Fence)
	}
	e.endLease("expired at its TTL", id, ttl, time.Now())
	idle("a lease that expired at its TTL")
	// A queue that emptied: a waiter that left, a holder that released.
	h, w := e.token("holder"), e.token("waiter")
	if g := e.grant(ra, backend.AcquireRequest{ID: id, Token: h, TTL: longTTL}); g.Acquired {
		fences = append(fences, g.Fence)
	}
	e.grant(rb, backend.AcquireRequest{ID: id, Token: w, TTL: longTTL, Wait: true, WaiterTTL: longTTL})
	e.mustStep("Leave", rb.Leave(ctx, id, w))
	e.mustStep("Release", ra.Release(ctx, id, h))
	idle("a queue that emptied")
}

// waiter-cap (H3): with the id's queue at the backend's cap, an Acquire
// with Wait returns ErrQueueFull and enqueues nothing (alone, in a batch,
// and through the core), a queued waiter's retry still keeps its place,
// and a place that frees up can be taken.
func waiterCap(e *env) {
	maxW := e.limits().MaxWaiters
	switch {
	case maxW <= 0:
		e.skipf("the harness does not state its waiter cap (Limiter): cannot fill a queue")
	case maxW > 5000:
		e.skipf("the harness's waiter cap %d is too large to fill in a test: make it small in the harness", maxW)
	}
	ra, rb := e.backend(), e.backend()
	l, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)
	id := e.id()
	holder := e.token("holder")
	if g := e.grant(ra, backend.AcquireRequest{ID: id, Token: holder, TTL: longTTL}); !g.Acquired {
		e.fatalf("backend Acquire of a free id: %+v", g)
	}
	wreq := func(tok string) backend.AcquireRequest {
		return backend.AcquireRequest{ID: id, Token: tok, TTL: longTTL, Wait: true, WaiterTTL: longTTL}
	}
	var queued []backend.Waiter
	for len(queued) < maxW {
		var reqs []backend.AcquireRequest
		for i := len(queued); i < maxW && len(reqs) < 100; i++ {
			reqs = append(reqs, wreq(fmt.Sprintf("cap-%s-%d", nonce, i)))
		}
		res, err := fallback.AcquireBatch(ctx, rb, reqs)
		if err != nil || len(res) != len(reqs) {
			e.fatalf("AcquireBatch of %d waiters: %d results, %v", len(reqs), len(res), err)
		}
		for i, r := range res {
			if r.Err != nil || !r.Queued {
				e.fatalf("waiter %d of a cap of %d: %+v, %v; want queued (the cap is the harness's Limits.MaxWaiters)", len(queued)+i+1, maxW, r.Grant, r.Err)
			}
		}
		for _, r := range reqs {
			queued = append(queued, backend.Waiter{ID: id, Token: r.Token})
		}
	}
	over := e.token("over")
	g, err := rb.Acquire(ctx, wreq(over))
	if !errors.Is(err, backend.ErrQueueFull) || g.Queued {
		e.errorf("Acquire with Wait on a queue of %d waiters, the cap: %+v, %v; want ErrQueueFull and not queued", maxW, g, err)
	}
	if hb, err := rb.Heartbeat(ctx, []backend.Waiter{{ID: id, Token: over}}, longTTL); err != nil || len(hb) != 1 || hb[0].Queued {
		e.errorf("Heartbeat of the refused waiter: %+v, %v; want not queued (nothing enqueued)", hb, err)
	}
	bg, err := fallback.AcquireBatch(ctx, rb, []backend.AcquireRequest{wreq(over), wreq(queued[0].Token)})
	switch {
	case err != nil || len(bg) != 2:
		e.errorf("AcquireBatch on a full queue: %+v, %v; want two results", bg, err)
	case !errors.Is(bg[0].Err, backend.ErrQueueFull) || bg[0].Queued:
		e.errorf("AcquireBatch on a full queue, request 0 (a new waiter): %+v, %v; want ErrQueueFull in its place", bg[0].Grant, bg[0].Err)
	case bg[1].Err != nil || !bg[1].Queued:
		e.errorf("AcquireBatch on a full queue, request 1 (a queued waiter's retry): %+v, %v; want queued, no error", bg[1].Grant, bg[1].Err)
	}
	if _, err := l.Acquire(ctx, id, longTTL, nil); !errors.Is(err, lock.ErrQueueFull) {
		e.errorf("Locker.Acquire on a full queue: %v, want an error matching ErrQueueFull", err)
	}
	e.mustStep("Leave", rb.Leave(ctx, id, queued[0].Token))
	if g, err := rb.Acquire(ctx, wreq(over)); err != nil || !g.Queued {
		e.errorf("Acquire with Wait after one of %d waiters left: %+v, %v; want queued", maxW, g, err)
	}
	queued = append(queued[1:], backend.Waiter{ID: id, Token: over})
	e.mustStep("LeaveBatch", fallback.LeaveBatch(ctx, rb, queued))
	e.mustStep("Release", ra.Release(ctx, id, holder))
	e.assertFree(l, id, "after every waiter of a full queue left")
}

// batch-order (Batcher): AcquireBatch takes effect in request order and
// reports one result per request in that order, a per-request error in
// its own place; LeaveBatch leaves every listed entry.
func batchOrder(e *env) {
	ra, rb := e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	x, y := e.id(), e.id()
	hy := e.token("holder")
	if g := e.grant(ra, backend.AcquireRequest{ID: y, Token: hy, TTL: longTTL}); !g.Acquired {
		e.fatalf("backend Acquire of a free id: %+v", g)
	}
	t1, t2, t3, t4, t7 := e.token("t1"), e.token("t2"), e.token("t3"), e.token("t4"), e.token("t7")
	reqs := []backend.AcquireRequest{
		{ID: x, Token: t1, TTL: longTTL},
		{ID: x, Token: t2, TTL: longTTL, Wait: true, WaiterTTL: longTTL},
		{ID: y, Token: t3, TTL: longTTL},
		{ID: x, Token: t7, TTL: longTTL},
		{ID: y, Token: t4, TTL: longTTL, Wait: true, WaiterTTL: longTTL},
	}
	res, err := fallback.AcquireBatch(ctx, rb, reqs)
	if err != nil || len(res) != len(reqs) {
		e.fatalf("AcquireBatch of %d requests: %d results, %v; want one per request", len(reqs), len(res), err)
	}
	want := []string{
		"x by t1: granted (x is free)",
		"x by t2 with Wait: queued, head (t1 holds x since request 0)",
		"y by t3: refused, not queued, HolderTTL > 0 (y is held)",
		"x by t7: refused, not queued (t1 holds x since request 0)",
		"y by t4 with Wait: queued, head",
	}
	ok := []bool{
		res[0].Err == nil && res[0].Acquired,
		res[1].Err == nil && !res[1].Acquired && res[1].Queued && res[1].Head,
		res[2].Err == nil && !res[2].Acquired && !res[2].Queued && res[2].HolderTTL > 0,
		res[3].Err == nil && !res[3].Acquired && !res[3].Queued && res[3].HolderTTL > 0,
		res[4].Err == nil && !res[4].Acquired && res[4].Queued && res[4].Head,
	}
	for i := range reqs {
		if !ok[i] {
			e.errorf("AcquireBatch result %d: %+v, %v; want %s (requests take effect, and results come, in order)", i, res[i].Grant, res[i].Err, want[i])
		}
	}
	if maxW := e.limits().MaxWaiters; maxW > 0 && maxW <= 1000 {
		z := e.id()
		hz := e.token("holder")
		e.grant(ra, backend.AcquireRequest{ID: z, Token: hz, TTL: longTTL})
		var fill []backend.AcquireRequest
		var ws []backend.Waiter
		for i := 0; i < maxW; i++ {
			tok := fmt.Sprintf("fill-%s-%d", nonce, i)
			fill = append(fill, backend.AcquireRequest{ID: z, Token: tok, TTL: longTTL, Wait: true, WaiterTTL: longTTL})
			ws = append(ws, backend.Waiter{ID: z, Token: tok})
		}
		if _, err := fallback.AcquireBatch(ctx, ra, fill); err != nil {
			e.fatalf("filling a queue: %v", err)
		}
		t5, t6 := e.token("t5"), e.token("t6")
		mixed, err := fallback.AcquireBatch(ctx, rb, []backend.AcquireRequest{
			{ID: x, Token: t5, TTL: longTTL, Wait: true, WaiterTTL: longTTL},
			{ID: z, Token: t6, TTL: longTTL, Wait: true, WaiterTTL: longTTL},
			{ID: x, Token: t1, TTL: longTTL},
		})
		switch {
		case err != nil || len(mixed) != 3:
			e.errorf("AcquireBatch with one request on a full queue: %+v, %v; want three results and no error for the call", mixed, err)
		case mixed[0].Err != nil || !mixed[0].Queued:
			e.errorf("AcquireBatch result 0 (a waiter on x): %+v, %v; want queued, no error", mixed[0].Grant, mixed[0].Err)
		case !errors.Is(mixed[1].Err, backend.ErrQueueFull):
			e.errorf("AcquireBatch result 1 (on a full queue): %+v, %v; want ErrQueueFull in its own place", mixed[1].Grant, mixed[1].Err)
		case mixed[2].Err != nil || !mixed[2].Acquired:
			e.errorf("AcquireBatch result 2 (the holder's retry on x): %+v, %v; want granted, no error", mixed[2].Grant, mixed[2].Err)
		}
		e.mustStep("LeaveBatch", fallback.LeaveBatch(ctx, ra, append(ws, backend.Waiter{ID: x, Token: t5})))
		e.mustStep("Release", ra.Release(ctx, z, hz))
	}
	e.mustStep("LeaveBatch", fallback.LeaveBatch(ctx, rb, []backend.Waiter{{ID: x, Token: t2}, {ID: y, Token: t4}, {ID: x, Token: t1}}))
	e.mustStep("Release", ra.Release(ctx, y, hy))
	for _, id := range []string{x, y} {
		tok := e.token("after")
		if g := e.grant(ra, backend.AcquireRequest{ID: id, Token: tok, TTL: longTTL}); !g.Acquired {
			e.errorf("after LeaveBatch of every entry and the release, Acquire: %+v, want a grant (LeaveBatch left an entry or a lock)", g)
		} else {
			e.mustStep("Release", ra.Release(ctx, id, tok))
		}
	}
}

// purge-limit (H3, L3): with three times the purge limit of waiters dead
// ahead of a live one, no step refreshes or grants a dead entry (its owner
// counts as not queued), the live waiter is granted within a bounded
// number of steps, and a dead waiter that asks again queues behind it.
func purgeLimit(e *env) {
	const deadTTL = 300 * time.Millisecond
	limit := e.limits().PurgeLimit
	if limit <= 0 {
		limit = 100
	}
	n := 3 * limit
	if maxW := e.limits().MaxWaiters; maxW > 0 && maxW < n+2 {
		e.fatalf("the harness's Limits state MaxWaiters %d and PurgeLimit %d: this property queues 3 x PurgeLimit + 2 = %d waiters on one id; raise MaxWaiters or lower PurgeLimit in the harness", maxW, limit, n+2)
	}
	ra, rb, rc := e.backend(), e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	id := e.id()
	holder := e.token("holder")
	if g := e.grant(ra, backend.AcquireRequest{ID: id, Token: holder, TTL: longTTL}); !g.Acquired {
		e.fatalf("backend Acquire of a free id: %+v", g)
	}
	dead, queuedAt := e.queueDead(rb, id, n, deadTTL)
	live := e.token("live")
	lreq := backend.AcquireRequest{ID: id, Token: live, TTL: longTTL, Wait: true, WaiterTTL: longTTL}
	lg := e.grant(rc, lreq)
	e.letPass(queuedAt, deadTTL+expiryMargin)
	// An Acquire with Wait by a dead waiter whose entry the purge limit
	// may have left in place queues it anew, behind the live waiter: the
	// dead entry is not revived with its old ticket.
	retry := backend.AcquireRequest{ID: id, Token: dead[n-2], TTL: longTTL, Wait: true, WaiterTTL: longTTL}
	if g := e.grant(rb, retry); g.Acquired || !g.Queued || g.Ticket <= lg.Ticket || g.Head {
		e.errorf("Acquire with Wait by dead waiter %d of %d (purge limit %d), the lock held and a live waiter (ticket %d) queued: %+v; want queued anew behind the live waiter, not revived with its old ticket",
			n-2, n, limit, lg.Ticket, g)
	}
	e.mustStep("Leave", rb.Leave(ctx, id, dead[n-2]))
	e.mustStep("Release", ra.Release(ctx, id, holder))
	// The last dead waiter first: each step purges (up to the limit) the
	// entries that died first, so probing those first would find them
	// gone already, and the probe of an entry still in place, which is
	// the point, would come last or never.
	for _, i := range []int{n - 1, 2 * limit, limit, limit - 1, 1, 0} {
		tok := dead[i]
		hb, err := rb.Heartbeat(ctx, []backend.Waiter{{ID: id, Token: tok}}, longTTL)
		if err != nil || len(hb) != 1 || hb[0].Queued || hb[0].Ready {
			e.errorf("Heartbeat of dead waiter %d of %d (purge limit %d): %+v, %v; want not queued: an entry past its deadline is never refreshed", i, n, limit, hb, err)
		}
		g := e.grant(rb, backend.AcquireRequest{ID: id, Token: tok, TTL: longTTL})
		if g.Acquired {
			e.errorf("Acquire without Wait by dead waiter %d of %d (purge limit %d), a live waiter queued: granted (fence %d); its dead entry must not count", i, n, limit, g.Fence)
			e.mustStep("Release", rb.Release(ctx, id, tok))
		}
	}
	steps := 0
	for {
		steps++
		g := e.grant(rc, lreq)
		if g.Acquired {
			break
		}
		if steps > n/limit+2 {
			e.fatalf("the live waiter behind %d dead ones (purge limit %d) is not granted after %d of its own steps: expired entries are not purged", n, limit, steps)
		}
	}
	again := e.grant(rb, backend.AcquireRequest{ID: id, Token: dead[n-1], TTL: longTTL, Wait: true, WaiterTTL: longTTL})
	if again.Acquired || !again.Queued || again.Ticket <= lg.Ticket || !again.Head {
		e.errorf("a dead waiter's Acquire with Wait, the live one holding: %+v; want queued anew, head, with a ticket above the live waiter's %d", again, lg.Ticket)
	}
	e.mustStep("Leave", rb.Leave(ctx, id, dead[n-1]))
	e.mustStep("Release", rc.Release(ctx, id, live))
}
