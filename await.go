package lock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redislocker/lock/backend"
)

// A caller's context bounds every wait of a Locker call, whatever the
// backend's client does with it: a client may ignore deadlines (go-redis
// without ContextTimeoutEnabled reads with its own ReadTimeout) and a
// stalled server never answers. Each backend step a call waits for runs
// through await: when the ctx ends first, the call returns the ctx error
// and the step goes on in a goroutine of the Locker; once it returns,
// whatever it may have left (a queue entry, a grant, a lease's state) is
// settled there.

// ctxGrace is how long a call whose ctx ended, or whose Locker is
// closing, still waits for a step in flight or for its cleanup before it
// leaves them to the background: long enough for a step on a healthy
// store to finish, so that a cancelled call has cleaned up when it
// returns, and short enough that every call returns within a few tens of
// milliseconds of its ctx's end. One call's waits share one grace,
// counted from the ctx's deadline (or from when the call saw it end).
const ctxGrace = 20 * time.Millisecond

// closeWait bounds how long Close waits for the steps that callers
// stopped waiting for, and their cleanups.
const closeWait = cleanupTimeout

// waitFor says how long a call waits for a step.
type waitFor struct {
	// ctx is the caller's context: once it ends, the call waits for the
	// rest of the grace at most.
	ctx context.Context
	// bound, if not nil, is the step's own context (a cleanup's timeout,
	// which outlives ctx): the call stops waiting when it ends too.
	bound context.Context
	// close: the call also stops waiting (after the grace) when the
	// Locker closes.
	close bool
}

// inline reports whether nothing can end the wait before the step: the
// step then runs on the caller's goroutine, at no extra cost.
func (w waitFor) inline() bool {
	return w.ctx.Done() == nil && (w.bound == nil || w.bound.Done() == nil)
}

// grace is the end of one call's grace period, set when first needed.
type grace struct{ end time.Time }

// until returns the end of the grace: ctxGrace after ctx's deadline, if
// that is what ended it, or else after now.
func (g *grace) until(ctx context.Context) time.Time {
	if g == nil {
		g = &grace{}
	}
	if g.end.IsZero() {
		base := time.Now()
		if dl, ok := ctx.Deadline(); ok && errors.Is(ctx.Err(), context.DeadlineExceeded) && dl.Before(base) {
			base = dl
		}
		g.end = base.Add(ctxGrace)
	}
	return g.end
}

// The states of a step run by await.
const (
	stepRunning int32 = iota
	stepReturned
	stepStray // the caller stopped waiting
)

// stepCall is one step that await runs on a goroutine of its own.
type stepCall[T any] struct {
	lc    *lifecycle
	step  func() (T, error)
	late  func(T, error)
	state atomic.Int32
	done  chan struct{} // closed once v and err are set, unless stray
	v     T
	err   error
}

// run runs the step on its goroutine (go c.run() needs no closure).
func (c *stepCall[T]) run() {
	defer c.lc.steps.done()
	v, err := c.step()
	if c.state.CompareAndSwap(stepRunning, stepReturned) {
		c.v, c.err = v, err
		close(c.done)
		return
	}
	if c.late != nil {
		c.late(v, err)
	}
}

// await runs step, one backend step (or a few in a row), and returns its
// result. If w's ctx (or bound, or the Locker's Close, as w says) ends
// first, it waits for the rest of the grace; a step still running then
// goes on in a goroutine that the Locker tracks (Close waits for it, up
// to closeWait), and await returns at once with stray set and an error
// (of unknown outcome) matching what ended the wait: ctx.Err(),
// bound.Err() or ErrClosed. When such a stray step returns, late (if not
// nil) gets its result, on that goroutine: it settles what the step may
// have left (a Leave by token, a lease's state).
//
// When nothing can end the wait (w.inline) the step runs on the caller's
// goroutine, as a plain call. g is the call's grace, shared by its waits
// (nil: one of this wait's own); it is not part of w, so that it stays on
// the caller's stack.
func await[T any](lc *lifecycle, w waitFor, g *grace, step func() (T, error), late func(T, error)) (v T, err error, stray bool) {
	if w.inline() {
		v, err = step()
		return v, err, false
	}
	c := &stepCall[T]{lc: lc, step: step, late: late, done: make(chan struct{})}
	lc.steps.add()
	go c.run()
	var bound, closing <-chan struct{}
	if w.bound != nil {
		bound = w.bound.Done()
	}
	if w.close {
		closing = lc.done
	}
	var why error
	select {
	case <-c.done:
		return c.v, c.err, false
	case <-w.ctx.Done():
		why = w.ctx.Err()
	case <-bound:
		why = w.bound.Err()
	case <-closing:
		why = ErrClosed
	}
	t := time.NewTimer(time.Until(g.until(w.ctx)))
	defer t.Stop()
	select {
	case <-c.done:
		return c.v, c.err, false
	case <-t.C:
	}
	if !c.state.CompareAndSwap(stepRunning, stepStray) {
		<-c.done // it returned just now
		return c.v, c.err, false
	}
	return v, backend.WithKind(backend.KindUnknown, why), true
}

// cleanup leaves id's queue by token and releases a grant that raced the
// caller's exit (Leave by token). It is waited for while ctx lives,
// bounded by cleanupTimeout, and for the rest of the call's grace g once
// ctx has ended; a Leave still running then goes on in the background,
// and its failure is logged. It returns the Leave's error if it was
// waited for.
func (l *Locker) cleanup(ctx context.Context, g *grace, id, token string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	_, err, stray := await(l.life, waitFor{ctx: ctx, bound: cctx}, g, func() (struct{}, error) {
		defer cancel()
		return struct{}{}, l.b.Leave(cctx, id, token)
	}, func(_ struct{}, err error) {
		l.cleanupFailed(id, err)
	})
	if stray {
		return nil
	}
	return wrap(context.Background(), "leave", id, err)
}

// leaveLate runs on the goroutine of a stray step of token, once it
// returned: it removes whatever the step may have left of token's queue
// entry or grant (Leave by token), bounded by cleanupTimeout.
func (l *Locker) leaveLate(id, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	l.cleanupFailed(id, l.b.Leave(ctx, id, token))
}

// cleanupFailed logs a cleanup's failure, if err is one.
func (l *Locker) cleanupFailed(id string, err error) {
	if err != nil {
		l.log.Warn("lock: cleanup after a failed or abandoned step failed; the entry expires on its own",
			"id", id, "err", wrap(context.Background(), "leave", id, err))
	}
}
