package conformance

import (
	"time"

	"github.com/redislocker/lock/backend"
)

// purge-exact (L3, H3, checklist items 1 and 6): dead entries go exactly
// when they are dead.
//   - None goes before its deadline: a waiter whose deadline is near (but
//     not passed) is still queued after other clients' steps, with its
//     ticket, as an Acquire without Wait (which refreshes nothing) shows.
//   - Every one goes, wherever it stands: with a live head, more than
//     twice the purge limit of dead entries behind it and a live waiter
//     last, the live head's heartbeats (the purge limit's worth each)
//     remove them all, so that once the live waiters leave and the holder
//     releases, the harness's StateChecker finds nothing left.
func purgeExact(e *env) {
	const near = 1500 * time.Millisecond
	ra, rq, rn := e.backend(), e.backend(), e.backend()
	ctx := e.ctx(time.Minute)

	id := e.id()
	h, q := e.token("holder"), e.token("near")
	e.grant(ra, backend.AcquireRequest{ID: id, Token: h, TTL: longTTL})
	sent := time.Now()
	gq := e.grant(rq, backend.AcquireRequest{ID: id, Token: q, TTL: longTTL, Wait: true, WaiterTTL: near})
	if !gq.Queued {
		e.fatalf("Acquire with Wait on a held id: %+v; want queued", gq)
	}
	e.letPass(sent, near*2/3)
	n := e.token("newcomer")
	e.grant(rn, backend.AcquireRequest{ID: id, Token: n, TTL: longTTL, Wait: true, WaiterTTL: longTTL})
	_, err := rn.Heartbeat(ctx, []backend.Waiter{{ID: id, Token: n}}, longTTL)
	e.mustStep("Heartbeat", err)
	e.mustStep("Leave", rn.Leave(ctx, id, n))
	probe := time.Now()
	g := e.grant(rq, backend.AcquireRequest{ID: id, Token: q, TTL: longTTL})
	_, advances := e.h.(ClockAdvancer)
	switch {
	case !advances && time.Since(sent) >= near-100*time.Millisecond:
		e.t.Logf("the steps took %v, too close to the waiter's deadline (%v) for the check: skipped this time", time.Since(sent), near)
	case !g.Queued || g.Ticket != gq.Ticket:
		e.errorf("a waiter whose deadline is %v away (WaiterTimeout %v), after other clients' steps: %+v; want still queued with its ticket %d: no entry is purged before its deadline",
			near-probe.Sub(sent), near, g, gq.Ticket)
	}
	e.mustStep("Leave", rq.Leave(ctx, id, q))
	e.mustStep("Release", ra.Release(ctx, id, h))

	sc, ok := e.h.(StateChecker)
	if !ok {
		e.skipCase("the harness has no StateChecker: cannot see dead entries behind a live head")
		return
	}
	const deadTTL = 300 * time.Millisecond
	limit := e.limits().PurgeLimit
	if limit <= 0 {
		limit = 100
	}
	id = e.id()
	l1, l2 := e.token("live-head"), e.token("live-tail")
	e.grant(ra, backend.AcquireRequest{ID: id, Token: h, TTL: longTTL})
	e.grant(rq, backend.AcquireRequest{ID: id, Token: l1, TTL: longTTL, Wait: true, WaiterTTL: longTTL})
	dead, queuedAt := e.queueDead(rn, id, 2*limit+1, deadTTL)
	e.grant(rq, backend.AcquireRequest{ID: id, Token: l2, TTL: longTTL, Wait: true, WaiterTTL: longTTL})
	e.letPass(queuedAt, deadTTL+expiryMargin)
	steps := (len(dead) + limit - 1) / limit
	for range steps {
		hb, err := rq.Heartbeat(ctx, []backend.Waiter{{ID: id, Token: l1}}, longTTL)
		if err != nil || len(hb) != 1 || !hb[0].Queued {
			e.fatalf("the live head's Heartbeat: %+v, %v; want queued", hb, err)
		}
	}
	e.mustStep("Leave", rq.Leave(ctx, id, l1))
	e.mustStep("Leave", rq.Leave(ctx, id, l2))
	e.mustStep("Release", ra.Release(ctx, id, h))
	if left := sc.StateLeft(e.t, id); len(left) > 0 {
		e.errorf("%d dead entries behind a live head (purge limit %d), %d heartbeats of the head, then the live waiters left and the holder released: the store still keeps %v; every entry past its deadline goes, wherever it stands, up to the limit per step",
			len(dead), limit, steps, left)
	}
}
