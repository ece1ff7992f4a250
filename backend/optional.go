package backend

import (
	"context"
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

// Resolver is an optional capability: the smallest TTL step the store can
// express. The core rejects a ttl below it and truncates every ttl to a
// multiple of it, so that the validity it reports is never longer than the
// store's.
type Resolver interface {
	Resolution() time.Duration
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

// Sharer is an optional capability: shared ids, for semaphores and
// reader-writer locks. When Shares reports true, Acquire (and AcquireBatch)
// take requests with a Capacity of 2 or more (see AcquireRequest.Capacity
// and checklist item 15), and Release, Extend, Leave, Heartbeat and
// Inspect work on shared ids by token as on a mutex.
//
// The fallback, for a backend without it (or Shares false), is none: the
// core returns ErrUnsupported for a shared request before any step.
type Sharer interface {
	Shares() bool
}
