package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
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
		l.kaNext = due
		l.bg.Add(1)
		go l.keepAliveLoop()
		return
	}
	if due.Before(l.kaNext) {
		l.kaNext = due
		select {
		case l.kaKick <- struct{}{}:
		default:
		}
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
		l.kaNext = next
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
// due now or within half its period.
func (l *Locker) extendDue() {
	now := time.Now()
	var batch []*Lease
	expired := 0
	l.mu.Lock()
	for le := range l.kept {
		if le.due.After(now.Add(le.every / 2)) {
			continue
		}
		if gone, lost := le.keptGone(now); gone {
			delete(l.kept, le)
			if lost {
				expired++
			}
			continue
		}
		batch = append(batch, le)
	}
	l.mu.Unlock()
	defer func() {
		if expired > 0 && l.bgCtx.Err() == nil {
			l.log.Warn("lock: kept-alive leases expired before they could be extended; their Lost fired",
				"leases", expired)
		}
	}()
	if len(batch) == 0 {
		return
	}
	// The most urgent first, in chunks, each with its own send time: with
	// the fallback (one Extend per lease) a large batch takes many round
	// trips, and each lease's validity must count from its own chunk.
	valid := make(map[*Lease]time.Time, len(batch))
	for _, le := range batch {
		valid[le] = le.ValidUntil()
	}
	slices.SortFunc(batch, func(a, b *Lease) int { return valid[a].Compare(valid[b]) })
	size := extendChunk
	if _, ok := l.b.(backend.ExtendBatcher); !ok {
		size = extendFallbackChunk
	}
	var failed int
	var first error
	tried := 0
	for chunk := range slices.Chunk(batch, size) {
		if failed > 0 && failed == tried {
			// Every extend so far failed: the store is likely out of
			// reach. Retry the rest at their next tick, not one stalled
			// chunk after another.
			l.retryLater(chunk)
			continue
		}
		n, lost, err := l.extendChunk(chunk, valid[chunk[len(chunk)-1]])
		tried += len(chunk)
		failed += n
		expired += lost
		if first == nil {
			first = err
		}
	}
	if failed > 0 && l.bgCtx.Err() == nil {
		l.log.Warn("lock: keep-alive extend failed; retrying until the leases expire",
			"leases", failed, "err", first)
	}
}

// Chunk sizes of extendDue: with an ExtendBatcher, one round trip for up to
// extendChunk leases; with the fallback, one Extend per lease, this many at
// once.
const (
	extendChunk         = 1000
	extendFallbackChunk = 16
)

// extendChunk extends the leases of chunk in one ExtendBatch bounded by
// last, the latest ValidUntil among them: no extend is of use after it. A
// lease with a Release or Extend of its own in flight is skipped (tried
// again shortly), so that steps on one lease never overlap; the others'
// op locks are held only for this chunk's step. The step is waited for
// until last at most (see await), even by a client that ignores the
// bound; Lost and Do's ctx fire at ValidUntil by each lease's own timer
// in any case. It returns the number of failed extends, of leases that
// expired before their turn, and the first failure.
func (l *Locker) extendChunk(chunk []*Lease, last time.Time) (failed, expired int, first error) {
	reqs := make([]backend.ExtendRequest, 0, len(chunk))
	live := chunk[:0:0]
	now := time.Now()
	for _, le := range chunk {
		if !le.op.TryLock() {
			l.retryIn(le, retryBackoff)
			continue
		}
		if gone, lost := le.keptGone(now); gone {
			l.unkeep(le)
			le.op.Unlock()
			if lost {
				expired++
			}
			continue
		}
		le.mu.Lock()
		reqs = append(reqs, backend.ExtendRequest{ID: le.id, Token: le.token, TTL: le.ttl})
		le.mu.Unlock()
		live = append(live, le)
	}
	if len(live) == 0 {
		return 0, expired, nil
	}
	// Bounded by last and by Close, whatever the client does with
	// deadlines. A step still running then goes on in the background:
	// its outcome is recorded when it returns, and until then the leases'
	// op locks stay held (their next ticks skip them).
	ctx, cancel := context.WithDeadline(l.bgCtx, last)
	sent := time.Now()
	errs, err, stray := await(l, waitFor{ctx: ctx}, nil, func() ([]error, error) {
		defer cancel()
		return fallback.ExtendBatch(ctx, l.b, reqs)
	}, func(errs []error, err error) { l.extendedChunk(live, reqs, sent, errs, err) })
	if stray {
		l.retryLater(live)
		return len(live), expired, err
	}
	failed, first = l.extendedChunk(live, reqs, sent, errs, err)
	return failed, expired, first
}

// extendedChunk records the outcome of extendChunk's step, sent at sent,
// for the leases live (with requests reqs), and unlocks their op locks.
// It returns the number of failed extends and the first failure.
func (l *Locker) extendedChunk(live []*Lease, reqs []backend.ExtendRequest, sent time.Time, errs []error, err error) (failed int, first error) {
	for i, le := range live {
		e := err
		if e == nil && i < len(errs) {
			e = errs[i]
		} else if e == nil {
			e = fmt.Errorf("backend returned %d results for %d extends", len(errs), len(reqs))
		}
		l.observeExtend(le, e) // observer.go
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
			l.retryLater(live[i : i+1])
		}
		le.op.Unlock()
	}
	return failed, first
}

// retryLater schedules the next extend of leases after a failure: half a
// period, at most a heartbeat interval, from now.
func (l *Locker) retryLater(leases []*Lease) {
	for _, le := range leases {
		l.retryIn(le, min(le.every/2, l.heartbeat))
	}
}

// retryIn moves a kept-alive lease's next extend to d from now.
func (l *Locker) retryIn(le *Lease, d time.Duration) {
	l.mu.Lock()
	if _, ok := l.kept[le]; ok {
		le.due = time.Now().Add(d)
	}
	l.mu.Unlock()
}
