package conformance

import (
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// ttl-precision (S2, checklist item 13): with leases of 1.7 s and 1.3 s,
// every TTL a step reports is exact to the millisecond (or the backend's
// resolution, if coarser), never rounded to seconds: a new grant's TTL, a
// retried grant's remaining TTL, the holder's TTL told to a waiter that
// queues, the holder's TTL told to a new head (Wake.HolderTTL, when the
// backend sends it), and a hand-off's TTL. Each must lie between what is
// left by the clock and what was granted.
func ttlPrecision(e *env) {
	const ttlA, ttlX = 1700 * time.Millisecond, 1300 * time.Millisecond
	ra, rw, rx := e.backend(), e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	res := max(fallback.Resolution(ra), time.Millisecond)
	id := e.id()
	a, w, x := e.token("a"), e.token("w"), e.token("x")
	sent := time.Now()
	ga := e.grant(ra, backend.AcquireRequest{ID: id, Token: a, TTL: ttlA})
	if !ga.Acquired {
		e.fatalf("Acquire of a free id: %+v", ga)
	}
	// within checks that d is what is left of granted, given since sent.
	within := func(what string, d, granted time.Duration, sent time.Time) {
		e.t.Helper()
		low := granted - time.Since(sent) - res
		if d < low || d > granted {
			e.errorf("%s: %v; want between %v (what is left by the clock) and %v (what was granted): exact to %v, not rounded", what, d, low.Round(time.Millisecond), granted, res)
		}
	}
	within("a new grant's TTL", ga.TTL, ttlA, time.Now())
	within("a retried grant's TTL", e.grant(ra, backend.AcquireRequest{ID: id, Token: a, TTL: ttlA}).TTL, ttlA, sent)
	gw := e.grant(rw, backend.AcquireRequest{ID: id, Token: w, TTL: ttlX, Wait: true, WaiterTTL: longTTL})
	within("Grant.HolderTTL told to a waiter that queues", gw.HolderTTL, ttlA, sent)

	wakes, _ := e.wakeChan(rx, id)
	gx := e.grant(rx, backend.AcquireRequest{ID: id, Token: x, TTL: ttlX, Wait: true, WaiterTTL: longTTL})
	within("Grant.HolderTTL told to a second waiter", gx.HolderTTL, ttlA, sent)
	e.mustStep("Leave", rw.Leave(ctx, id, w))
	// X is the head of a held lock now; a backend may tell it so (or send
	// a plain wake-up, or none: then the step tells it).
	if wk, ok := awaitWake(wakes, settle, func(wk backend.Wake) bool { return wk.Token == x && wk.HolderTTL > 0 }); ok {
		within("Wake.HolderTTL told to a new head", wk.HolderTTL, ttlA, sent)
	}

	released := time.Now()
	e.mustStep("Release", ra.Release(ctx, id, a))
	if e.handsOff() {
		wk, ok := awaitWake(wakes, prompt, func(wk backend.Wake) bool { return wk.Token == x && wk.Grant != nil })
		switch {
		case !ok:
			e.errorf("the release handed the lock to X, but no wake-up carrying the grant reached X's process within %v", prompt)
		case wk.Grant.TTL < ttlX-res || wk.Grant.TTL > ttlX:
			e.errorf("a hand-off's TTL: %v; want the %v the waiter asked for, exact to %v", wk.Grant.TTL, ttlX, res)
		}
	}
	gx = e.grant(rx, backend.AcquireRequest{ID: id, Token: x, TTL: ttlX, Wait: true, WaiterTTL: longTTL})
	if !gx.Acquired {
		e.fatalf("X's Acquire after the release, X the head: %+v; want granted", gx)
	}
	within("the TTL of X's grant (by hand-off, then retried, or its own)", gx.TTL, ttlX, released)
	e.mustStep("Release", rx.Release(ctx, id, x))
}
