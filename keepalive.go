package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// keeper is a Locker's keep-alive: the leases it extends, and the
// goroutine that extends them, in one batched step per tick, while there
// are any.
type keeper struct {
	b         backend.Backend
	heartbeat time.Duration // the longest wait before an extend that failed is retried
	log       *slog.Logger
	obs       *observer
	life      *lifecycle

	mu      sync.Mutex
	kept    map[*Lease]struct{} // kept-alive leases
	running bool
	next    time.Time      // when the loop wakes next
	kick    chan struct{}  // a lease due before next was added to kept
	bg      sync.WaitGroup // the loop
}

func newKeeper(b backend.Backend, heartbeat time.Duration, log *slog.Logger, obs *observer, life *lifecycle) *keeper {
	return &keeper{b: b, heartbeat: heartbeat, log: log, obs: obs, life: life,
		kept: make(map[*Lease]struct{}), kick: make(chan struct{}, 1)}
}

// close waits for the loop, which ends once the Locker is shut; leases
// still kept are dropped (they expire at their ValidUntil).
func (k *keeper) close() { k.bg.Wait() }

// keepAlive adds le to the leases the keeper extends by le's ttl every
// period, until it is released, found not held, presumed lost, or the
// Locker is closed. It does nothing on a closed Locker.
func (k *keeper) keepAlive(le *Lease, every time.Duration) {
	le.mu.Lock()
	due := le.validUntil.Add(every - le.ttl)
	le.mu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.life.closing() {
		return
	}
	le.every, le.due = every, due
	k.kept[le] = struct{}{}
	if !k.running {
		k.running = true
		k.next = due
		k.bg.Add(1)
		go k.keepAliveLoop()
		return
	}
	if due.Before(k.next) {
		k.next = due
		nudge(k.kick)
	}
}

// unkeep stops le's keep-alive.
func (k *keeper) unkeep(le *Lease) {
	k.mu.Lock()
	delete(k.kept, le)
	k.mu.Unlock()
}

// rekeep moves a kept-alive lease's next extend to one period after sent,
// the send time of an extend that succeeded.
func (k *keeper) rekeep(le *Lease, sent time.Time) {
	k.mu.Lock()
	if _, ok := k.kept[le]; ok {
		le.due = sent.Add(le.every)
	}
	k.mu.Unlock()
}

// keepAliveLoop runs while the keeper has kept-alive leases: it sleeps
// until the earliest is due and extends every lease due by then (or within
// half its period) in one batched step.
func (k *keeper) keepAliveLoop() {
	defer k.bg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		k.mu.Lock()
		var next time.Time
		for le := range k.kept {
			if next.IsZero() || le.due.Before(next) {
				next = le.due
			}
		}
		if next.IsZero() || k.life.closing() {
			k.running = false
			clear(k.kept)
			k.mu.Unlock()
			return
		}
		k.next = next
		k.mu.Unlock()
		t.Reset(time.Until(next))
		select {
		case <-t.C:
			k.extendDue()
		case <-k.kick:
		case <-k.life.done:
		}
	}
}

// extendDue extends, in one batched step, every kept-alive lease that is
// due now or within half its period.
func (k *keeper) extendDue() {
	now := time.Now()
	var batch []*Lease
	expired := 0
	k.mu.Lock()
	for le := range k.kept {
		if le.due.After(now.Add(le.every / 2)) {
			continue
		}
		if gone, lost := le.keptGone(now); gone {
			delete(k.kept, le)
			if lost {
				expired++
			}
			continue
		}
		batch = append(batch, le)
	}
	k.mu.Unlock()
	defer func() {
		if expired > 0 && k.life.ctx.Err() == nil {
			k.log.Warn("lock: kept-alive leases expired before they could be extended; their Lost fired",
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
	if _, ok := k.b.(backend.ExtendBatcher); !ok {
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
			k.retryLater(chunk)
			continue
		}
		n, lost, err := k.extendChunk(chunk, valid[chunk[len(chunk)-1]])
		tried += len(chunk)
		failed += n
		expired += lost
		if first == nil {
			first = err
		}
	}
	if failed > 0 && k.life.ctx.Err() == nil {
		k.log.Warn("lock: keep-alive extend failed; retrying until the leases expire",
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
func (k *keeper) extendChunk(chunk []*Lease, last time.Time) (failed, expired int, first error) {
	reqs := make([]backend.ExtendRequest, 0, len(chunk))
	live := chunk[:0:0]
	now := time.Now()
	for _, le := range chunk {
		if !le.op.TryLock() {
			k.retryIn(le, retryBackoff)
			continue
		}
		if gone, lost := le.keptGone(now); gone {
			k.unkeep(le)
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
	ctx, cancel := context.WithDeadline(k.life.ctx, last)
	sent := time.Now()
	errs, err, stray := await(k.life, waitFor{ctx: ctx}, nil, func() ([]error, error) {
		defer cancel()
		return fallback.ExtendBatch(ctx, k.b, reqs)
	}, func(errs []error, err error) { k.extendedChunk(live, reqs, sent, errs, err) })
	if stray {
		k.retryLater(live)
		return len(live), expired, err
	}
	failed, first = k.extendedChunk(live, reqs, sent, errs, err)
	return failed, expired, first
}

// extendedChunk records the outcome of extendChunk's step, sent at sent,
// for the leases live (with requests reqs), and unlocks their op locks.
// It returns the number of failed extends and the first failure.
func (k *keeper) extendedChunk(live []*Lease, reqs []backend.ExtendRequest, sent time.Time, errs []error, err error) (failed int, first error) {
	for i, le := range live {
		e := err
		if e == nil && i < len(errs) {
			e = errs[i]
		} else if e == nil {
			e = fmt.Errorf("backend returned %d results for %d extends", len(errs), len(reqs))
		}
		k.obs.extend(le, e)
		switch {
		case e == nil:
			le.extended(sent, reqs[i].TTL)
			k.rekeep(le, sent)
		case errors.Is(e, backend.ErrNotHeld):
			le.end(notHeld)
		default:
			failed++
			if first == nil {
				first = e
			}
			k.retryLater(live[i : i+1])
		}
		le.op.Unlock()
	}
	return failed, first
}

// retryLater schedules the next extend of leases after a failure: half a
// period, at most a heartbeat interval, from now.
func (k *keeper) retryLater(leases []*Lease) {
	for _, le := range leases {
		k.retryIn(le, min(le.every/2, k.heartbeat))
	}
}

// retryIn moves a kept-alive lease's next extend to d from now.
func (k *keeper) retryIn(le *Lease, d time.Duration) {
	k.mu.Lock()
	if _, ok := k.kept[le]; ok {
		le.due = time.Now().Add(d)
	}
	k.mu.Unlock()
}
