package lock

import (
	"context"
	"errors"
	"time"
)

// Do takes the lock on id, runs fn with the lease, and always releases it,
// also when fn panics (the panic is re-raised after the release). fn gets
// the lease so that it can pass Lease.Fence with its writes and read
// ValidUntil.
//
// opts are those of Acquire (nil for defaults): by default Do waits in
// the queue like Acquire; with NoWait it never waits, which runs a job once
// across replicas (the replicas that find the lock held skip the job);
// QueueTimeout and Token apply to this call. Do always keeps the lease
// alive while fn runs, every ExtendEvery (default ttl/3).
//
// fn's context is cancelled, with cause ErrLeaseLost, when the lease is
// found or presumed lost: by the Locker's own timer at ValidUntil at the
// latest, even while an extend is stuck in a client that ignores deadlines.
// Close cancels it with cause ErrClosed and waits for Do to return.
//
// If the lock is not acquired, Do returns the zero T and an error matching
// ErrNotAcquired, without calling fn. It logs a warning when the queue
// timeout passed, and only at Debug level when the lock was held and
// NoWait was set: a skip the caller asked for is no warning. If fn returns
// an error, Do returns it, and logs it at Debug level only (the caller
// has it). If the lease was lost before fn returned and
// the release did not find it still held, fn may have run unprotected: Do
// returns fn's value and an error matching ErrLeaseLost (with fn's error,
// if any). A lease that ends after fn returned is no error. A release that
// fails otherwise (backend error) is logged and returned; the lease then
// expires at its TTL. A nil locker or fn is an *ArgumentError.
//
// ctx bounds Do's own waits as it bounds Acquire's: the acquire, and the
// release after fn, which is waited for while ctx lives (or for a few
// milliseconds more when ctx had ended by the time fn returned). A
// release still running then goes on in the background; Do returns fn's
// value and an error matching ctx.Err() (or ErrLeaseLost, as above).
func Do[T any](ctx context.Context, l *Locker, id string, ttl time.Duration,
	fn func(ctx context.Context, lease *Lease) (T, error), opts *AcquireOptions) (T, error) {
	var zero T
	if l == nil {
		return zero, argErr("l", "nil *Locker")
	}
	if fn == nil {
		return zero, argErr("fn", "nil function")
	}
	if err := checkCtx(ctx); err != nil {
		return zero, err
	}
	// Close waits for Do to return, and cancels fn's ctx meanwhile.
	if err := l.begin(); err != nil {
		return zero, err
	}
	defer l.end()
	o := AcquireOptions{}
	if opts != nil {
		o = *opts
	}
	o.KeepAlive = true
	res, err := l.Acquire(ctx, id, ttl, &o)
	if err != nil {
		return zero, err
	}
	if !res.Acquired {
		if o.NoWait {
			l.log.DebugContext(ctx, "lock: not acquired; fn was not run", "id", id, "reason", "the lock is held and NoWait is set")
		} else {
			l.log.WarnContext(ctx, "lock: not acquired; fn was not run", "id", id, "reason", "the queue timeout passed")
		}
		return zero, wrap(ctx, "do", id, ErrNotAcquired)
	}
	le := res.Lease
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	watched := make(chan struct{})
	lost := le.Lost()
	go func() {
		defer close(watched)
		select {
		case <-stop:
		case <-lost:
			if le.lostBy(time.Now()) {
				cancel(ErrLeaseLost)
			}
		case <-l.life.done:
			cancel(ErrClosed)
		}
	}()

	finish := func(fnEnd time.Time) error {
		lostInFn := le.lostBy(fnEnd)
		close(stop)
		<-watched
		// The release outlives ctx (bounded by cleanupTimeout), but is
		// waited for only while ctx lives, or for a grace from now if ctx
		// has ended already; then it goes on in the background.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		g := &grace{}
		if ctxDone(ctx) {
			g.end = time.Now().Add(ctxGrace)
		}
		rerr, pending := le.release(waitFor{ctx: ctx, bound: rctx}, g, rctx, rcancel)
		l.observeDoLost(le, lostInFn && rerr != nil, rerr)
		switch {
		case rerr == nil:
			// Still held at the release: fn never ran unprotected.
			return nil
		case lostInFn:
			l.log.ErrorContext(ctx, "lock: the lease was lost while fn ran; fn may have run unprotected", "id", id, "release_err", rerr)
			return wrap(ctx, "do", id, ErrLeaseLost)
		case pending && ctxDone(ctx):
			l.log.DebugContext(ctx, "lock: ctx ended before the release after fn returned; it goes on in the background", "id", id)
			return rerr
		case errors.Is(rerr, ErrNotHeld):
			// The lease ended after fn returned: nothing was unprotected.
			return nil
		default:
			l.log.ErrorContext(ctx, "lock: release after fn failed; the lease expires at its TTL", "id", id, "err", rerr)
			return rerr
		}
	}

	var v T
	var ferr error
	func() {
		defer func() {
			if p := recover(); p != nil {
				_ = finish(time.Now())
				panic(p)
			}
		}()
		v, ferr = fn(fctx, le)
	}()
	endErr := finish(time.Now())
	if ferr != nil {
		l.log.DebugContext(ctx, "lock: fn failed under the lock", "id", id, "err", ferr)
	}
	return v, joinErrs(ferr, endErr)
}
