package lock

import (
	"context"
	"sync"
	"time"

	"github.com/redislocker/lock/backend"
)

// wait is one caller's wait for one id in its queue: an Acquire call past
// its plain try, or one pending id of an AcquireMany call. It decides what
// happens on every event: a waiting step's outcome (a grant; a place in
// the queue, with a timer at the holder's TTL when it is the head; a
// failure, retried while the queue entry can be alive), a wake-up, a
// grant by hand-off (taken with no step when its validity is known), its
// timer and the queue timeout. Its driver (the call) runs the steps it
// asks for, alone or batched with other ids, and sleeps until the next
// event: a poke, or wakeAt.
type wait struct {
	l        *Locker
	w        waiter // the entry the room routes wake-ups to
	ttl      time.Duration
	sh       share     // the id's capacity and the lease's permits
	deadline time.Time // the queue timeout
	notify   func()    // pokes the driver; it must not block
	// batched: the driver steps at its own ticks, so only a grant by
	// hand-off pokes it; otherwise every wake-up does.
	batched bool

	mu      sync.Mutex // guards the events below, set by the room's wake-up routing
	woken   bool       // a step is wanted: a wake-up, or the first step
	wokeAt  time.Time  // when it was woken, for the observer (zero without one)
	toldDue time.Time  // a told wake-up's holder timer, not yet taken; zero: none
	grant   *grantMsg  // a grant by hand-off, not yet taken

	// Read and written by the driver only.
	due  time.Time // step then without a wake-up: the holder's TTL, or a retry; zero: none
	r    retries   // the run of failed steps
	pair clockPair // the latest step's send time and store time
	woke time.Time // the wake-up behind the latest step or grant, for the observer
}

// move is what a wait asks its driver to do next.
type move uint8

const (
	moveSleep    move = iota // nothing until a poke or wakeAt
	moveStep                 // run a waiting step (stepped takes its outcome)
	moveHanded               // a grant by hand-off was taken: its lease is the call's
	moveTimedOut             // the queue timeout passed
)

// newWait returns the wait of token for id, its lease's ttl and share,
// which gives up at deadline and calls notify to poke its driver (see
// wait.batched). Its first move is a step.
func (l *Locker) newWait(id, token string, ttl time.Duration, sh share, deadline time.Time, notify func(), batched bool) *wait {
	wt := &wait{l: l, ttl: ttl, sh: sh, deadline: deadline, notify: notify, batched: batched, woken: true}
	wt.w = waiter{id: id, token: token, wake: wt.wake, told: wt.told}
	if l.handsOff {
		wt.w.granted = wt.granted
	}
	return wt
}

// request returns the Acquire step of token for id: a plain try, or with
// join a waiting step (enqueue, or keep its place, and refresh the entry).
func (l *Locker) request(id, token string, ttl time.Duration, sh share, join bool) backend.AcquireRequest {
	return backend.AcquireRequest{ID: id, Token: token, TTL: ttl, Wait: join, WaiterTTL: l.waiterTTL,
		Capacity: sh.capacity, Permits: sh.permits}
}

// request returns the wait's waiting step.
func (wt *wait) request() backend.AcquireRequest {
	return wt.l.request(wt.w.id, wt.w.token, wt.ttl, wt.sh, true)
}

// wake takes a plain wake-up: re-check with a step.
func (wt *wait) wake() {
	wt.mu.Lock()
	wt.woken = true
	wt.wokeAt = wt.l.obsNow()
	wt.mu.Unlock()
	if !wt.batched {
		wt.signal()
	}
}

// told takes a wake-up that makes the wait the head of a held lock: no
// step, but a timer at the holder's TTL, since the lease may end without
// a release. The wake-up left the store after the step that measured
// holderTTL, so the timer fires after the lease's end by the store.
func (wt *wait) told(holderTTL time.Duration) {
	wt.mu.Lock()
	wt.toldDue = time.Now().Add(holderTTL + wt.l.resolution)
	wt.mu.Unlock()
	if !wt.batched {
		wt.signal()
	}
}

// granted takes a grant by hand-off that arrived at recv. One grant per
// token is outstanding: a second before the first is taken is a
// duplicate.
func (wt *wait) granted(h backend.HandOff, recv time.Time) {
	wt.mu.Lock()
	first := wt.grant == nil
	if first {
		wt.grant = &grantMsg{h, recv}
	}
	wt.mu.Unlock()
	if first {
		wt.signal()
	}
}

// signal pokes the driver.
func (wt *wait) signal() { wt.notify() }

// nudge sends on c unless a send is already pending there.
func nudge(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// next decides at now what the wait does: give up at the queue timeout,
// take a grant by hand-off, step when woken or when its timer is due, or
// sleep.
func (wt *wait) next(now time.Time) (move, *Lease) {
	if !now.Before(wt.deadline) {
		return moveTimedOut, nil
	}
	if le := wt.takeHandOff(); le != nil {
		return moveHanded, le
	}
	wt.mu.Lock()
	woken, wokeAt, toldDue := wt.woken, wt.wokeAt, wt.toldDue
	wt.woken, wt.toldDue = false, time.Time{}
	wt.mu.Unlock()
	if !toldDue.IsZero() {
		wt.due = toldDue
	}
	switch {
	case woken:
		wt.woke = wokeAt
	case !wt.due.IsZero() && !now.Before(wt.due):
		wt.woke = time.Time{}
	default:
		return moveSleep, nil
	}
	return moveStep, nil
}

// wakeAt returns when the wait has something to do without a poke: its
// timer, or the queue timeout.
func (wt *wait) wakeAt() time.Time {
	if !wt.due.IsZero() && wt.due.Before(wt.deadline) {
		return wt.due
	}
	return wt.deadline
}

// takeHandOff takes the grant by hand-off that came, if any, and returns
// its lease. A grant from before the latest step is stale (that step
// found the wait queued: the lease was gone), and one with no usable
// validity is no use: the wait asks for a step instead, which tells the
// truth (a retried grant reports the lease afresh).
func (wt *wait) takeHandOff() *Lease {
	wt.mu.Lock()
	gm := wt.grant
	wt.grant = nil
	wt.mu.Unlock()
	if gm == nil {
		return nil
	}
	valid := gm.recv
	if fresh(gm.h, wt.pair) {
		valid = handOffValidUntil(gm.h, wt.pair, wt.l.room.liveSince(&wt.w, time.Time{}), gm.recv)
	}
	if !valid.After(gm.recv) {
		wt.wake()
		return nil
	}
	wt.woke = gm.recv
	return wt.l.newLeaseUntil(wt.w.id, wt.w.token, gm.recv, valid, wt.ttl, gm.h.Fence)
}

// stepped takes the outcome of a waiting step sent at sent, and returns
// the lease when it granted. A failure is retried with the same token (a
// no-op if it took effect) while the queue entry can still be alive, so
// that an outage shorter than WaiterTimeout costs no place in the queue:
// the wait asks for a step again after a backoff, and retrying reports
// that this failure began the run. A failure that is not retried ends the
// wait with its error.
func (wt *wait) stepped(ctx context.Context, sent time.Time, g backend.Grant, err error) (le *Lease, retrying bool, _ error) {
	wt.due = time.Time{}
	if err != nil {
		if !wt.l.retryable(ctx, err) {
			return nil, false, err
		}
		retrying = wt.r.failed(wt.l.room.liveSince(&wt.w, sent), err)
		wt.due = time.Now().Add(wt.r.wait(wt.l.waiterTTL, wt.l.heartbeat))
		return nil, retrying, nil
	}
	wt.r = retries{}
	if g.Queued {
		wt.l.room.setRefreshed(&wt.w, sent)
	}
	if !g.StoreTime.IsZero() {
		wt.pair = clockPair{sent, g.StoreTime}
	}
	if g.Acquired {
		return wt.l.newLease(wt.w.id, wt.w.token, sent, wt.ttl, g), false, nil
	}
	if wt.w.ticket != 0 && g.Ticket != wt.w.ticket {
		wt.l.log.Warn("lock: a live waiter's queue entry was purged; it re-queued at the tail",
			"id", wt.w.id, "old_ticket", wt.w.ticket, "new_ticket", g.Ticket)
	}
	wt.l.room.setTicket(&wt.w, g.Ticket)
	if g.Head && g.HolderTTL > 0 {
		// The holder's lease may end without a release (no wake-up is
		// sent then): look again when it would have expired.
		wt.due = time.Now().Add(g.HolderTTL + wt.l.resolution)
	}
	return nil, false, nil
}

// over returns the last failure once the run of failed steps has lasted
// WaiterTimeout: no step may start then, and the wait ends with it.
func (wt *wait) over() error {
	if wt.r.over(wt.l.waiterTTL) {
		return wt.r.last
	}
	return nil
}

// runEnd returns when the current run of failed steps ends (zero: none
// runs): a step sent during it is cut then.
func (wt *wait) runEnd() time.Time {
	return wt.r.end(wt.l.waiterTTL)
}

// cut returns a step's error, or, when the run's end (not ctx) cut the
// step sent under sctx, the run's last error as of unknown outcome.
func (wt *wait) cut(ctx, sctx context.Context, err error) error {
	return wt.r.cut(ctx, sctx, err)
}
