package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/redislocker/lock"
)

// The properties of direct hand-off (backend.HandOffer); each is skipped
// for a backend that does not hand off.

// skipNoHandOff skips the property for a backend without direct hand-off.
func (e *env) skipNoHandOff() {
	e.t.Helper()
	if !e.handsOff() {
		e.skipf("the backend does not hand off (no backend.HandOffer): the wake-then-acquire properties cover it")
	}
}

// holdAndQueue makes a new id held by another client (for longTTL), and
// has w (s its spy) queue on it under ctx for ttl.
func (e *env) holdAndQueue(ctx context.Context, w *lock.Locker, s *spy, ttl time.Duration) (id string, held *lock.Lease, p *pending) {
	e.t.Helper()
	la, _ := e.defaultLocker()
	id = e.id()
	held = e.mustAcquire(la, id, longTTL)
	p = e.acquireAsync(ctx, w, id, ttl)
	e.waitFor(prompt, "the waiter queued", func() bool { return s.queued(id) })
	return id, held, p
}

// handoffGrant: a release to a queued head grants it in the release's step:
// the head returns with no Acquire step of its own, with a fence above the
// previous holder's, and a ValidUntil no later than the store's expiry.
func handoffGrant(e *env) {
	e.skipNoHandOff()
	const ttl = 300 * time.Millisecond
	lw, sw := e.defaultLocker()
	lb, _ := e.defaultLocker()
	id, held, p := e.holdAndQueue(e.ctx(time.Minute), lw, sw, ttl)
	steps := sw.acquiresOf(id)
	released := time.Now()
	e.mustRelease(held)
	le := p.granted(e, prompt, "W, the head, after the holder's release")
	returned := time.Now()
	if n := sw.acquiresOf(id) - steps; n > 0 {
		e.errorf("W ran %d Acquire steps after the release: a grant by hand-off needs none", n)
	}
	if le.Fence() <= held.Fence() {
		e.errorf("W's fence %d after the hand-off, want more than the previous holder's %d", le.Fence(), held.Fence())
	}
	vu := le.ValidUntil()
	if vu.After(returned.Add(ttl)) || !vu.After(released) {
		e.errorf("W's ValidUntil is %v after the release, want in (0, %v]: the grant came after the release and before Acquire returned",
			vu.Sub(released), returned.Sub(released)+ttl)
	}
	e.notTakenBefore(lb, id, vu, ttl, "a hand-off")
}

// handoffCancelledHead: a grant by hand-off to a head whose Acquire is
// cancelled before it sees the grant is released by the head's cleanup:
// the Acquire returns ctx's error and the next waiter is granted at once.
func handoffCancelledHead(e *env) {
	e.skipNoHandOff()
	lw, sw := e.defaultLocker()
	lx, sx := e.defaultLocker()
	ctx := e.ctx(time.Minute)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	id, held, pw := e.holdAndQueue(wctx, lw, sw, longTTL)
	tok, _ := sw.queuedToken(id)
	px := e.acquireAsync(ctx, lx, id, longTTL)
	e.waitFor(prompt, "X queued", func() bool { return sx.queued(id) })
	sw.dropWakes.Store(true) // W does not hear its grant
	e.mustRelease(held)
	e.waitFor(prompt, "the grant by hand-off to W", func() bool { return sw.grantsFor(id, tok) > 0 })
	cancel()
	res, err := pw.wait(e, prompt, "W's cancelled Acquire")
	if !errors.Is(err, context.Canceled) || res.Acquired {
		e.errorf("W's Acquire cancelled after its grant by hand-off: Acquired=%v err=%v, want context.Canceled and no lease", res.Acquired, err)
	}
	le := px.granted(e, prompt, "X, after W's cancel released the grant to W")
	e.mustRelease(le)
}

// handoffDeadHead: a grant by hand-off to a head whose process died just
// before costs at most that lease's TTL: the next waiter, told the new
// holder's TTL by the hand-off, is granted within 100 ms (+ slack) of the
// end of that lease, with heartbeats too slow to matter.
func handoffDeadHead(e *env) {
	e.skipNoHandOff()
	const ttl = 300 * time.Millisecond
	opts := lock.Options{WaiterTimeout: slowHeartbeats}
	ld, sd := e.locker(opts)
	lx, sx := e.locker(opts)
	ctx := e.ctx(time.Minute)
	id, held, _ := e.holdAndQueue(ctx, ld, sd, ttl)
	px := e.acquireAsync(ctx, lx, id, longTTL)
	e.waitFor(prompt, "X queued", func() bool { return sx.queued(id) })
	sd.kill()
	released := time.Now()
	e.mustRelease(held)
	bound := ttl + 100*time.Millisecond + slack
	le := px.granted(e, bound, "X, behind D which died as the lock was handed off to it (bound: D's TTL + 100 ms + slack)")
	e.t.Logf("X was granted %v after the release (D's TTL %v)", time.Since(released).Round(time.Millisecond), ttl)
	e.mustRelease(le)
}
