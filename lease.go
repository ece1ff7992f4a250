package lock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redislocker/lock/backend"
)

// Lease is a granted lock. Its methods are safe for concurrent use.
type Lease struct {
	l     *Locker
	id    string
	token string
	fence uint64
	since time.Time // when the acquire was sent: the start of the hold time

	op sync.Mutex // serialises Release and Extend, so Release is idempotent

	mu         sync.Mutex
	validUntil time.Time
	ttl        time.Duration // of the grant or the last Extend: what keep-alive extends by
	state      leaseState
	lostAt     time.Time     // when the loss was signalled (at validUntil, or ErrNotHeld); zero if not
	lost       chan struct{} // made on the first call of Lost
	timer      *time.Timer   // closes lost at validUntil

	// Keep-alive, guarded by keeper.mu: every is the period (0 = not kept
	// alive), due the time of the next extend.
	every time.Duration
	due   time.Time
}

type leaseState uint8

const (
	held     leaseState = iota
	released            // Release succeeded
	notHeld             // the backend said ErrNotHeld
)

func (l *Locker) newLease(id, token string, sent time.Time, ttl time.Duration, g backend.Grant) *Lease {
	valid := ttl
	if g.TTL > 0 && g.TTL < valid {
		valid = g.TTL
	}
	return l.newLeaseUntil(id, token, sent, sent.Add(valid), ttl, g.Fence)
}

// newLeaseUntil returns a lease valid until validUntil, granted about
// since.
func (l *Locker) newLeaseUntil(id, token string, since, validUntil time.Time, ttl time.Duration, fence uint64) *Lease {
	return &Lease{l: l, id: id, token: token, fence: fence, validUntil: validUntil, ttl: ttl, since: since}
}

// ID returns the lock id.
func (le *Lease) ID() string { return le.id }

// Token returns the owner token.
func (le *Lease) Token() string { return le.token }

// Fence returns the fencing token: strictly increasing per id across
// holders, in grant order, and unchanged by Extend. Give it to the resource
// you protect and have it reject writes with a lower fence than it has seen.
func (le *Lease) Fence() uint64 { return le.fence }

// ValidUntil returns the time until which the lease is certainly held, by
// this process's clock: measured from the moment the acquire (or the last
// successful extend) was sent, so it is never later than the backend's
// expiry. Clock drift between this process and the backend is not counted,
// except for a lease granted by hand-off (see S2 in the package doc).
func (le *Lease) ValidUntil() time.Time {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.validUntil
}

// Lost returns a channel that is closed when the lease has ended or is
// presumed lost: at ValidUntil unless extended before, when Extend,
// Release or keep-alive finds it not held, and also when Release succeeds
// (the lease ended on purpose). Once closed it stays closed, even if a late
// extend succeeds.
//
// The channel is closed by the Locker's own timer at ValidUntil, whatever
// the backend's client does with deadlines: an Extend stuck on a stalled
// server does not delay it. The first call arms one runtime timer; none is
// used before.
func (le *Lease) Lost() <-chan struct{} {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.lost == nil {
		le.lost = make(chan struct{})
		d := time.Until(le.validUntil)
		switch {
		case le.state != held || !le.lostAt.IsZero():
			close(le.lost)
		case d <= 0:
			le.markLostLocked()
		default:
			le.timer = time.AfterFunc(d, le.expire)
		}
	}
	return le.lost
}

// expire runs at validUntil; it signals the loss unless an extend moved it.
func (le *Lease) expire() {
	le.mu.Lock()
	defer le.mu.Unlock()
	if d := time.Until(le.validUntil); d > 0 && le.state == held && le.lostAt.IsZero() {
		le.timer.Reset(d)
		return
	}
	le.markLostLocked()
}

// keptGone reports whether keep-alive is done with the lease: it ended
// (a Release, or an Extend that found it not held, which closed Lost
// already; Release takes it off the kept leases a moment after), or it is
// lost: its loss was signalled, or ValidUntil has passed (then keptGone
// signals it, in case nobody armed the timer). lost reports the latter:
// a lease that expired before keep-alive could extend it.
func (le *Lease) keptGone(now time.Time) (gone, lost bool) {
	le.mu.Lock()
	defer le.mu.Unlock()
	switch {
	case le.state != held:
		return true, false
	case le.lostAt.IsZero() && now.Before(le.validUntil):
		return false, false
	}
	le.markLostLocked()
	return true, true
}

// markLostLocked records when a held lease was found or presumed lost and
// closes lost; le.mu must be held.
func (le *Lease) markLostLocked() {
	if le.state == held && le.lostAt.IsZero() {
		le.lostAt = time.Now()
	}
	le.closeLost()
}

// lostBy reports whether the lease was found or presumed lost at or before
// t: its loss was signalled by then, or t is not before ValidUntil.
func (le *Lease) lostBy(t time.Time) bool {
	le.mu.Lock()
	defer le.mu.Unlock()
	if !le.lostAt.IsZero() {
		return !le.lostAt.After(t)
	}
	return le.state != released && !t.Before(le.validUntil)
}

// extended records a successful extend sent at sent; a lease already
// presumed lost stays lost.
func (le *Lease) extended(sent time.Time, ttl time.Duration) {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.state == held && le.lostAt.IsZero() {
		le.validUntil = sent.Add(ttl)
		le.ttl = ttl
	}
}

// closeLost closes lost if it was made; le.mu must be held.
func (le *Lease) closeLost() {
	if le.timer != nil {
		le.timer.Stop()
	}
	if le.lost != nil {
		select {
		case <-le.lost:
		default:
			close(le.lost)
		}
	}
}

func (le *Lease) current() leaseState {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.state
}

// end records that the lease ended: released, or found not held. Only a
// held lease changes state. It also stops its keep-alive.
func (le *Lease) end(s leaseState) {
	le.l.observeEnd(le, s)
	le.mu.Lock()
	if le.state == held {
		if s == notHeld && le.lostAt.IsZero() {
			le.lostAt = time.Now()
		}
		le.state = s
	}
	le.closeLost()
	le.mu.Unlock()
	le.l.keeper.unkeep(le)
}

// Release releases the lock and wakes the head of its queue. It is
// idempotent: after a successful Release it returns nil again without I/O,
// and after ErrNotHeld it returns ErrNotHeld again. A lease that expired,
// or that another owner holds now, returns ErrNotHeld and nothing changes.
// A backend failure leaves the lease as it was; Release can be retried.
// Once the lease has ended (released or not held), Lost is closed and
// keep-alive stops.
//
// When ctx ends first, Release returns an error matching ctx.Err() within
// moments, whatever the client does with deadlines; the release goes on
// in the background, and its outcome is recorded when it returns.
func (le *Lease) Release(ctx context.Context) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	err, _ := le.release(waitFor{ctx: ctx}, nil, ctx, nil)
	return err
}

// release runs Release's step under sctx, waited for as w and g say (see
// await), and calls done (if not nil) when it returns. The step waits for
// the lease's other steps (le.op), and records its own outcome: pending
// reports one that goes on in the background.
func (le *Lease) release(w waitFor, g *grace, sctx context.Context, done func()) (err error, pending bool) {
	if w.inline() {
		err = le.releaseStep(sctx, done)
	} else {
		_, err, pending = await(le.l.life, w, g, func() (struct{}, error) { return struct{}{}, le.releaseStep(sctx, done) }, nil)
	}
	return wrap(w.ctx, "release", le.id, err), pending
}

// releaseStep is release's step.
func (le *Lease) releaseStep(sctx context.Context, done func()) error {
	if done != nil {
		defer done()
	}
	le.op.Lock()
	defer le.op.Unlock()
	switch le.current() {
	case released:
		return nil
	case notHeld:
		return ErrNotHeld
	}
	err := le.l.b.Release(sctx, le.id, le.token)
	switch {
	case err == nil:
		le.end(released)
	case errors.Is(err, backend.ErrNotHeld):
		le.end(notHeld)
	}
	return err
}

// Extend sets the lease's time to live to ttl from now, if it is still
// held; the fence stays. It never re-creates an expired lock: then it
// returns ErrNotHeld, and Lost is closed. On success ValidUntil moves to the
// moment Extend was sent plus ttl (unless Lost was already closed: a lease
// presumed lost stays so), and a kept-alive lease is extended by ttl from
// then on. A backend failure leaves ValidUntil as it was. When ctx ends
// first, Extend returns an error matching ctx.Err() within moments; the
// extend goes on in the background, and its outcome is recorded when it
// returns.
func (le *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := checkCtx(ctx); err != nil {
		return err
	}
	ttl, err := le.l.checkTTL(ttl)
	if err != nil {
		return err
	}
	if w := (waitFor{ctx: ctx}); w.inline() {
		err = le.extendStep(ctx, ttl)
	} else {
		_, err, _ = await(le.l.life, w, nil, func() (struct{}, error) { return struct{}{}, le.extendStep(ctx, ttl) }, nil)
	}
	return wrap(ctx, "extend", le.id, err)
}

// extendStep is Extend's step.
func (le *Lease) extendStep(ctx context.Context, ttl time.Duration) error {
	le.op.Lock()
	defer le.op.Unlock()
	if le.current() != held {
		return ErrNotHeld
	}
	sent := time.Now()
	err := le.l.b.Extend(ctx, le.id, le.token, ttl)
	le.l.obs.extend(le, err)
	switch {
	case err == nil:
		le.extended(sent, ttl)
		le.l.keeper.rekeep(le, sent)
	case errors.Is(err, backend.ErrNotHeld):
		le.end(notHeld)
	}
	return err
}
