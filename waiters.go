package lock

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redislocker/lock/backend"
)

// waiter is one local queue entry: an Acquire call or one pending id of an
// AcquireMany call. The room routes wake-ups to it and heartbeats it.
type waiter struct {
	id, token string
	ticket    uint64     // from the last step; 0 = unknown. Guarded by room.mu.
	refreshed time.Time  // send time of the last step or heartbeat that found it queued; guarded by room.mu
	wake      func()     // must not block
	st        *idWaiters // the state w is registered in; nil when not. Guarded by room.mu.
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

// idWaiters is the room's state for one id with local waiters: one
// backend subscription, shared by all of them (reference counted by the
// size of the set). Two waiting calls may share a caller-supplied token;
// a wake-up naming it wakes both. When the last waiter leaves, the
// subscription lingers for one heartbeat interval (idle set), so that a
// process that keeps contending on an id does not subscribe and
// unsubscribe around every wait.
type idWaiters struct {
	waiters map[*waiter]struct{}
	ready   chan struct{} // closed once the subscription is settled
	cancel  func()        // set before ready is closed, if subscribed; guarded by room.mu
	err     error         // set before ready is closed, if Subscribe failed
	idle    *time.Timer   // drops the lingering subscription; guarded by room.mu
}

// room is a Locker's waiter registry: its local waiters by id, one
// backend subscription per id that routes the wake-ups to them, and the
// heartbeat goroutine that keeps their queue entries alive while there
// are any.
type room struct {
	b         backend.Backend
	waiterTTL time.Duration
	heartbeat time.Duration // the heartbeat interval, also the linger of an idle subscription
	log       *slog.Logger
	obs       *observer
	life      *lifecycle

	mu        sync.Mutex
	ids       map[string]*idWaiters
	hbRunning bool
	bg        sync.WaitGroup // the heartbeat goroutine, subscribes in flight
	idle      sync.WaitGroup // linger timers of idle subscriptions
}

func newRoom(b backend.Backend, waiterTTL time.Duration, log *slog.Logger, obs *observer, life *lifecycle) *room {
	return &room{b: b, waiterTTL: waiterTTL, heartbeat: waiterTTL / 3, log: log, obs: obs, life: life,
		ids: make(map[string]*idWaiters)}
}

// close waits for the heartbeat goroutine and the subscribes in flight,
// and ends every lingering subscription. The Locker calls it once shut,
// when no call is in flight.
func (r *room) close() {
	r.bg.Wait()
	r.mu.Lock()
	var cs []func()
	for id, st := range r.ids {
		r.stopIdle(st)
		cs = append(cs, r.cancelOf(st))
		delete(r.ids, id)
	}
	r.mu.Unlock()
	for _, c := range cs {
		c()
	}
	r.idle.Wait() // a timer that fired before it could be stopped
}

// subscribed reports whether the room holds a subscription to id (with
// waiters, or lingering), so that a waiting step can skip the plain try:
// steady-state contention then costs one step less per acquisition.
func (r *room) subscribed(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.ids[id]
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
func (r *room) register(ctx context.Context, w *waiter) error {
	for attempt := 0; ; attempt++ {
		st, own, err := r.join(w)
		if err != nil {
			return err
		}
		select {
		case <-st.ready:
		case <-ctx.Done():
			r.unregister(w)
			return wrap(ctx, "subscribe", w.id, ctx.Err())
		}
		if st.err == nil {
			return nil
		}
		r.unregister(w)
		switch {
		case r.life.ctx.Err() != nil:
			return wrap(ctx, "subscribe", w.id, ErrClosed)
		case own || attempt >= 2 || ctx.Err() != nil:
			return wrap(ctx, "subscribe", w.id, st.err)
		}
	}
}

// join adds w to its id's state, creating it and starting its subscription
// when w is the first; own reports that case.
func (r *room) join(w *waiter) (st *idWaiters, own bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.life.closing() {
		return nil, false, ErrClosed
	}
	st, ok := r.ids[w.id]
	if !ok {
		st = &idWaiters{waiters: make(map[*waiter]struct{}, 1), ready: make(chan struct{})}
		r.ids[w.id] = st
		r.bg.Add(1)
		go r.subscribe(w.id, st)
	}
	r.stopIdle(st) // if it already fired, dropIdle sees this waiter and keeps st
	st.waiters[w] = struct{}{}
	r.obs.waitersChanged(w.id, 1)
	w.st = st
	if !r.hbRunning {
		r.hbRunning = true
		r.bg.Add(1)
		go r.heartbeatLoop()
	}
	return st, !ok, nil
}

// subscribe makes st's subscription under the Locker's context, bounded
// by WaiterTimeout and by Close whatever the client does with deadlines.
// If st was dropped meanwhile (its waiters left), it cancels the
// subscription; if the subscription failed, st is dropped so that the next
// waiter starts anew. A subscription made after the wait for it ended is
// cancelled at once.
func (r *room) subscribe(id string, st *idWaiters) {
	defer r.bg.Done()
	ctx, cancel := context.WithTimeout(r.life.ctx, r.waiterTTL)
	c, err, _ := await(r.life, waitFor{ctx: ctx}, nil, func() (func(), error) { return r.b.Subscribe(ctx, id, r.onWake) },
		func(c func(), err error) {
			if err == nil && c != nil {
				c()
			}
		})
	cancel()
	if err == nil && c == nil {
		c = func() {}
	}
	r.mu.Lock()
	st.cancel, st.err = c, err
	close(st.ready)
	orphan := r.ids[id] != st
	if err != nil && !orphan {
		delete(r.ids, id)
	}
	r.mu.Unlock()
	if orphan && c != nil {
		c()
	}
}

// unregister removes w. When it was the id's last waiter, the subscription
// lingers for one heartbeat interval (or goes at once if it failed, is not
// made yet, or the Locker is closing).
func (r *room) unregister(w *waiter) {
	r.mu.Lock()
	st := w.st
	if st == nil {
		r.mu.Unlock()
		return
	}
	delete(st.waiters, w)
	r.obs.waitersChanged(w.id, -1)
	w.st = nil
	if len(st.waiters) > 0 || r.ids[w.id] != st {
		r.mu.Unlock()
		return
	}
	select {
	case <-st.ready:
		if st.err == nil && !r.life.closing() {
			r.idle.Add(1)
			st.idle = time.AfterFunc(r.heartbeat, func() {
				defer r.idle.Done()
				r.dropIdle(w.id, st)
			})
			r.mu.Unlock()
			return
		}
	default:
		// The subscription is still being made; subscribe cancels it
		// once it sees st dropped.
	}
	delete(r.ids, w.id)
	c := r.cancelOf(st)
	r.mu.Unlock()
	c()
}

// dropIdle ends a lingering subscription unless a waiter came back.
func (r *room) dropIdle(id string, st *idWaiters) {
	r.mu.Lock()
	if r.ids[id] != st || len(st.waiters) > 0 || st.idle == nil {
		r.mu.Unlock()
		return
	}
	delete(r.ids, id)
	c := r.cancelOf(st)
	r.mu.Unlock()
	c()
}

// stopIdle stops st's linger timer; r.mu must be held. A timer stopped
// before it fired will never run, so its count is given back here.
func (r *room) stopIdle(st *idWaiters) {
	if st.idle != nil {
		if st.idle.Stop() {
			r.idle.Done()
		}
		st.idle = nil
	}
}

// cancelOf returns the function that ends st's subscription, once st is
// dropped from r.ids; r.mu must be held. A subscription still being made
// is cancelled by subscribe itself, so then it returns a no-op.
func (r *room) cancelOf(st *idWaiters) func() {
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
func (r *room) setTicket(w *waiter, t uint64) {
	r.mu.Lock()
	w.ticket = t
	r.mu.Unlock()
}

// setRefreshed records that a step sent at sent found w queued.
func (r *room) setRefreshed(w *waiter, sent time.Time) {
	r.mu.Lock()
	if sent.After(w.refreshed) {
		w.refreshed = sent
	}
	r.mu.Unlock()
}

// liveSince returns when w's entry was last known alive: the send time of
// the last step or heartbeat that found it queued, or failed (the send
// time of a failed step) when none did.
func (r *room) liveSince(w *waiter, failed time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.refreshed.IsZero() {
		return failed
	}
	return w.refreshed
}

// onWake routes one wake-up: to the named waiter if it is local (to its
// granted function for a Wake.Grant, its told function for a
// Wake.HolderTTL); to every local waiter of the id for
// a Wake.All; otherwise to the local waiter with the lowest known ticket
// (waiters whose ticket is still unknown are woken too, since they may be
// ahead).
func (r *room) onWake(wk backend.Wake) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.ids[wk.ID]
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
// Close).
func (r *room) heartbeatLoop() {
	defer r.bg.Done()
	t := time.NewTimer(r.heartbeat)
	defer t.Stop()
	var batch []backend.Waiter
	var ws []*waiter
	for {
		select {
		case <-t.C:
		case <-r.life.done:
			r.mu.Lock()
			r.hbRunning = false
			r.mu.Unlock()
			return
		}
		batch, ws = r.waiters(batch[:0], ws[:0])
		if len(ws) == 0 {
			return
		}
		batch = r.heartbeatOnce(batch, ws)
		t.Reset(r.heartbeat)
	}
}

// waiters appends every local waiter to ws, and its entry to batch. With
// none, the heartbeat goroutine is over: it is marked stopped, so that the
// next waiter starts another.
func (r *room) waiters(batch []backend.Waiter, ws []*waiter) ([]backend.Waiter, []*waiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range r.ids {
		for w := range st.waiters {
			batch = append(batch, backend.Waiter{ID: w.id, Token: w.token})
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		r.hbRunning = false
	}
	return batch, ws
}

// heartbeatOnce sends the heartbeat of batch, the entries of ws. A waiter
// whose entry is gone (purged) or that could be granted now (a lost
// wake-up) is woken to run its step again; so is every waiter when the
// heartbeat fails. It returns batch for the next heartbeat, or nil when a
// stray heartbeat keeps it.
func (r *room) heartbeatOnce(batch []backend.Waiter, ws []*waiter) []backend.Waiter {
	// Bounded by the heartbeat interval and by Close, whatever the client
	// does with deadlines.
	ctx, cancel := context.WithTimeout(r.life.ctx, r.heartbeat)
	sent := time.Now()
	res, err, stray := await(r.life, waitFor{ctx: ctx}, nil, func() ([]backend.HeartbeatResult, error) {
		return r.b.Heartbeat(ctx, batch, r.waiterTTL)
	}, nil)
	cancel()
	if err != nil && r.life.ctx.Err() == nil {
		// Each waiter re-checks with its own step, and gives up when its
		// steps keep failing for WaiterTimeout.
		r.log.Warn("lock: heartbeat failed; waiters re-check",
			"waiters", len(ws), "err", err)
		for _, w := range ws {
			w.wake()
		}
	}
	r.mu.Lock()
	for i, hr := range res {
		if i < len(ws) && hr.Queued {
			ws[i].refreshed = sent // the entry lives until sent+WaiterTimeout at least
		}
	}
	r.mu.Unlock()
	for i, hr := range res {
		if i >= len(ws) {
			break
		}
		if !hr.Queued || hr.Ready {
			ws[i].wake()
		}
	}
	if stray {
		return nil
	}
	return batch
}
