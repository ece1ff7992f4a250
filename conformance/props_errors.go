package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/redislocker/lock/backend"
)

// error-kinds (checklist item 9, backend.Kind): what a step's error says
// about its outcome is true, because the core acts on it (it cleans up by
// token after a step of unknown outcome, and not after one that was never
// sent).
//   - An answer of the store is of KindAnswer: ErrNotHeld from Release and
//     Extend by a token that does not hold the id.
//   - A step cut by its ctx (ended before the call, or during it, after 0
//     to 5 ms) is never of KindAnswer, and when it says KindUnsent it took
//     no effect: its token is neither queued nor holding.
func errorKinds(e *env) {
	ra, rb := e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	id := e.id()
	h := e.token("holder")
	e.grant(ra, backend.AcquireRequest{ID: id, Token: h, TTL: longTTL})
	for _, s := range []struct {
		what string
		err  error
	}{
		{"Release by a token that does not hold the id", rb.Release(ctx, id, e.token("other"))},
		{"Extend by a token that does not hold the id", rb.Extend(ctx, id, e.token("other"), longTTL)},
	} {
		if !errors.Is(s.err, backend.ErrNotHeld) || backend.KindOf(s.err) != backend.KindAnswer {
			e.errorf("%s: %v of kind %v; want ErrNotHeld of kind answer", s.what, s.err, backend.KindOf(s.err))
		}
	}
	cuts := []time.Duration{-1, 0, time.Microsecond, 20 * time.Microsecond, 100 * time.Microsecond, 300 * time.Microsecond, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond}
	for _, d := range cuts {
		tok := e.token("cut")
		var cctx context.Context
		var cancel context.CancelFunc
		if d < 0 {
			cctx, cancel = context.WithCancel(ctx)
			cancel()
		} else {
			cctx, cancel = context.WithTimeout(ctx, d)
		}
		_, err := rb.Acquire(cctx, backend.AcquireRequest{ID: id, Token: tok, TTL: longTTL, Wait: true, WaiterTTL: longTTL})
		cancel()
		kind := backend.KindOf(err)
		switch {
		case err == nil:
		case kind == backend.KindAnswer:
			e.errorf("an Acquire cut by its ctx after %v: %v of kind answer; a step the caller stopped waiting for is of unknown outcome (or unsent, if it never reached the store)", d, err)
		case kind == backend.KindUnsent:
			if g := e.grant(rb, backend.AcquireRequest{ID: id, Token: tok, TTL: longTTL}); g.Acquired || g.Queued {
				e.errorf("an Acquire cut by its ctx after %v: %v of kind unsent, but it took effect (%+v): the core does not clean up after an unsent step, so its entry stays", d, err, g)
			}
		}
		e.mustStep("Leave", rb.Leave(ctx, id, tok))
	}
	e.mustStep("Release", ra.Release(ctx, id, h))
}
