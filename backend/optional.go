package backend

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Batcher is an optional capability: many steps in one round trip. The
// results are one per request, in order; a per-request error (ErrQueueFull)
// goes in BatchGrant.Err, a failure of the whole call in the returned error.
// Each step keeps its own atomicity; the batch as a whole need not be atomic.
type Batcher interface {
	AcquireBatch(ctx context.Context, reqs []AcquireRequest) ([]BatchGrant, error)
	LeaveBatch(ctx context.Context, waiters []Waiter) error
}

// BatchGrant is one result of AcquireBatch.
type BatchGrant struct {
	Grant
	Err error
}

// AcquireBatch runs reqs through b's Batcher when it has one, and otherwise
// one Acquire at a time. A failure of one Acquire in the fallback ends the
// call with that error; the steps before it have taken effect.
func AcquireBatch(ctx context.Context, b Lock, reqs []AcquireRequest) ([]BatchGrant, error) {
	if bb, ok := b.(Batcher); ok {
		return bb.AcquireBatch(ctx, reqs)
	}
	out := make([]BatchGrant, len(reqs))
	for i, r := range reqs {
		g, err := b.Acquire(ctx, r)
		if err != nil && !isPerRequest(err) {
			return out[:i], err
		}
		out[i] = BatchGrant{Grant: g, Err: err}
	}
	return out, nil
}

// LeaveBatch runs Leave for every waiter, in one round trip when b is a
// Batcher. The fallback goes on after an error and returns the first one.
func LeaveBatch(ctx context.Context, b Queue, waiters []Waiter) error {
	if bb, ok := b.(Batcher); ok {
		return bb.LeaveBatch(ctx, waiters)
	}
	var first error
	for _, w := range waiters {
		if err := b.Leave(ctx, w.ID, w.Token); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func isPerRequest(err error) bool {
	return errors.Is(err, ErrQueueFull)
}

// Resolver is an optional capability: the smallest TTL step the store can
// express. The core rejects a ttl below it and truncates every ttl to a
// multiple of it, so that the validity it reports is never longer than the
// store's.
type Resolver interface {
	Resolution() time.Duration
}

// ResolutionOf returns b's resolution, or one millisecond when b is not a
// Resolver.
func ResolutionOf(b any) time.Duration {
	if r, ok := b.(Resolver); ok {
		if d := r.Resolution(); d > 0 {
			return d
		}
	}
	return time.Millisecond
}

// ExtendBatcher is an optional capability: many Extend steps in one round
// trip, which the Locker uses to keep its kept-alive leases alive. The
// result has one error per request, in order: nil when extended,
// ErrNotHeld when the token does not hold the lock (nothing changed), or
// the failure of that step. A failure of the whole call goes in the
// returned error (the per-request results are then nil). Each step keeps
// Extend's contract; the batch need not be atomic.
type ExtendBatcher interface {
	ExtendBatch(ctx context.Context, reqs []ExtendRequest) ([]error, error)
}

// ExtendRequest is one step of an ExtendBatch.
type ExtendRequest struct {
	ID    string
	Token string
	// TTL is the new time to live, relative to the store's clock.
	TTL time.Duration
}

// extendFallbackWorkers is how many Extend calls the ExtendBatch fallback
// runs at once: a pooled or pipelining client then serves a large batch in
// a few round trips' time instead of one per lease.
const extendFallbackWorkers = 16

// ExtendBatch runs reqs through b's ExtendBatcher when it has one.
// Otherwise it runs one Extend per request, up to 16 at a time, in the
// order of reqs; a request not started when ctx ends gets ctx's error. Its
// returned error is always nil then: every failure is per request.
func ExtendBatch(ctx context.Context, b Lock, reqs []ExtendRequest) ([]error, error) {
	if bb, ok := b.(ExtendBatcher); ok {
		return bb.ExtendBatch(ctx, reqs)
	}
	out := make([]error, len(reqs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(extendFallbackWorkers, len(reqs)) {
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

// HandOffer is an optional capability: direct hand-off. When HandsOff
// reports true, every step that finds the lock free with a live head
// queued (a release, the head's leave, a purge, a heartbeat, another
// client's acquire, a lease found expired) grants the lock to that head in
// the same atomic step. It sets the lock to the head's token with the TTL
// the head asked for when it queued and a fence from the same counter as
// Acquire's, and removes the head's entry. The head's wake-up carries the
// grant (Wake.Grant), and tells the next head the new holder's TTL. The
// backend then reports Grant.StoreTime on every Acquire step that leaves
// the requester queued.
//
// The fallback, for a backend without it (or HandsOff false), is
// wake-then-acquire: the head is woken and takes the lock with its own
// Acquire step. A core waiter that is not listening for grants takes a
// wake-up with a Grant as a plain one: its next Acquire step finds its
// token holding the lock and reports the lease (a retried grant).
type HandOffer interface {
	HandsOff() bool
}

// HandsOff reports whether b is a HandOffer that hands off.
func HandsOff(b any) bool {
	h, ok := b.(HandOffer)
	return ok && h.HandsOff()
}
