package backend

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// ErrUnsupported is returned when the backend lacks an optional capability
// that a call needs (Inspect on a backend that is not an Inspector). It
// also matches the standard library's errors.ErrUnsupported.
var ErrUnsupported = fmt.Errorf("lock: not supported by the backend: %w", errors.ErrUnsupported)

// MaxInspectWaiters is the most waiters one Inspection lists.
const MaxInspectWaiters = 100

// Inspector is an optional capability: a read-only view of one id, for
// operators. Inspect changes nothing: it does not purge, expire or wake.
//
// maxWaiters bounds Inspection.Waiters: at most min(maxWaiters,
// MaxInspectWaiters) of the first live waiters, head first; 0 or less
// lists none. QueueLen counts every live waiter whatever the bound.
// A waiter is live while its deadline is after the store's now.
//
// Without it, the core's Inspect returns ErrUnsupported.
type Inspector interface {
	Inspect(ctx context.Context, id string, maxWaiters int) (Inspection, error)
}

// Inspection is the state of one id at one moment of the store's clock.
// It never holds a token, only fingerprints of tokens (see [Fingerprint]).
type Inspection struct {
	// ID is the id inspected.
	ID string
	// Held reports that a lease on the id is live.
	Held bool
	// Fence is the holder's fencing token when Held.
	Fence uint64
	// TTL is the holder's remaining lease when Held.
	TTL time.Duration
	// Holder is the fingerprint of the holder's token when Held.
	Holder string
	// Capacity is the id's capacity when it is shared (2 or more, see
	// AcquireRequest.Capacity), else 0.
	Capacity int
	// Holders are the live leases of a shared id, in grant (fence) order;
	// nil for a mutex. Held, Fence, TTL and Holder then describe the
	// lease granted last.
	Holders []HolderInfo
	// QueueLen is the number of live waiters.
	QueueLen int
	// Waiters are the first live waiters, head first, bounded by the
	// maxWaiters of the call.
	Waiters []WaiterInfo
}

// HolderInfo describes one live lease of a shared id.
type HolderInfo struct {
	// Fence is the lease's fencing token.
	Fence uint64
	// TTL is the lease's remaining time to live.
	TTL time.Duration
	// Holder is the fingerprint of the lease's token.
	Holder string
	// Permits is how many permits the lease takes.
	Permits int
}

// WaiterInfo describes one queued waiter.
type WaiterInfo struct {
	// Ticket is the waiter's queue ticket: the queue is ordered by it.
	Ticket uint64
	// Token is the fingerprint of the waiter's token.
	Token string
	// QueuedFor is how long the waiter has been queued, or 0 when the
	// backend does not record when waiters were queued (the Redis backends
	// do not).
	QueuedFor time.Duration
	// Deadline is the time left until the waiter is purged unless its
	// process heartbeats again (it does so every third of its
	// WaiterTimeout while it lives). It is not the caller's queue timeout.
	Deadline time.Duration
	// Permits is how many permits the waiter asks for, on a shared id;
	// 0 on a mutex.
	Permits int
}

// fingerprintLength is the length of a Fingerprint.
const fingerprintLength = 8

// Fingerprint returns a short, stable fingerprint of a token: the first 8
// lowercase hex digits of its SHA-1. It tells tokens apart in logs and
// inspections without revealing them (a token is random, so 32 bits of its
// digest give nothing away). The Redis scripts compute the same value on
// the server with redis.sha1hex, so the token never leaves Redis.
func Fingerprint(token string) string {
	sum := sha1.Sum([]byte(token))
	return hex.EncodeToString(sum[:])[:fingerprintLength]
}
