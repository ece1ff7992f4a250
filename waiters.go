package lock

import (
	"context"
	"time"

	"github.com/redislocker/lock/backend"
)

// waiter is one local queue entry: an Acquire call or one pending id of an
// AcquireMany call. The Locker routes wake-ups to it and heartbeats it.
type waiter struct {
	id, token string
	ticket    uint64     // from the last step; 0 = unknown. Guarded by Locker.mu.
	refreshed time.Time  // send time of the last step or heartbeat that found it queued; guarded by Locker.mu
	wake      func()     // must not block
	st        *idWaiters // the state w is registered in; nil when not. Guarded by Locker.mu.
	// told, if set, takes a wake-up that tells the waiter it became the
	// head of a held lock, with the holder's TTL (Wake.HolderTTL); without
	// it such a wake-up calls wake. Must not block.
	told func(holderTTL time.Duration)
	// granted, if set, takes a wake-up that carries a grant by hand-off
	// (Wake.Grant) and the local time it arrived; without it such a
	// wake-up calls wake (the next step finds the lock held by the token).
	// Must not block.
	granted func(h backend.HandOff, recv time.Time)
}

// idWaiters is the Locker's state for one id with local waiters: one
// backend subscription, shared by all of them (reference counted by the
// size of the set). Two waiting calls may share a caller-supplied token;
// a wake-up naming it wakes both. When the last waiter leaves, the
// subscription lingers for one heartbeat interval (idle set), so that a
// process that keeps contending on an id does not subscribe and
// unsubscribe around every wait.
type idWaiters struct {
	waiters map[*waiter]struct{}
	ready   chan struct{} // closed once the subscription is settled
	cancel  func()        // set before ready is closed, if subscribed; guarded by Locker.mu
	err     error         // set before ready is closed, if Subscribe failed
	idle    *time.Timer   // drops the lingering subscription; guarded by Locker.mu
}

// subscribed reports whether the Locker holds a subscription to id (with
// waiters, or lingering), so that a waiting step can skip the plain try:
// steady-state contention then costs one step less per acquisition.
func (l *Locker) subscribed(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.ids[id]
	return ok
}

// register adds w to the registry and returns once wake-ups for w.id can be
// delivered (the subscription exists). On error w is not registered.
//
// The id's subscription is shared by all its local waiters, so it is made
// by a goroutine of the Locker under the Locker's own context, bounded by
// WaiterTimeout, never under a caller's: a caller that gives up leaves the
// others' wait intact. A waiter whose subscription was started for another
// waiter and failed tries again with one of its own.
func (l *Locker) register(ctx context.Context, w *waiter) error {
	for attempt := 0; ; attempt++ {
		st, own, err := l.join(w)
		if err != nil {
			return err
		}
		select {
		case <-st.ready:
		case <-ctx.Done():
			l.unregister(w)
			return wrap(ctx, "subscribe", w.id, ctx.Err())
		}
		if st.err == nil {
			return nil
		}
		l.unregister(w)
		switch {
		case l.bgCtx.Err() != nil:
			return wrap(ctx, "subscribe", w.id, ErrClosed)
		case own || attempt >= 2 || ctx.Err() != nil:
			return wrap(ctx, "subscribe", w.id, st.err)
		}
	}
}

// join adds w to its id's state, creating it and starting its subscription
// when w is the first; own reports that case.
func (l *Locker) join(w *waiter) (st *idWaiters, own bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, false, ErrClosed
	}
	st, ok := l.ids[w.id]
	if !ok {
		st = &idWaiters{waiters: make(map[*waiter]struct{}, 1), ready: make(chan struct{})}
		l.ids[w.id] = st
		l.bg.Add(1)
		go l.subscribe(w.id, st)
	}
	l.stopIdle(st) // if it already fired, dropIdle sees this waiter and keeps st
	st.waiters[w] = struct{}{}
	l.observeWaiters(w.id, 1) // observer.go
	w.st = st
	if !l.hbRunning {
		l.hbRunning = true
		l.bg.Add(1)
		go l.heartbeatLoop()
	}
	return st, !ok, nil
}

// subscribe makes st's subscription under the Locker's context, bounded
// by WaiterTimeout and by Close whatever the client does with deadlines.
// If st was dropped meanwhile (its waiters left), it cancels the
// subscription; if the subscription failed, st is dropped so that the next
// waiter starts anew. A subscription made after the wait for it ended is
// cancelled at once.
func (l *Locker) subscribe(id string, st *idWaiters) {
	defer l.bg.Done()
	ctx, cancel := context.WithTimeout(l.bgCtx, l.waiterTTL)
	c, err, _ := await(l, waitFor{ctx: ctx}, nil, func() (func(), error) { return l.b.Subscribe(ctx, id, l.onWake) },
		func(c func(), err error) {
			if err == nil && c != nil {
				c()
			}
		})
	cancel()
	if err == nil && c == nil {
		c = func() {}
	}
	l.mu.Lock()
	st.cancel, st.err = c, err
	close(st.ready)
	orphan := l.ids[id] != st
	if err != nil && !orphan {
		delete(l.ids, id)
	}
	l.mu.Unlock()
	if orphan && c != nil {
		c()
	}
}

// unregister removes w. When it was the id's last waiter, the subscription
// lingers for one heartbeat interval (or goes at once if it failed, is not
// made yet, or the Locker is closing).
func (l *Locker) unregister(w *waiter) {
	l.mu.Lock()
	st := w.st
	if st == nil {
		l.mu.Unlock()
		return
	}
	delete(st.waiters, w)
	l.observeWaiters(w.id, -1) // observer.go
	w.st = nil
	if len(st.waiters) > 0 || l.ids[w.id] != st {
		l.mu.Unlock()
		return
	}
	select {
	case <-st.ready:
		if st.err == nil && !l.closed {
			l.idle.Add(1)
			st.idle = time.AfterFunc(l.heartbeat, func() {
				defer l.idle.Done()
				l.dropIdle(w.id, st)
			})
			l.mu.Unlock()
			return
		}
	default:
		// The subscription is still being made; subscribe cancels it
		// once it sees st dropped.
	}
	delete(l.ids, w.id)
	c := l.cancelOf(st)
	l.mu.Unlock()
	c()
}

// dropIdle ends a lingering subscription unless a waiter came back.
func (l *Locker) dropIdle(id string, st *idWaiters) {
	l.mu.Lock()
	if l.ids[id] != st || len(st.waiters) > 0 || st.idle == nil {
		l.mu.Unlock()
		return
	}
	delete(l.ids, id)
	c := l.cancelOf(st)
	l.mu.Unlock()
	c()
}

// dropAllIdle ends every lingering subscription; Close calls it once no
// call is in flight.
func (l *Locker) dropAllIdle() {
	l.mu.Lock()
	var cs []func()
	for id, st := range l.ids {
		l.stopIdle(st)
		cs = append(cs, l.cancelOf(st))
		delete(l.ids, id)
	}
	l.mu.Unlock()
	for _, c := range cs {
		c()
	}
	l.idle.Wait() // a timer that fired before it could be stopped
}

// stopIdle stops st's linger timer; l.mu must be held. A timer stopped
// before it fired will never run, so its count is given back here.
func (l *Locker) stopIdle(st *idWaiters) {
	if st.idle != nil {
		if st.idle.Stop() {
			l.idle.Done()
		}
		st.idle = nil
	}
}

// cancelOf returns the function that ends st's subscription, once st is
// dropped from l.ids; l.mu must be held. A subscription still being made
// is cancelled by subscribe itself, so then it returns a no-op.
func (l *Locker) cancelOf(st *idWaiters) func() {
	select {
	case <-st.ready:
		if st.cancel != nil {
			return st.cancel
		}
	default:
	}
	return func() {}
}

// setTicket records w's queue ticket, used to pick the earliest local
// waiter when a wake-up does not name one.
func (l *Locker) setTicket(w *waiter, t uint64) {
	l.mu.Lock()
	w.ticket = t
	l.mu.Unlock()
}

// onWake routes one wake-up: to the named waiter if it is local (to its
// granted function for a Wake.Grant, its told function for a
// Wake.HolderTTL); to every local waiter of the id for
// a Wake.All; otherwise to the local waiter with the lowest known ticket
// (waiters whose ticket is still unknown are woken too, since they may be
// ahead).
func (l *Locker) onWake(wk backend.Wake) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.ids[wk.ID]
	if st == nil {
		return
	}
	switch {
	case wk.All:
		for w := range st.waiters {
			w.wake()
		}
	case wk.Token != "":
		for w := range st.waiters {
			switch {
			case w.token != wk.Token:
			case wk.Grant != nil && w.granted != nil:
				w.granted(*wk.Grant, time.Now())
			case wk.Grant != nil:
				w.wake()
			case wk.HolderTTL > 0 && w.told != nil:
				w.told(wk.HolderTTL)
			default:
				w.wake()
			}
		}
	default:
		var best *waiter
		for w := range st.waiters {
			if w.ticket == 0 {
				w.wake()
				continue
			}
			if best == nil || w.ticket < best.ticket {
				best = w
			}
		}
		if best != nil {
			best.wake()
		}
	}
}

// heartbeatLoop sends one batched heartbeat for every local waiter each
// heartbeat interval, and exits when there are no waiters left (or on
// Close). A waiter whose entry is gone (purged) or that could be granted now
// (a lost wake-up) is woken to run its step again; so is every waiter when
// the heartbeat fails.
func (l *Locker) heartbeatLoop() {
	defer l.bg.Done()
	t := time.NewTimer(l.heartbeat)
	defer t.Stop()
	var batch []backend.Waiter
	var ws []*waiter
	for {
		select {
		case <-t.C:
		case <-l.done:
			l.mu.Lock()
			l.hbRunning = false
			l.mu.Unlock()
			return
		}
		batch, ws = batch[:0], ws[:0]
		l.mu.Lock()
		for _, st := range l.ids {
			for w := range st.waiters {
				batch = append(batch, backend.Waiter{ID: w.id, Token: w.token})
				ws = append(ws, w)
			}
		}
		if len(ws) == 0 {
			l.hbRunning = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()

		// Bounded by the heartbeat interval and by Close, whatever the
		// client does with deadlines. A stray heartbeat keeps its batch:
		// the next one is a new slice.
		ctx, cancel := context.WithTimeout(l.bgCtx, l.heartbeat)
		sent := time.Now()
		hb := batch
		res, err, stray := await(l, waitFor{ctx: ctx}, nil, func() ([]backend.HeartbeatResult, error) {
			return l.b.Heartbeat(ctx, hb, l.waiterTTL)
		}, nil)
		cancel()
		if stray {
			batch = nil
		}
		if err != nil && l.bgCtx.Err() == nil {
			// Each waiter re-checks with its own step, and gives up when
			// its steps keep failing for WaiterTimeout.
			l.log.Warn("lock: heartbeat failed; waiters re-check",
				"waiters", len(batch), "err", err)
			for _, w := range ws {
				w.wake()
			}
		}
		l.mu.Lock()
		for i, r := range res {
			if i < len(ws) && r.Queued {
				ws[i].refreshed = sent // the entry lives until sent+WaiterTimeout at least
			}
		}
		l.mu.Unlock()
		for i, r := range res {
			if i >= len(ws) {
				break
			}
			if !r.Queued || r.Ready {
				ws[i].wake()
			}
		}
		t.Reset(l.heartbeat)
	}
}
