// Package fallback holds what the core and the conformance suite both run
// for a backend's optional capabilities: the probes (does the backend hand
// off, what is its resolution) and the fallback for a backend that lacks a
// capability. Package backend declares the capabilities; this package is
// the one place that decides what happens without them.
package fallback

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redislocker/lock/backend"
)

// AcquireBatch runs reqs through b's Batcher when it has one, and otherwise
// one Acquire at a time. A failure of one Acquire in the fallback ends the
// call with that error; the steps before it have taken effect.
func AcquireBatch(ctx context.Context, b backend.Backend, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	if bb, ok := b.(backend.Batcher); ok {
		return bb.AcquireBatch(ctx, reqs)
	}
	return AcquireEach(ctx, b, reqs)
}

// AcquireEach is AcquireBatch's fallback: one Acquire of b at a time, even
// when b is a Batcher. The per-request answers ErrQueueFull and
// ErrCapacity go in the request's BatchGrant.Err.
func AcquireEach(ctx context.Context, b backend.Backend, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	out := make([]backend.BatchGrant, len(reqs))
	for i, r := range reqs {
		g, err := b.Acquire(ctx, r)
		if err != nil && !errors.Is(err, backend.ErrQueueFull) && !errors.Is(err, backend.ErrCapacity) {
			return out[:i], err
		}
		out[i] = backend.BatchGrant{Grant: g, Err: err}
	}
	return out, nil
}

// LeaveBatch runs Leave for every waiter, in one round trip when b is a
// Batcher. The fallback goes on after an error and returns the first one.
func LeaveBatch(ctx context.Context, b backend.Backend, waiters []backend.Waiter) error {
	if bb, ok := b.(backend.Batcher); ok {
		return bb.LeaveBatch(ctx, waiters)
	}
	return LeaveEach(ctx, b, waiters)
}

// LeaveEach is LeaveBatch's fallback: one Leave of b at a time.
func LeaveEach(ctx context.Context, b backend.Backend, waiters []backend.Waiter) error {
	var first error
	for _, w := range waiters {
		if err := b.Leave(ctx, w.ID, w.Token); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// extendWorkers is how many Extend calls the ExtendBatch fallback runs at
// once: a pooled or pipelining client then serves a large batch in a few
// round trips' time instead of one per lease.
const extendWorkers = 16

// ExtendBatch runs reqs through b's ExtendBatcher when it has one, and
// otherwise through ExtendEach.
func ExtendBatch(ctx context.Context, b backend.Backend, reqs []backend.ExtendRequest) ([]error, error) {
	if bb, ok := b.(backend.ExtendBatcher); ok {
		return bb.ExtendBatch(ctx, reqs)
	}
	return ExtendEach(ctx, b, reqs)
}

// ExtendEach runs one Extend of b per request, up to 16 at a time, in the
// order of reqs; a request not started when ctx ends gets ctx's error. Its
// returned error is always nil: every failure is per request.
func ExtendEach(ctx context.Context, b backend.Backend, reqs []backend.ExtendRequest) ([]error, error) {
	out := make([]error, len(reqs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(extendWorkers, len(reqs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(reqs); i = int(next.Add(1) - 1) {
				if err := ctx.Err(); err != nil {
					out[i] = err
					continue
				}
				r := reqs[i]
				out[i] = b.Extend(ctx, r.ID, r.Token, r.TTL)
			}
		}()
	}
	wg.Wait()
	return out, nil
}

// Inspect runs b's Inspector, or returns backend.ErrUnsupported when b is
// not one.
func Inspect(ctx context.Context, b backend.Backend, id string, maxWaiters int) (backend.Inspection, error) {
	in, ok := b.(backend.Inspector)
	if !ok {
		return backend.Inspection{ID: id}, backend.ErrUnsupported
	}
	return in.Inspect(ctx, id, maxWaiters)
}

// HandsOff reports whether b is a HandOffer that hands off.
func HandsOff(b backend.Backend) bool {
	h, ok := b.(backend.HandOffer)
	return ok && h.HandsOff()
}

// Shares reports whether b takes shared ids (backend.Sharer reporting
// true). There is no fallback: the core refuses a shared request for a
// backend without it.
func Shares(b backend.Backend) bool {
	s, ok := b.(backend.Sharer)
	return ok && s.Shares()
}

// Resolution returns b's resolution, or one millisecond when b is not a
// Resolver (or reports none).
func Resolution(b backend.Backend) time.Duration {
	if r, ok := b.(backend.Resolver); ok {
		if d := r.Resolution(); d > 0 {
			return d
		}
	}
	return time.Millisecond
}

// Unsent reports whether err says that its step never reached the store,
// so that nothing needs to be cleaned up after it.
func Unsent(err error) bool { return err != nil && backend.KindOf(err) == backend.KindUnsent }
