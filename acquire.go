package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// Result is the outcome of Acquire (and TryAcquire).
type Result struct {
	// Acquired reports that the lock was granted; Lease is then non-nil.
	Acquired bool
	// ID is the id that was asked for.
	ID string
	// WasInUse reports that the id was held, or had waiters, when the call
	// began: the caller queued, or gave up at once (NoWait).
	WasInUse bool
	// Lease is the granted lease, or nil.
	Lease *Lease
}

// AcquireOptions tunes one call of Acquire, AcquireMany or Do. A nil
// *AcquireOptions, and every zero field, means the default.
type AcquireOptions struct {
	// Token is the owner token to use. Default: 128 random bits from
	// crypto/rand. Supply one to make a retried call after an unknown
	// outcome idempotent (a retried acquire with the same token is a no-op
	// that reports the existing lease). At most backend.MaxTokenLength
	// (128) bytes. AcquireMany uses it for every id.
	Token string
	// QueueTimeout overrides the Locker's QueueTimeout for this call.
	QueueTimeout time.Duration
	// NoWait makes the call never queue: it takes what is free now, and
	// gives up on what is held or has waiters (Acquire: Acquired == false,
	// WasInUse == true; AcquireMany: the ids held are in the one
	// Snapshot's NotAcquired; Do: ErrNotAcquired, logged at Debug only).
	NoWait bool
	// KeepAlive makes the Locker keep the lease alive: it extends it by
	// its ttl every ExtendEvery, in one batched step with its other
	// kept-alive leases, until Release, Close, or loss (Lost then fires).
	// Default false (Do always keeps its lease alive).
	KeepAlive bool
	// ExtendEvery is the keep-alive period. Default ttl/3. It must be
	// shorter than ttl.
	ExtendEvery time.Duration
}

// check validates the options of a call with ttl, and returns the
// keep-alive period (0 when not kept alive).
func (o *AcquireOptions) check(ttl time.Duration) (time.Duration, error) {
	if err := checkToken(o.Token); err != nil {
		return 0, err
	}
	if o.QueueTimeout < 0 {
		return 0, argErr("opts.QueueTimeout", fmt.Sprintf("must not be negative, got %v", o.QueueTimeout))
	}
	if o.ExtendEvery < 0 || o.ExtendEvery >= ttl {
		return 0, argErr("opts.ExtendEvery", fmt.Sprintf("must be in [0, ttl), got %v with ttl %v", o.ExtendEvery, ttl))
	}
	if !o.KeepAlive {
		return 0, nil
	}
	if o.ExtendEvery > 0 {
		return o.ExtendEvery, nil
	}
	return max(ttl/3, time.Millisecond), nil
}

// Acquire takes the lock on id for ttl; opts may be nil (see
// AcquireOptions). If the id is free (and nobody is queued) it is granted
// at once with WasInUse == false. Otherwise the caller joins the id's FIFO
// queue and waits to be woken; it returns with Acquired == true and
// WasInUse == true when granted, or with Acquired == false, WasInUse ==
// true and a nil error when the queue timeout passes. It never retries on
// its own after that. With opts.NoWait it never queues: it returns
// Acquired == false and WasInUse == true at once when the id is held or
// has waiters. The lock is fair: NoWait does not jump a non-empty queue.
//
// When ctx ends, Acquire leaves the queue, holds nothing, and returns an
// error that matches ctx.Err(), within a few tens of milliseconds of the
// ctx's end even when the backend's client ignores deadlines or the store
// does not answer: a step still in flight then goes on in the background,
// and what it may leave is removed by token once it returns. A backend
// failure returns an error matching ErrBackend and the client's error; the
// call holds nothing afterwards. A timeout of the client's own (dial, read)
// is such a failure, not a ctx error, while ctx lives.
// Once queued, a failed step is retried with the same token (a no-op if it
// took effect) for up to WaiterTimeout, so a short outage costs no place in
// the queue. No retry runs past WaiterTimeout after the last step or
// heartbeat that found the caller queued; the error is returned then. A
// failed step is followed by a cleanup (Leave by token), except one that
// never reached the store (its queue entry, if any, expires on its own).
// Bad input (nil ctx, empty or too long id, ttl <= 0 or below the
// backend's resolution, bad opts) returns an *backend.ArgumentError before
// any I/O. ttl is truncated to the backend's resolution.
func (l *Locker) Acquire(ctx context.Context, id string, ttl time.Duration, opts *AcquireOptions) (Result, error) {
	var o AcquireOptions
	if opts != nil {
		o = *opts
	}
	if err := checkCtx(ctx); err != nil {
		return Result{ID: id}, err
	}
	if err := checkID("id", id); err != nil {
		return Result{ID: id}, err
	}
	ttl, err := l.checkTTL(ttl)
	if err != nil {
		return Result{ID: id}, err
	}
	every, err := o.check(ttl)
	if err != nil {
		return Result{ID: id}, err
	}
	if o.Token == "" {
		o.Token = newToken()
	}
	if o.QueueTimeout == 0 {
		o.QueueTimeout = l.queueTimeout
	}
	if err := l.begin(); err != nil {
		return Result{ID: id}, err
	}
	defer l.end()
	start := l.obsNow() // observer.go
	res, err := l.acquire(ctx, id, ttl, o)
	l.observeAcquire(ctx, start, id, o.NoWait, res, err)
	if res.Acquired && every > 0 {
		l.keepAlive(res.Lease, every)
	}
	return res, err
}

// TryAcquire is Acquire with NoWait: it takes the lock on id if it can be
// granted now, and never waits. It does not jump a non-empty queue, so it
// fails (Acquired == false, WasInUse == true, nil error) while others wait.
func (l *Locker) TryAcquire(ctx context.Context, id string, ttl time.Duration) (Result, error) {
	return l.Acquire(ctx, id, ttl, &AcquireOptions{NoWait: true})
}

func (l *Locker) acquire(ctx context.Context, id string, ttl time.Duration, o AcquireOptions) (Result, error) {
	start := time.Now()
	req := backend.AcquireRequest{ID: id, Token: o.Token, TTL: ttl, WaiterTTL: l.waiterTTL}

	var gr grace // the grace of this call's waits once ctx ended (await.go)
	inUse := false
	// Fast path: a plain try. Skipped when this Locker is already
	// subscribed to the id (it waits on it, or did a moment ago): the
	// waiting step below grants a free id just as well, so steady-state
	// contention costs one step less.
	if o.NoWait || !l.subscribed(id) {
		g, err, stray := l.acquireStep(ctx, &gr, req, false)
		switch {
		case stray: // its goroutine cleans up after it
			return Result{ID: id}, wrap(ctx, "acquire", id, err)
		case err != nil:
			return Result{ID: id}, l.abandon(ctx, &gr, "acquire", id, o.Token, err)
		}
		if g.Acquired {
			return Result{Acquired: true, ID: id, Lease: l.newLease(id, o.Token, start, ttl, g)}, nil
		}
		if o.NoWait {
			return Result{ID: id, WasInUse: true}, nil
		}
		inUse = true
	}

	// Slow path: subscribe before the check (L1), then queue.
	wake := make(chan struct{}, 1)
	told := make(chan time.Duration, 1) // the latest Wake.HolderTTL not yet read
	w := &waiter{id: id, token: o.Token, wake: func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}, told: func(d time.Duration) {
		for { // keep the latest: drop an unread older one
			select {
			case told <- d:
				return
			default:
			}
			select {
			case <-told:
			default:
			}
		}
	}}
	grants := make(chan grantMsg, 1) // a grant by hand-off (Wake.Grant)
	if l.handsOff {
		w.granted = func(h backend.HandOff, recv time.Time) {
			select {
			case grants <- grantMsg{h, recv}:
			default: // one grant per token: a second is a duplicate
			}
		}
	}
	if err := l.register(ctx, w); err != nil {
		return Result{ID: id, WasInUse: true}, err
	}
	defer l.unregister(w)

	queueTimer := time.NewTimer(o.QueueTimeout - time.Since(start))
	defer queueTimer.Stop()
	holder := time.NewTimer(time.Hour)
	holder.Stop()
	defer holder.Stop()

	req.Wait = true
	var r retries
	var woke time.Time // the last wake-up, for the observer's hand-off latency
	var pair clockPair // the latest step's send time and store time
	for {
		if r.over(l.waiterTTL) {
			return Result{ID: id, WasInUse: true}, l.abandon(ctx, &gr, "acquire", id, o.Token, r.last)
		}
		sent := time.Now()
		sctx, cancel := r.bound(ctx, l.waiterTTL)
		g, err, stray := l.acquireStep(sctx, &gr, req, true)
		err = r.cut(ctx, sctx, err)
		cancel()
		holder.Stop()
		if stray { // its goroutine leaves the queue after it
			return Result{ID: id, WasInUse: true}, wrap(ctx, "acquire", id, err)
		}
		if err != nil {
			// Queued, a failed step is retried with the same token (a no-op
			// if it took effect) while the entry can still be alive: an
			// outage shorter than WaiterTimeout costs no place in the queue.
			if !l.retryable(ctx, err) {
				return Result{ID: id, WasInUse: true}, l.abandon(ctx, &gr, "acquire", id, o.Token, err)
			}
			if r.failed(l.liveSince(w, sent), err) {
				l.log.Warn("lock: a waiting step failed; retrying with the same token while the queue entry lives",
					"id", id, "err", err, "for", l.waiterTTL)
			}
			holder.Reset(r.wait(l.waiterTTL, l.heartbeat))
		} else {
			r = retries{}
			if g.Queued {
				l.setRefreshed(w, sent)
			}
			if !g.StoreTime.IsZero() {
				pair = clockPair{sent, g.StoreTime}
			}
			if g.Acquired {
				l.observeHandoff(id, woke) // observer.go
				return Result{Acquired: true, ID: id, WasInUse: inUse, Lease: l.newLease(id, o.Token, sent, ttl, g)}, nil
			}
			inUse = true
			if w.ticket != 0 && g.Ticket != w.ticket {
				l.log.Warn("lock: a live waiter's queue entry was purged; it re-queued at the tail",
					"id", id, "old_ticket", w.ticket, "new_ticket", g.Ticket)
			}
			l.setTicket(w, g.Ticket)
			if g.Head && g.HolderTTL > 0 {
				// The holder's lease may end without a release (no wake-up is
				// sent then): look again when it would have expired.
				holder.Reset(g.HolderTTL + l.resolution)
			}
		}
	wait:
		for {
			select {
			case <-wake:
				woke = l.obsNow() // observer.go
				break wait
			case gm := <-grants:
				// Granted by the step that freed the lock: no step of ours.
				// A grant from before our latest step is stale (that step
				// found us queued: the lease was gone), and one with no
				// usable validity is no use: a step tells the truth then
				// (a retried grant reports the lease afresh).
				valid := gm.recv
				if fresh(gm.h, pair) {
					valid = handOffValidUntil(gm.h, pair, l.liveSince(w, time.Time{}), gm.recv)
				}
				if !valid.After(gm.recv) {
					woke = l.obsNow() // observer.go
					break wait
				}
				l.observeHandoff(id, gm.recv) // observer.go
				le := l.newLeaseUntil(id, o.Token, gm.recv, valid, ttl, gm.h.Fence)
				return Result{Acquired: true, ID: id, WasInUse: true, Lease: le}, nil
			case <-holder.C:
				woke = time.Time{}
				break wait
			case d := <-told:
				// This waiter became the head of a held lock: no step, but
				// a timer at the holder's TTL, since the lease may end
				// without a release. The wake-up left the store after the
				// step that measured d, so the timer fires after the
				// lease's end by the store.
				holder.Reset(d + l.resolution)
			case <-queueTimer.C:
				if err := l.cleanup(ctx, &gr, id, o.Token); err != nil {
					l.log.Warn("lock: leaving the queue after the queue timeout failed; the entry expires on its own",
						"id", id, "err", err)
				}
				return Result{ID: id, WasInUse: true}, nil
			case <-ctx.Done():
				return Result{ID: id, WasInUse: true}, joinErrs(wrap(ctx, "acquire", id, ctx.Err()), l.cleanup(ctx, &gr, id, o.Token))
			case <-l.done:
				return Result{ID: id, WasInUse: true}, joinErrs(wrap(ctx, "acquire", id, ErrClosed), l.cleanup(ctx, &gr, id, o.Token))
			}
		}
	}
}

// retryable reports whether a failed step may be retried: a store or
// client failure, not the caller's ctx nor one of the lock's own answers.
func (l *Locker) retryable(ctx context.Context, err error) bool {
	return ctx.Err() == nil && !isSentinel(err) && l.bgCtx.Err() == nil
}

// abandon handles a failed step: its outcome is unknown, so the token's
// queue entry and any raced grant are removed (S6). A step that never
// reached the store (fallback.Unsent) took no effect, and a cleanup sent
// now would most likely not reach it either: none is sent, and an entry
// an earlier step left expires after WaiterTimeout. The cleanup is waited
// for while ctx lives (see cleanup). It returns the step's error,
// wrapped.
func (l *Locker) abandon(ctx context.Context, g *grace, op, id, token string, err error) error {
	if errors.Is(err, backend.ErrQueueFull) || fallback.Unsent(err) {
		return wrap(ctx, op, id, err) // nothing was enqueued, or nothing was sent
	}
	if cerr := l.cleanup(ctx, g, id, token); cerr != nil {
		l.log.Warn("lock: cleanup after a failed step failed; the entry expires on its own",
			"id", id, "err", cerr)
	}
	return wrap(ctx, op, id, err)
}

// acquireStep runs one Acquire step, waited for while ctx lives (and the
// Locker is open; see await). A step the caller stopped waiting for
// (stray) is cleaned up by its own goroutine once it returns: a Leave by
// token when the caller was queued before it (queued) or when it may
// have left an entry or a grant.
func (l *Locker) acquireStep(ctx context.Context, g *grace, req backend.AcquireRequest, queued bool) (backend.Grant, error, bool) {
	w := waitFor{ctx: ctx, close: true}
	if w.inline() {
		gr, err := l.b.Acquire(ctx, req)
		return gr, err, false
	}
	return await(l, w, g, func() (backend.Grant, error) { return l.b.Acquire(ctx, req) },
		func(gr backend.Grant, err error) {
			if queued || left(gr, err) {
				l.leaveLate(req.ID, req.Token)
			}
		})
}

// left reports whether an Acquire step with this outcome may have left a
// queue entry or a grant of its token.
func left(g backend.Grant, err error) bool {
	if err != nil {
		return !fallback.Unsent(err) && !errors.Is(err, backend.ErrQueueFull)
	}
	return g.Acquired || g.Queued
}
