package lock

import (
	"context"
	"errors"
	"time"
)

// Do takes the lock on id (waiting in the queue like Acquire), runs fn while
// holding it, and always releases it, also when fn panics (the panic is
// re-raised after the release).
//
// While fn runs the lease is extended every ttl/3, and fn's context is
// cancelled, with cause ErrLeaseLost, as soon as the lease is known or
// presumed lost (no later than its ValidUntil). Close cancels it with cause
// ErrClosed and waits for Do to return. If the lease was lost while
// fn ran, Do returns fn's value and an error matching ErrLeaseLost (joined
// with fn's error, if any): fn may have run unprotected.
//
// A failed release (backend error) is logged and returned too; the lease
// then expires at its TTL.
//
// If the lock is not granted before the queue timeout, Do logs a warning
// and returns the zero T and ErrNotAcquired. If fn returns an error, Do
// logs it at Error level and returns it. A nil locker or fn is an
// *ArgumentError.
func Do[T any](ctx context.Context, l *Locker, id string, ttl time.Duration, fn func(ctx context.Context) (T, error)) (T, error) {
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
	res, err := l.Acquire(ctx, id, ttl)
	if err != nil {
		return zero, err
	}
	if !res.Acquired {
		l.log.WarnContext(ctx, "lock: not acquired before the queue timeout", "id", id)
		return zero, wrap("do", id, ErrNotAcquired)
	}
	le := res.Lease
	fctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		le.keepAlive(fctx, ttl, stop, cancel)
	}()

	finish := func() error {
		close(stop)
		<-renewed
		lost := context.Cause(fctx) == ErrLeaseLost
		cancel(nil)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer rcancel()
		rerr := le.Release(rctx)
		l.observeDoLost(le, lost, rerr) // observer.go
		switch {
		case lost || errors.Is(rerr, ErrNotHeld):
			return wrap("do", id, ErrLeaseLost)
		case rerr != nil:
			l.log.ErrorContext(ctx, "lock: release after fn failed; the lease expires at its TTL", "id", id, "err", rerr)
			return rerr
		}
		return nil
	}

	var v T
	var ferr error
	func() {
		defer func() {
			if p := recover(); p != nil {
				_ = finish()
				panic(p)
			}
		}()
		v, ferr = fn(fctx)
	}()
	endErr := finish()
	if ferr != nil {
		l.log.ErrorContext(ctx, "lock: fn failed under the lock", "id", id, "err", ferr)
	}
	return v, errors.Join(ferr, endErr)
}

// keepAlive extends the lease every ttl/3 until stop is closed, and cancels
// ctx with ErrLeaseLost when the lease is found or presumed lost.
func (le *Lease) keepAlive(ctx context.Context, ttl time.Duration, stop <-chan struct{}, cancel context.CancelCauseFunc) {
	every := ttl / 3
	if every <= 0 {
		every = ttl
	}
	t := time.NewTicker(every)
	defer t.Stop()
	lost := le.Lost()
	for {
		select {
		case <-stop:
			return
		case <-lost:
			cancel(ErrLeaseLost)
			return
		case <-le.l.done:
			cancel(ErrClosed)
			return
		case <-t.C:
			// While Extend is in flight this loop cannot see lost, so an
			// extend must not outlive the lease: bound it by ValidUntil
			// too, or fn's ctx would be cancelled up to ttl/3 late (S5).
			deadline := time.Now().Add(every)
			if vu := le.ValidUntil(); vu.Before(deadline) {
				deadline = vu
			}
			ectx, ecancel := context.WithDeadline(ctx, deadline)
			err := le.Extend(ectx, ttl)
			ecancel()
			if errors.Is(err, ErrNotHeld) {
				cancel(ErrLeaseLost)
				return
			}
			if err != nil && ctx.Err() == nil {
				le.l.log.WarnContext(ctx, "lock: extending the lease failed; will retry until it expires",
					"id", le.id, "err", err)
			}
		}
	}
}
