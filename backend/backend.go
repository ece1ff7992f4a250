package backend

import (
	"context"
	"time"
)

const (
	// MaxIDLength is the longest lock id, in bytes, that the core accepts.
	MaxIDLength = 512
	// MaxTokenLength is the longest owner token, in bytes, that the core accepts.
	MaxTokenLength = 128
)

// Backend is what lock.New takes: the steps of a lock with a fair queue,
// and the delivery of wake-ups. See the package doc for each step's
// contract.
type Backend interface {
	// Acquire is the fair try-acquire, with optional enqueue, in one atomic
	// step (checklist items 1, 2 and 7).
	Acquire(ctx context.Context, req AcquireRequest) (Grant, error)
	// Release deletes the lock if token holds it and wakes the head of the
	// queue; otherwise ErrNotHeld.
	Release(ctx context.Context, id, token string) error
	// Extend sets the lock's expiry to now+ttl if token holds it; otherwise
	// ErrNotHeld. It never re-creates an expired lock and keeps the fence.
	Extend(ctx context.Context, id, token string, ttl time.Duration) error
	// Leave removes token's queue entry and releases the lock if token holds
	// it; it wakes the new head if the lock is then free. Idempotent.
	Leave(ctx context.Context, id, token string) error
	// Heartbeat refreshes the deadlines of the listed waiters that are still
	// queued to now+waiterTTL, purges expired waiters of their ids, and
	// reports one result per waiter, in order.
	Heartbeat(ctx context.Context, waiters []Waiter, waiterTTL time.Duration) ([]HeartbeatResult, error)
	// Subscribe arranges for fn to be called with the wake-ups of id until
	// the returned cancel function is called. It returns only once wake-ups
	// can be delivered. fn never blocks and may be called from any
	// goroutine; it may still be called briefly after cancel.
	Subscribe(ctx context.Context, id string, fn func(Wake)) (cancel func(), err error)
	// Close releases the backend's own resources (subscriptions, goroutines).
	// It does not close a client the caller passed in. Later calls return
	// ErrClosed.
	Close() error
}

// AcquireRequest is the input of one Acquire step.
type AcquireRequest struct {
	ID    string
	Token string
	// TTL is the lease's time to live if granted, relative to the store's clock.
	TTL time.Duration
	// Wait, when the lock is not granted, enqueues the requester (or keeps
	// its place) and sets its waiter deadline to now+WaiterTTL.
	Wait bool
	// WaiterTTL is how long a queue entry lives without a heartbeat. Used
	// only with Wait.
	WaiterTTL time.Duration
	// Capacity, when 2 or more, makes the id shared (a [Sharer]'s
	// capability): leases on it may be held together as long as their
	// Permits add up to at most Capacity. 0 (and 1) mean a mutex: one
	// lease at a time. An id's capacity is fixed while it has a holder or
	// a waiter: a request with another capacity fails with ErrCapacity and
	// changes nothing.
	Capacity int
	// Permits is how many of the Capacity permits the lease takes, 1 to
	// Capacity (Capacity: an exclusive lease, which excludes every other
	// one). Used only when Capacity is 2 or more; the core never sends 0
	// with a shared Capacity.
	Permits int
}

// Grant is the outcome of one Acquire step.
type Grant struct {
	// Acquired reports that req.Token holds the lock after the step.
	Acquired bool
	// Fence is the lease's fencing token when Acquired: strictly increasing
	// per id across grants, unchanged by a retried acquire or an extend.
	Fence uint64
	// TTL is, when Acquired, the validity left at the step: req.TTL for a
	// new grant, the remaining TTL for a retried one.
	TTL time.Duration
	// HolderTTL is, when not Acquired and the lock is held, the holder's
	// remaining TTL, at least the resolution while the lock is held (round
	// up, never to 0); 0 only when the lock is free but waiters are ahead.
	HolderTTL time.Duration
	// Queued reports that, when not Acquired, the requester has a queue entry.
	Queued bool
	// Ticket is the requester's queue ticket when Queued.
	Ticket uint64
	// Head reports that, when Queued, the requester is first in the queue.
	Head bool
	// StoreTime is the store's clock during the step, or zero when the
	// backend does not say. A HandOffer reports it whenever the requester
	// is queued: the core maps a hand-off's StoreTime to its own clock
	// through the pair (time the step was sent, StoreTime).
	StoreTime time.Time
}

// Waiter names one queue entry.
type Waiter struct {
	ID    string
	Token string
}

// HeartbeatResult is the outcome of one waiter's heartbeat.
type HeartbeatResult struct {
	// Queued reports that the entry was live and its deadline refreshed.
	// false means it is gone: purged (its deadline passed, whether or not
	// a step removed it yet), left, or granted by an earlier step (a
	// waiter's entry goes with its grant, so a waiter that a hand-off
	// granted before this heartbeat is reported not queued). It is not
	// re-added. A HandOffer may report true for a waiter that this very
	// step granted (its wake-up carries the grant).
	Queued bool
	// Ready reports that, after the step, the lock is free and this waiter
	// is the head: it should Acquire now (the fallback for a lost
	// wake-up). A HandOffer grants a live head instead, so it reports Ready
	// only when it does not hand off.
	Ready bool
}

// Wake is one wake-up delivered to a subscriber.
type Wake struct {
	ID string
	// Token names the waiter the wake-up is for (the head). Empty means
	// "the earliest local waiter of ID should re-check".
	Token string
	// All asks every local waiter of ID to re-check (after a reconnect or
	// when notifications may have been lost).
	All bool
	// HolderTTL, when > 0 with a Token, tells that waiter it became the
	// head while the lock is held, and the holder's remaining TTL at the
	// step (checklist item 7). The core then keeps a timer at that TTL
	// instead of re-checking. 0 means a plain wake-up: re-check now.
	HolderTTL time.Duration
	// Grant, when non-nil with a Token, tells that waiter that the step
	// which freed the lock granted it to the waiter (a HandOffer's direct
	// hand-off): the waiter holds the lock and need not run a step.
	Grant *HandOff
}

// HandOff is a grant made by a step to the head of the queue, carried by
// its wake-up.
type HandOff struct {
	// Fence is the new lease's fence, from the same counter as Acquire's.
	Fence uint64
	// TTL is the lease's TTL from the grant: the TTL the waiter asked for
	// when it queued.
	TTL time.Duration
	// StoreTime is the store's clock at the grant.
	StoreTime time.Time
}
