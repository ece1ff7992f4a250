package lock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
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
// are granted. Free ids are tried in one batched step; held ids wait in
// their queues like Acquire, and every BatchTick the ids that
// are due a step (woken, or at the holder's TTL) are retried in one
// batched step. A grant by hand-off is taken as it arrives, with no step,
// and a failed waiting step is retried with the same token for up to
// WaiterTimeout, as Acquire retries it. Each tick or hand-off with
// something new yields a Snapshot of the leases granted since the
// previous one; no snapshot is empty. The sequence ends after the
// snapshot in which every id has been acquired or given up on
// (NotAcquired, last snapshot only), or after one error (ctx ended, a
// backend failure that retries did not mend, ErrClosed), which comes with
// an empty Snapshot.
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
		sh, err := l.share(&o)
		if err != nil {
			yield(Snapshot{}, err)
			return
		}
		if err := l.begin(); err != nil {
			yield(Snapshot{}, err)
			return
		}
		defer l.end()
		m := &many{l: l, ttl: ttl, sh: sh, every: every, start: time.Now(), token: o.Token,
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
	wt      *wait
	pending bool   // neither granted nor given up on
	lease   *Lease // granted, not yet shown
}

// many is one AcquireMany call: the driver of its ids' waits. It sends
// their steps in batches, one per BatchTick, and takes their grants by
// hand-off as they come.
type many struct {
	l     *Locker
	ttl   time.Duration
	sh    share
	every time.Duration // keep-alive period of the leases; 0 = not kept alive
	start time.Time
	token string // the caller's token for every id, or "" for a new one per id
	// noWait ends the call after round 1; queueTimeout bounds the rest.
	noWait       bool
	queueTimeout time.Duration

	items   []*manyItem
	granted []*manyItem   // granted but not yet shown
	unsent  bool          // round 1 failed before it reached the store
	poke    chan struct{} // a grant by hand-off came: it is in handed

	handedMu sync.Mutex
	handed   []*manyItem // the items a grant by hand-off came to, not yet taken

	g     grace         // of the call's waits once ctx ended
	stray chan struct{} // closed when a step the caller stopped waiting for returns; nil if none
}

func (m *many) run(ctx context.Context, ids []string, yield func(Snapshot, error) bool) {
	m.poke = make(chan struct{}, 1)
	deadline := m.start.Add(m.queueTimeout)
	m.items = make([]*manyItem, len(ids))
	for i, id := range ids {
		tok := m.token
		if tok == "" {
			tok = newToken()
		}
		it := &manyItem{idx: i, pending: true}
		it.wt = m.l.newWait(id, tok, m.ttl, m.sh, deadline, func() { m.handOff(it) }, true)
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
	if err := m.try(ctx); err != nil {
		m.unsent = fallback.Unsent(err)
		yield(Snapshot{}, err)
		return
	}
	if m.noWait {
		shown = true
		m.giveUp(ctx, yield)
		return
	}
	// Round 2: subscribe for the rest, then queue them in one batch.
	if err := m.join(ctx); err != nil {
		yield(Snapshot{}, err)
		return
	}
	shown = m.wait(ctx, yield)
}

// try is round 1: one batched plain try of every id.
func (m *many) try(ctx context.Context) error {
	reqs := make([]backend.AcquireRequest, len(m.items))
	for i, it := range m.items {
		reqs[i] = m.l.request(it.wt.w.id, it.wt.w.token, m.ttl, m.sh, false)
	}
	sent := time.Now()
	res, err := m.batch(ctx, reqs)
	if err != nil {
		return wrap(ctx, "acquire many", "", err)
	}
	for i, r := range res {
		it := m.items[i]
		if r.Err != nil {
			return wrap(ctx, "acquire", it.wt.w.id, r.Err)
		}
		if r.Acquired {
			m.grant(it, m.l.newLease(it.wt.w.id, it.wt.w.token, sent, m.ttl, r.Grant))
		}
	}
	return nil
}

// join registers the pending ids' waits (subscribing before the check,
// L1) and runs their first waiting step, in one batch.
func (m *many) join(ctx context.Context) error {
	for _, it := range m.items {
		if !it.pending {
			continue
		}
		if err := m.l.room.register(ctx, &it.wt.w); err != nil {
			return err
		}
	}
	return m.tick(ctx)
}

// wait runs the queued ids' waits until every id is granted or given up
// on, yielding what is granted. It reports whether everything the call
// holds was shown (otherwise abandon must release it).
func (m *many) wait(ctx context.Context, yield func(Snapshot, error) bool) (shown bool) {
	queueTimer := time.NewTimer(time.Until(m.start.Add(m.queueTimeout)))
	defer queueTimer.Stop()
	ticker := time.NewTicker(m.l.tick)
	defer ticker.Stop()
	for {
		if len(m.granted) > 0 && !yield(Snapshot{Acquired: m.shown()}, nil) {
			return false // the deferred abandon leaves the queues
		}
		if m.pending() == 0 {
			return true
		}
		var err error
		select {
		case <-ticker.C:
			err = m.tick(ctx)
		case <-m.poke:
			m.takeHandOffs()
		case <-queueTimer.C:
			m.giveUp(ctx, yield)
			return true
		case <-ctx.Done():
			err = wrap(ctx, "acquire many", "", ctx.Err())
		case <-m.l.life.done:
			err = wrap(ctx, "acquire many", "", ErrClosed)
		}
		if err != nil {
			yield(Snapshot{}, err)
			return false
		}
	}
}

// tick asks each pending id's wait what to do: takes the grants by
// hand-off, and runs the steps due in one batch. A wait whose retries are
// over ends the call with its last failure.
func (m *many) tick(ctx context.Context) error {
	now := time.Now()
	var due []*manyItem
	for _, it := range m.items {
		if !it.pending {
			continue
		}
		switch mv, le := it.wt.next(now); mv {
		case moveHanded:
			m.grant(it, le)
		case moveStep:
			if err := it.wt.over(); err != nil {
				return wrap(ctx, "acquire", it.wt.w.id, err)
			}
			due = append(due, it)
		}
	}
	if len(due) == 0 {
		return nil
	}
	return m.step(ctx, due)
}

// handOff records that a grant by hand-off came to it (a batched wait
// signals only that) and pokes the call, so that takeHandOffs visits only
// the items that have one, not every id of the call.
func (m *many) handOff(it *manyItem) {
	m.handedMu.Lock()
	m.handed = append(m.handed, it)
	m.handedMu.Unlock()
	nudge(m.poke)
}

// takeHandOffs takes the grants by hand-off that came: no step.
func (m *many) takeHandOffs() {
	m.handedMu.Lock()
	handed := m.handed
	m.handed = nil
	m.handedMu.Unlock()
	for _, it := range handed {
		if it.pending {
			if le := it.wt.takeHandOff(); le != nil {
				m.grant(it, le)
			}
		}
	}
}

// step runs one batched waiting step for items and gives each wait its
// outcome. While some of them retry failed steps, the step is bounded by
// the earliest end of their runs.
func (m *many) step(ctx context.Context, items []*manyItem) error {
	reqs := make([]backend.AcquireRequest, len(items))
	var end time.Time
	for i, it := range items {
		reqs[i] = it.wt.request()
		if e := it.wt.runEnd(); !e.IsZero() && (end.IsZero() || e.Before(end)) {
			end = e
		}
	}
	sctx, cancel := boundTo(ctx, end)
	defer cancel()
	sent := time.Now()
	res, err := m.batch(sctx, reqs)
	if m.stray != nil {
		// The call ends; a step cut by a run's end reports the run's
		// failure, as Acquire's does.
		for _, it := range items {
			if it.wt.r.last != nil {
				err = it.wt.cut(ctx, sctx, err)
				break
			}
		}
		return wrap(ctx, "acquire many", "", err)
	}
	retrying := 0
	var first error
	for i, it := range items {
		var g backend.Grant
		e := err
		if e == nil {
			g, e = res[i].Grant, res[i].Err
		}
		e = it.wt.cut(ctx, sctx, e)
		le, began, ferr := it.wt.stepped(ctx, sent, g, e)
		switch {
		case ferr != nil && err != nil:
			return wrap(ctx, "acquire many", "", ferr)
		case ferr != nil:
			return wrap(ctx, "acquire", it.wt.w.id, ferr)
		case le != nil:
			m.grant(it, le)
		case began:
			retrying++
			first = cmp.Or(first, e)
		}
	}
	if retrying > 0 {
		m.l.log.Warn("lock: an AcquireMany step failed; retrying with the same tokens while the queue entries live",
			"ids", retrying, "err", first, "for", m.l.waiterTTL)
	}
	return nil
}

// grant records it's lease: shown at the next yield, and kept alive from
// now if asked.
func (m *many) grant(it *manyItem, le *Lease) {
	it.pending = false
	it.lease = le
	m.l.room.unregister(&it.wt.w)
	if m.every > 0 {
		m.l.keeper.keepAlive(le, m.every)
	}
	m.granted = append(m.granted, it)
}

// shown returns the leases granted since the last yield, in the order of
// the ids, and forgets them: they are the caller's now.
func (m *many) shown() []*Lease {
	if len(m.granted) == 0 {
		return nil
	}
	slices.SortFunc(m.granted, func(a, b *manyItem) int { return a.idx - b.idx })
	les := make([]*Lease, len(m.granted))
	for i, it := range m.granted {
		les[i] = it.lease
		it.lease = nil
	}
	m.granted = nil
	return les
}

// pending returns the number of ids neither granted nor given up on.
func (m *many) pending() int {
	n := 0
	for _, it := range m.items {
		if it.pending {
			n++
		}
	}
	return n
}

// giveUp ends the call without the pending ids: with NoWait, which did
// not queue them, or at the queue timeout, when they leave their queues.
// The last snapshot lists them in NotAcquired, with the leases not yet
// shown. No snapshot is empty.
func (m *many) giveUp(ctx context.Context, yield func(Snapshot, error) bool) {
	s := Snapshot{Acquired: m.shown()}
	for _, it := range m.items {
		if it.pending {
			s.NotAcquired = append(s.NotAcquired, it.wt.w.id)
		}
	}
	if m.noWait {
		for _, it := range m.items {
			it.pending = false
		}
	} else {
		m.abandon(ctx)
	}
	if len(s.Acquired) > 0 || len(s.NotAcquired) > 0 {
		yield(s, nil)
	}
}

// abandon releases every lease not yet shown and leaves every queue, by
// token, including ids whose step outcome is unknown (S6, S7). After a
// first round that never reached the store it sends nothing.
func (m *many) abandon(ctx context.Context) {
	l := m.l
	var ws []backend.Waiter
	for _, it := range m.granted {
		ws = append(ws, backend.Waiter{ID: it.lease.id, Token: it.lease.token})
		it.lease.end(released) // by the Leave below, or at its TTL; never shown
	}
	m.granted = nil
	for _, it := range m.items {
		if !it.pending {
			continue
		}
		ws = append(ws, backend.Waiter{ID: it.wt.w.id, Token: it.wt.w.token})
		l.room.unregister(&it.wt.w)
		it.pending = false
	}
	if len(ws) == 0 || m.unsent {
		return
	}
	if m.stray != nil {
		// A step the caller stopped waiting for may still enqueue or
		// grant: leave after it returns, in the background.
		stray := m.stray
		l.life.goStep(func() {
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
	_, err, stray := await(l.life, waitFor{ctx: ctx, bound: cctx}, &m.g, func() (struct{}, error) {
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
// over then, and abandon leaves every queue after it. A batch whose
// results do not match its requests is a failure.
func (m *many) batch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	l := m.l
	w := waitFor{ctx: ctx, close: true}
	var res []backend.BatchGrant
	var err error
	if w.inline() {
		res, err = fallback.AcquireBatch(ctx, l.b, reqs)
	} else {
		done := make(chan struct{})
		var stray bool
		res, err, stray = await(l.life, w, &m.g, func() ([]backend.BatchGrant, error) {
			return fallback.AcquireBatch(ctx, l.b, reqs)
		}, func([]backend.BatchGrant, error) { close(done) })
		if stray {
			m.stray = done
			return nil, err
		}
	}
	if err == nil && len(res) != len(reqs) {
		err = fmt.Errorf("backend returned %d results for %d requests", len(res), len(reqs))
	}
	return res, err
}
