package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redislocker/lock/backend"
)

// keepAlive adds le to the leases the Locker extends by le's ttl every
// period, until it is released, found not held, presumed lost, or the
// Locker is closed. It does nothing on a closed Locker.
func (l *Locker) keepAlive(le *Lease, every time.Duration) {
	le.mu.Lock()
	due := le.validUntil.Add(every - le.ttl)
	le.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	le.every, le.due = every, due
	l.kept[le] = struct{}{}
	if !l.kaRunning {
		l.kaRunning = true
		l.bg.Add(1)
		go l.keepAliveLoop()
		return
	}
	select {
	case l.kaKick <- struct{}{}:
	default:
	}
}

// unkeep stops le's keep-alive.
func (l *Locker) unkeep(le *Lease) {
	l.mu.Lock()
	delete(l.kept, le)
	l.mu.Unlock()
}

// rekeep moves a kept-alive lease's next extend to one period after sent,
// the send time of an extend that succeeded.
func (l *Locker) rekeep(le *Lease, sent time.Time) {
	l.mu.Lock()
	if _, ok := l.kept[le]; ok {
		le.due = sent.Add(le.every)
	}
	l.mu.Unlock()
}

// keepAliveLoop runs while the Locker has kept-alive leases: it sleeps
// until the earliest is due and extends every lease due by then (or within
// half its period) in one batched step.
func (l *Locker) keepAliveLoop() {
	defer l.bg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		l.mu.Lock()
		var next time.Time
		for le := range l.kept {
			if next.IsZero() || le.due.Before(next) {
				next = le.due
			}
		}
		if next.IsZero() || l.closed {
			l.kaRunning = false
			clear(l.kept)
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		t.Reset(time.Until(next))
		select {
		case <-t.C:
			l.extendDue()
		case <-l.kaKick:
		case <-l.done:
		}
	}
}

// extendDue extends, in one batched step, every kept-alive lease that is
// due now or within half its period. A lease with a Release or Extend of
// its own in flight is skipped (tried again shortly), so that steps on one
// lease never overlap.
func (l *Locker) extendDue() {
	now := time.Now()
	var batch []*Lease
	var bound time.Duration
	l.mu.Lock()
	for le := range l.kept {
		if le.due.After(now.Add(le.every / 2)) {
			continue
		}
		if le.presumeLost(now) {
			delete(l.kept, le)
			continue
		}
		if !le.op.TryLock() {
			le.due = now.Add(retryBackoff)
			continue
		}
		batch = append(batch, le)
		if bound == 0 || le.every < bound {
			bound = le.every
		}
	}
	l.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	// The most urgent first: a slow fallback extends them before the bound.
	reqs := make([]backend.ExtendRequest, len(batch))
	valid := make(map[*Lease]time.Time, len(batch))
	for _, le := range batch {
		valid[le] = le.ValidUntil()
	}
	slices.SortFunc(batch, func(a, b *Lease) int { return valid[a].Compare(valid[b]) })
	for i, le := range batch {
		le.mu.Lock()
		reqs[i] = backend.ExtendRequest{ID: le.id, Token: le.token, TTL: le.ttl}
		le.mu.Unlock()
	}
	// The bound leaves each lease about a third of its ttl for a retry. A
	// client that ignores it only delays the retry: Lost and Do's ctx
	// fire at ValidUntil by the lease's own timer.
	ctx, cancel := context.WithTimeout(l.bgCtx, bound)
	sent := time.Now()
	errs, err := backend.ExtendBatch(ctx, l.b, reqs)
	cancel()
	var failed int
	var first error
	for i, le := range batch {
		e := err
		if e == nil && i < len(errs) {
			e = errs[i]
		} else if e == nil {
			e = fmt.Errorf("backend returned %d results for %d extends", len(errs), len(reqs))
		}
		switch {
		case e == nil:
			le.extended(sent, reqs[i].TTL)
			l.rekeep(le, sent)
		case errors.Is(e, backend.ErrNotHeld):
			le.end(notHeld)
		default:
			failed++
			if first == nil {
				first = e
			}
			l.mu.Lock()
			if _, ok := l.kept[le]; ok {
				le.due = time.Now().Add(min(le.every/2, l.heartbeat))
			}
			l.mu.Unlock()
		}
		le.op.Unlock()
	}
	if failed > 0 && l.bgCtx.Err() == nil {
		l.log.Warn("lock: keep-alive extend failed; retrying until the leases expire",
			"leases", failed, "err", first)
	}
}
