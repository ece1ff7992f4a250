package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// round is what the workers of a timed round (contended or shared) share
// with the goroutine that times it: the round's ctx, whether the window is
// open (measuring) and whether the workers must stop.
type round struct {
	ctx       context.Context
	cancel    context.CancelFunc
	measuring atomic.Bool
	stop      atomic.Bool
	wg        sync.WaitGroup
	base      time.Time // the round's start: waits are stamped in ns since it
}

// newRound returns a round whose ctx outlives its warm-up and window by a
// minute.
func (r *runner) newRound() *round {
	ctx, cancel := bg(r.cfg.Warm + r.cfg.ContDur + time.Minute)
	return &round{ctx: ctx, cancel: cancel, base: time.Now()}
}

// fail records err as the worker's and stops the round.
func (rd *round) fail(errp *error, err error) {
	*errp = err
	rd.stop.Store(true)
}

// lock calls lock until it grants, counting the calls that gave up on
// their own (errGaveUp) in gaveUps. It returns nil when the worker must
// stop: the round stopped, or lock failed (the error goes in errp).
func (rd *round) lock(lock func() (func(context.Context) error, error), gaveUps *int, errp *error) func(context.Context) error {
	for {
		u, err := lock()
		switch {
		case err == nil:
			return u
		case rd.stop.Load() || rd.ctx.Err() != nil:
			return nil
		case errors.Is(err, errGaveUp):
			*gaveUps++
		default:
			rd.fail(errp, err)
			return nil
		}
	}
}

// unlock releases with unlock, and reports whether the worker goes on; a
// failed release (unless the round is stopping) goes in errp.
func (rd *round) unlock(unlock func(context.Context) error, errp *error) bool {
	uctx, ucancel := bg(5 * time.Second)
	err := unlock(uctx)
	ucancel()
	if err != nil && !rd.stop.Load() {
		rd.fail(errp, fmt.Errorf("release: %w", err))
		return false
	}
	return true
}

// window times the round once its workers run: the warm-up, a snapshot,
// the window (measuring), then atClose with the window's end in ns since
// base (for the waits still going on), a snapshot, and the end of the
// workers. On a failed snapshot the workers are stopped all the same.
func (r *runner) window(rd *round, e *env, atClose func(closed int64)) (a, b snapshot, err error) {
	defer func() {
		rd.stop.Store(true)
		rd.cancel()
		rd.wg.Wait()
	}()
	time.Sleep(r.cfg.Warm)
	if a, err = r.snap(rd.ctx, e, false); err != nil {
		return a, b, err
	}
	rd.measuring.Store(true)
	time.Sleep(r.cfg.ContDur)
	rd.measuring.Store(false)
	// Waits still going on when the window closes count as samples of
	// their length so far (lower bounds): a starved worker's wait must not
	// vanish from the percentiles because it never ended.
	atClose(int64(time.Since(rd.base)))
	b, err = r.snap(rd.ctx, e, false)
	return a, b, err
}
