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
	// Capacity, 2 or more, makes the id a semaphore: leases on it are held
	// together while their Permits add up to at most Capacity, and the
	// queue stays FIFO (a waiter that does not fit yet holds back every
	// waiter behind it, so an exclusive one is never starved; the waiters
	// at the head that fit are granted together). Each lease has its own
	// token, fence, TTL and release, as a mutex's. A reader-writer lock is
	// a semaphore whose readers take 1 permit and whose writer takes them
	// all (Permits: Capacity). Default 0: a mutex, as is 1. An id has one
	// capacity while it is held or has waiters: a call with another one
	// fails with ErrCapacity. Needs a backend that is a backend.Sharer
	// (else ErrUnsupported, before any I/O).
	Capacity int
	// Permits is how many of Capacity's permits the lease takes, from 1
	// to Capacity (exclusive). Default 1.
	Permits int
}

// share is the capacity of a call's id and the permits of its leases
// (see AcquireOptions.Capacity); zero for a mutex.
type share struct{ capacity, permits int }

// share validates o's Capacity and Permits for this Locker's backend and
// returns them, normalized: a Capacity of 1 is a mutex.
func (l *Locker) share(o *AcquireOptions) (share, error) {
	switch {
	case o.Capacity < 0:
		return share{}, argErr("opts.Capacity", fmt.Sprintf("must not be negative, got %d", o.Capacity))
	case o.Permits < 0:
		return share{}, argErr("opts.Permits", fmt.Sprintf("must not be negative, got %d", o.Permits))
	case o.Capacity <= 1 && o.Permits > 1:
		return share{}, argErr("opts.Permits", fmt.Sprintf("is %d without a Capacity of 2 or more (a mutex takes 1)", o.Permits))
	case o.Capacity <= 1:
		return share{}, nil
	case o.Permits > o.Capacity:
		return share{}, argErr("opts.Permits", fmt.Sprintf("is %d, more than opts.Capacity (%d)", o.Permits, o.Capacity))
	case !l.shares:
		return share{}, fmt.Errorf("%w (opts.Capacity %d: the backend is not a backend.Sharer)", ErrUnsupported, o.Capacity)
	}
	return share{capacity: o.Capacity, permits: max(o.Permits, 1)}, nil
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
	sh, err := l.share(&o)
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
	start := l.obsNow()
	res, err := l.acquire(ctx, id, ttl, sh, o)
	l.observeAcquire(ctx, start, id, o.NoWait, sh, res, err)
	if res.Acquired && every > 0 {
		l.keeper.keepAlive(res.Lease, every)
	}
	return res, err
}

// TryAcquire is Acquire with NoWait: it takes the lock on id if it can be
// granted now, and never waits. It does not jump a non-empty queue, so it
// fails (Acquired == false, WasInUse == true, nil error) while others wait.
func (l *Locker) TryAcquire(ctx context.Context, id string, ttl time.Duration) (Result, error) {
	return l.Acquire(ctx, id, ttl, &AcquireOptions{NoWait: true})
}

// acquireCall is one Acquire call past its input checks.
type acquireCall struct {
	l     *Locker
	ctx   context.Context
	id    string
	ttl   time.Duration
	sh    share
	o     AcquireOptions
	start time.Time
	gr    grace // the grace of the call's waits once ctx ended
	inUse bool  // a step found the id held or with waiters
}

// acquire tries id, and queues for it unless it was granted or NoWait.
// The plain try is skipped when this Locker is already subscribed to the
// id (it waits on it, or did a moment ago): the first waiting step grants
// a free id just as well, so steady-state contention costs one step less.
func (l *Locker) acquire(ctx context.Context, id string, ttl time.Duration, sh share, o AcquireOptions) (Result, error) {
	c := &acquireCall{l: l, ctx: ctx, id: id, ttl: ttl, sh: sh, o: o, start: time.Now()}
	if o.NoWait || !l.room.subscribed(id) {
		if res, done, err := c.try(); done {
			return res, err
		}
	}
	return c.queue()
}

// try runs the plain try; done reports that the call is over: granted,
// failed, or held with NoWait.
func (c *acquireCall) try() (res Result, done bool, err error) {
	g, err, stray := c.l.acquireStep(c.ctx, &c.gr, c.l.request(c.id, c.o.Token, c.ttl, c.sh, false), false)
	switch {
	case stray: // its goroutine cleans up after it
		return Result{ID: c.id}, true, wrap(c.ctx, "acquire", c.id, err)
	case err != nil:
		return Result{ID: c.id}, true, c.l.abandon(c.ctx, &c.gr, "acquire", c.id, c.o.Token, err)
	case g.Acquired:
		return Result{Acquired: true, ID: c.id, Lease: c.l.newLease(c.id, c.o.Token, c.start, c.ttl, g)}, true, nil
	case c.o.NoWait:
		return c.notAcquired(), true, nil
	}
	c.inUse = true
	return Result{}, false, nil
}

// queue waits in the id's queue: it subscribes before its first step
// (L1), then runs the steps its wait asks for, until a grant, a failure,
// the queue timeout, the end of ctx or Close.
func (c *acquireCall) queue() (Result, error) {
	poke := make(chan struct{}, 1)
	wt := c.l.newWait(c.id, c.o.Token, c.ttl, c.sh, c.start.Add(c.o.QueueTimeout), func() { nudge(poke) }, false)
	if err := c.l.room.register(c.ctx, &wt.w); err != nil {
		return c.notAcquired(), err
	}
	defer c.l.room.unregister(&wt.w)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		switch mv, le := wt.next(time.Now()); mv {
		case moveStep:
			if res, done, err := c.step(wt); done {
				return res, err
			}
		case moveHanded:
			c.l.observeHandoff(c.id, wt.woke)
			return Result{Acquired: true, ID: c.id, WasInUse: true, Lease: le}, nil
		case moveTimedOut:
			return c.timedOut()
		case moveSleep:
			if err := c.sleep(wt, poke, timer); err != nil {
				return c.notAcquired(), err
			}
		}
	}
}

// step runs one waiting step and gives its outcome to wt; done reports
// that the call is over: granted, or failed for good.
func (c *acquireCall) step(wt *wait) (res Result, done bool, err error) {
	if err := wt.over(); err != nil {
		return c.notAcquired(), true, c.l.abandon(c.ctx, &c.gr, "acquire", c.id, c.o.Token, err)
	}
	sent := time.Now()
	sctx, cancel := boundTo(c.ctx, wt.runEnd())
	g, err, stray := c.l.acquireStep(sctx, &c.gr, wt.request(), true)
	err = wt.cut(c.ctx, sctx, err)
	cancel()
	if stray { // its goroutine leaves the queue after it
		return c.notAcquired(), true, wrap(c.ctx, "acquire", c.id, err)
	}
	le, retrying, ferr := wt.stepped(c.ctx, sent, g, err)
	switch {
	case ferr != nil:
		return c.notAcquired(), true, c.l.abandon(c.ctx, &c.gr, "acquire", c.id, c.o.Token, ferr)
	case le != nil:
		c.l.observeHandoff(c.id, wt.woke)
		return Result{Acquired: true, ID: c.id, WasInUse: c.inUse, Lease: le}, true, nil
	case err == nil:
		c.inUse = true
	case retrying:
		c.l.log.Warn("lock: a waiting step failed; retrying with the same token while the queue entry lives",
			"id", c.id, "err", err, "for", c.l.waiterTTL)
	}
	return Result{}, false, nil
}

// sleep waits for wt's next event: a poke (a wake-up or a grant), its
// timer or the queue timeout. The end of ctx, or Close, ends the call
// instead: it leaves the queue, and the error says why.
func (c *acquireCall) sleep(wt *wait, poke <-chan struct{}, timer *time.Timer) error {
	timer.Reset(time.Until(wt.wakeAt()))
	var why error
	select {
	case <-poke:
		return nil
	case <-timer.C:
		return nil
	case <-c.ctx.Done():
		why = c.ctx.Err()
	case <-c.l.life.done:
		why = ErrClosed
	}
	return joinErrs(wrap(c.ctx, "acquire", c.id, why), c.l.cleanup(c.ctx, &c.gr, c.id, c.o.Token))
}

// timedOut ends a call whose queue timeout passed: it leaves the queue.
func (c *acquireCall) timedOut() (Result, error) {
	if err := c.l.cleanup(c.ctx, &c.gr, c.id, c.o.Token); err != nil {
		c.l.log.Warn("lock: leaving the queue after the queue timeout failed; the entry expires on its own",
			"id", c.id, "err", err)
	}
	return c.notAcquired(), nil
}

// notAcquired is the Result of a call that ends without the lock after
// it found the id in use.
func (c *acquireCall) notAcquired() Result { return Result{ID: c.id, WasInUse: true} }

// retryable reports whether a failed step may be retried: a store or
// client failure, not the caller's ctx nor one of the lock's own answers.
func (l *Locker) retryable(ctx context.Context, err error) bool {
	return ctx.Err() == nil && !isSentinel(err) && l.life.ctx.Err() == nil
}

// abandon handles a failed step: its outcome is unknown, so the token's
// queue entry and any raced grant are removed (S6). A step that never
// reached the store (fallback.Unsent) took no effect, and a cleanup sent
// now would most likely not reach it either: none is sent, and an entry
// an earlier step left expires after WaiterTimeout. The cleanup is waited
// for while ctx lives (see cleanup). It returns the step's error,
// wrapped.
func (l *Locker) abandon(ctx context.Context, g *grace, op, id, token string, err error) error {
	if refused(err) || fallback.Unsent(err) {
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
	return await(l.life, w, g, func() (backend.Grant, error) { return l.b.Acquire(ctx, req) },
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
		return !fallback.Unsent(err) && !refused(err)
	}
	return g.Acquired || g.Queued
}

// refused reports whether err is an Acquire step's answer that it changed
// nothing: a full queue, or another capacity.
func refused(err error) bool {
	return errors.Is(err, backend.ErrQueueFull) || errors.Is(err, backend.ErrCapacity)
}
