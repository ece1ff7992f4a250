package lock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// Snapshot is one element of the AcquireMany sequence.
type Snapshot struct {
	// Acquired holds the leases granted since the previous snapshot, in the
	// order of the ids passed in. They are the caller's to release.
	Acquired []*Lease
	// NotAcquired holds the ids given up on: their queue timeout passed,
	// or, with NoWait, they were held or had waiters. It is set only in the
	// last snapshot. Those ids are not queued.
	NotAcquired []string
}

// AcquireMany takes the locks on ids, each for ttl, and streams them as they
// are granted. Free ids are tried in one batched step; held ids are queued
// like Acquire and woken like it, and every BatchTick the woken ones are
// retried in one batched step. Each tick with something new yields a
// Snapshot of the leases granted since the previous one; no snapshot is
// empty. The sequence ends after the snapshot in which every id has been
// acquired or given up on (NotAcquired, last snapshot only), or after one
// error (ctx ended, backend failure, ErrClosed), which comes with an empty
// Snapshot.
//
// Breaking out of the loop, or an error, leaves every queue and releases
// every lease the caller was not shown (S7); leases already yielded stay
// the caller's. With opts.KeepAlive, every lease is kept
// alive from its grant until the caller releases it, so a long sequence
// can be processed slowly. AcquireMany holds nothing back on its own, so
// two overlapping calls never deadlock as long as the callers release what
// they are shown (L5); a caller that keeps its leases while it waits for
// others can deadlock with another doing the same, until the queue timeout.
//
// opts may be nil; they are those of Acquire, for every id: Token (one
// token for every lease), QueueTimeout (for the whole call), KeepAlive and
// ExtendEvery (per lease), and NoWait: one batched step takes the free ids,
// and the one Snapshot lists the others in NotAcquired.
//
// ids must be non-empty, with no empty, over-long or duplicate id: a
// duplicate is an *backend.ArgumentError naming both positions, because one
// caller cannot hold one id twice. Bad input is yielded as an error before
// any I/O.
func (l *Locker) AcquireMany(ctx context.Context, ids []string, ttl time.Duration, opts *AcquireOptions) iter.Seq2[Snapshot, error] {
	return func(yield func(Snapshot, error) bool) {
		if err := checkCtx(ctx); err != nil {
			yield(Snapshot{}, err)
			return
		}
		ttl, err := l.checkTTL(ttl)
		if err != nil {
			yield(Snapshot{}, err)
			return
		}
		if err := checkIDs(ids); err != nil {
			yield(Snapshot{}, err)
			return
		}
		var o AcquireOptions
		if opts != nil {
			o = *opts
		}
		every, err := o.check(ttl)
		if err != nil {
			yield(Snapshot{}, err)
			return
		}
		if err := l.begin(); err != nil {
			yield(Snapshot{}, err)
			return
		}
		defer l.end()
		m := &many{l: l, ttl: ttl, every: every, start: time.Now(), token: o.Token,
			noWait: o.NoWait, queueTimeout: cmp.Or(o.QueueTimeout, l.queueTimeout)}
		m.run(ctx, ids, yield)
	}
}

func checkIDs(ids []string) error {
	if len(ids) == 0 {
		return argErr("ids", "no ids")
	}
	seen := make(map[string]int, len(ids))
	for i, id := range ids {
		arg := fmt.Sprintf("ids[%d]", i)
		if err := checkID(arg, id); err != nil {
			return err
		}
		if j, ok := seen[id]; ok {
			return argErr(arg, fmt.Sprintf("duplicate of ids[%d] (%q)", j, id))
		}
		seen[id] = i
	}
	return nil
}

// manyItem is one id of an AcquireMany call.
type manyItem struct {
	idx     int
	w       *waiter
	due     time.Time // retry then even without a wake-up (holder's TTL); zero = no timer
	dirty   bool      // woken since the last retry; guarded by many.mu
	pending bool
}

type many struct {
	l     *Locker
	ttl   time.Duration
	every time.Duration // keep-alive period of the leases; 0 = not kept alive
	start time.Time
	token string // the caller's token for every id, or "" for a new one per id
	// noWait ends the call after round 1; queueTimeout bounds the rest.
	noWait       bool
	queueTimeout time.Duration

	mu      sync.Mutex
	items   []*manyItem
	granted []*Lease // granted but not yet shown
	unsent  bool     // round 1 failed before it reached the store

	g     grace         // of the call's waits once ctx ended (await.go)
	stray chan struct{} // closed when a step the caller stopped waiting for returns; nil if none
}

func (m *many) run(ctx context.Context, ids []string, yield func(Snapshot, error) bool) {
	l := m.l
	m.items = make([]*manyItem, len(ids))
	for i, id := range ids {
		it := &manyItem{idx: i, pending: true}
		tok := m.token
		if tok == "" {
			tok = newToken()
		}
		it.w = &waiter{id: id, token: tok, wake: func() {
			m.mu.Lock()
			it.dirty = true
			m.mu.Unlock()
		}}
		m.items[i] = it
	}
	shown := false
	defer func() {
		if !shown {
			m.abandon(ctx)
		}
	}()

	// Round 1: a plain batched try of every id. If it never reached the
	// store, nothing is there to clean up.
	if err := m.step(ctx, m.items, false); err != nil {
		m.unsent = fallback.Unsent(err)
		yield(Snapshot{}, err)
		return
	}
	if m.noWait {
		s := Snapshot{Acquired: m.granted}
		for _, it := range m.pendingItems(nil, false) {
			s.NotAcquired = append(s.NotAcquired, it.w.id)
			it.pending = false
		}
		m.granted = nil
		shown = true
		if len(s.Acquired) > 0 || len(s.NotAcquired) > 0 {
			yield(s, nil)
		}
		return
	}
	// Round 2: subscribe for the rest, then queue them in one batch.
	rest := m.pendingItems(nil, false)
	for _, it := range rest {
		if err := l.register(ctx, it.w); err != nil {
			yield(Snapshot{}, err)
			return
		}
	}
	if len(rest) > 0 {
		if err := m.step(ctx, rest, true); err != nil {
			yield(Snapshot{}, err)
			return
		}
	}

	queueTimer := time.NewTimer(m.queueTimeout - time.Since(m.start))
	defer queueTimer.Stop()
	ticker := time.NewTicker(l.tick)
	defer ticker.Stop()
	for {
		if len(m.granted) > 0 {
			s := Snapshot{Acquired: m.granted}
			m.granted = nil
			if !yield(s, nil) {
				return // the deferred abandon leaves the queues
			}
		}
		if len(m.pendingItems(nil, false)) == 0 {
			shown = true
			return
		}
		select {
		case <-ticker.C:
			if due := m.pendingItems(nil, true); len(due) > 0 {
				if err := m.step(ctx, due, true); err != nil {
					yield(Snapshot{}, err)
					return
				}
			}
		case <-queueTimer.C:
			var timedOut []string
			for _, it := range m.pendingItems(nil, false) {
				timedOut = append(timedOut, it.w.id)
			}
			s := Snapshot{Acquired: m.granted, NotAcquired: timedOut}
			m.granted = nil
			m.abandon(ctx)
			shown = true
			yield(s, nil)
			return
		case <-ctx.Done():
			yield(Snapshot{}, wrap(ctx, "acquire many", "", ctx.Err()))
			return
		case <-l.done:
			yield(Snapshot{}, wrap(ctx, "acquire many", "", ErrClosed))
			return
		}
	}
}

// pendingItems appends to dst the pending items; with onlyDue, only those
// woken since their last step or whose holder timer is due.
func (m *many) pendingItems(dst []*manyItem, onlyDue bool) []*manyItem {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, it := range m.items {
		if !it.pending {
			continue
		}
		if onlyDue && !it.dirty && (it.due.IsZero() || now.Before(it.due)) {
			continue
		}
		dst = append(dst, it)
	}
	return dst
}

// step runs one batched acquire step for items and records the outcome. On
// error the batch's outcome is unknown; the caller abandons everything.
func (m *many) step(ctx context.Context, items []*manyItem, wait bool) error {
	l := m.l
	reqs := make([]backend.AcquireRequest, len(items))
	for i, it := range items {
		reqs[i] = backend.AcquireRequest{ID: it.w.id, Token: it.w.token, TTL: m.ttl, Wait: wait, WaiterTTL: l.waiterTTL}
	}
	m.mu.Lock()
	for _, it := range items {
		it.dirty = false
	}
	m.mu.Unlock()
	sent := time.Now()
	res, err := m.batch(ctx, reqs)
	if err == nil && len(res) != len(reqs) {
		err = fmt.Errorf("backend returned %d results for %d requests", len(res), len(reqs))
	}
	if err != nil {
		return wrap(ctx, "acquire many", "", err)
	}
	for i, r := range res {
		it := items[i]
		if r.Err != nil {
			return wrap(ctx, "acquire", it.w.id, r.Err)
		}
		if r.Acquired {
			m.mu.Lock()
			it.pending = false
			m.mu.Unlock()
			if wait {
				l.unregister(it.w)
			}
			le := l.newLease(it.w.id, it.w.token, sent, m.ttl, r.Grant)
			if m.every > 0 {
				l.keepAlive(le, m.every)
			}
			m.granted = append(m.granted, le)
			continue
		}
		if wait {
			l.setTicket(it.w, r.Ticket)
		}
		it.due = time.Time{}
		if r.Head && r.HolderTTL > 0 {
			it.due = sent.Add(r.HolderTTL + l.resolution)
		}
	}
	return nil
}

// abandon releases every lease not yet shown and leaves every queue, by
// token, including ids whose step outcome is unknown (S6, S7). After a
// first round that never reached the store it sends nothing.
func (m *many) abandon(ctx context.Context) {
	l := m.l
	var ws []backend.Waiter
	for _, le := range m.granted {
		ws = append(ws, backend.Waiter{ID: le.id, Token: le.token})
		le.end(released) // by the Leave below, or at its TTL; never shown
	}
	m.granted = nil
	for _, it := range m.pendingItems(nil, false) {
		ws = append(ws, backend.Waiter{ID: it.w.id, Token: it.w.token})
		l.unregister(it.w)
		m.mu.Lock()
		it.pending = false
		m.mu.Unlock()
	}
	if len(ws) == 0 || m.unsent {
		return
	}
	if m.stray != nil {
		// A step the caller stopped waiting for may still enqueue or
		// grant: leave after it returns, in the background.
		stray := m.stray
		l.goStep(func() {
			<-stray
			cctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			m.cleanupFailed(len(ws), fallback.LeaveBatch(cctx, l.b, ws))
		})
		return
	}
	// Waited for while ctx lives (and for the rest of the grace once it
	// ended), like Acquire's cleanup.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	_, err, stray := await(l, waitFor{ctx: ctx, bound: cctx}, &m.g, func() (struct{}, error) {
		defer cancel()
		return struct{}{}, fallback.LeaveBatch(cctx, l.b, ws)
	}, func(_ struct{}, err error) { m.cleanupFailed(len(ws), err) })
	if !stray {
		m.cleanupFailed(len(ws), err)
	}
}

// cleanupFailed logs the failure of abandon's LeaveBatch of n waiters, if
// err is one.
func (m *many) cleanupFailed(n int, err error) {
	if err != nil && !errors.Is(err, backend.ErrNotHeld) {
		m.l.log.Warn("lock: AcquireMany cleanup failed; entries and unseen leases expire on their own",
			"ids", n, "err", wrap(context.Background(), "leave many", "", err))
	}
}

// batch runs one batched acquire step, waited for while ctx lives (and the
// Locker is open; see await). A step the caller stopped waiting for goes
// on in the background, and closes m.stray when it returns: the call is
// over then, and abandon leaves every queue after it.
func (m *many) batch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	l := m.l
	w := waitFor{ctx: ctx, close: true}
	if w.inline() {
		return fallback.AcquireBatch(ctx, l.b, reqs)
	}
	done := make(chan struct{})
	res, err, stray := await(l, w, &m.g, func() ([]backend.BatchGrant, error) {
		return fallback.AcquireBatch(ctx, l.b, reqs)
	}, func([]backend.BatchGrant, error) { close(done) })
	if stray {
		m.stray = done
	}
	return res, err
}
