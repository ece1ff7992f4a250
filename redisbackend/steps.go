package redisbackend

import (
	"context"
	"time"

	"github.com/redislocker/lock/backend"
)

// The backend steps: b.run (the engine's Runner over b's client) builds
// each call, sends it with b's client and parses the reply.

// Acquire runs the acquire script: fair try-acquire with optional enqueue.
// With WaitReplicas, a grant too few replicas acknowledged is released
// again and fails with backend.ErrNotReplicated.
func (b *adapter) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	return b.run.Acquire(ctx, req)
}

// Release runs the release script: compare-and-delete, then hand off to
// (or wake) the head.
func (b *adapter) Release(ctx context.Context, id, token string) error {
	return b.run.Release(ctx, id, token)
}

// Extend runs the extend script: compare-and-PEXPIRE.
func (b *adapter) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	return b.run.Extend(ctx, id, token, ttl)
}

// Leave runs the leave script: drop the entry, release a raced grant, wake
// the new head.
func (b *adapter) Leave(ctx context.Context, id, token string) error {
	return b.run.Leave(ctx, id, token)
}

// Heartbeat runs the heartbeat script once per id, all in one round trip.
func (b *adapter) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	return b.run.Heartbeat(ctx, waiters, waiterTTL)
}

// AcquireBatch runs the acquire_many script per chunk of requests (per
// hash slot on Redis Cluster), in one round trip per master.
func (b *adapter) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	return b.run.AcquireBatch(ctx, reqs)
}

// LeaveBatch runs the leave script per waiter, in one round trip.
func (b *adapter) LeaveBatch(ctx context.Context, waiters []backend.Waiter) error {
	return b.run.LeaveBatch(ctx, waiters)
}

// ExtendBatch runs the extend script per request, in one round trip per
// master.
func (b *adapter) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]error, error) {
	return b.run.ExtendBatch(ctx, reqs)
}

// Inspect runs the read-only inspect script. Waiters' QueuedFor is 0:
// Redis does not record when a waiter was queued.
func (b *adapter) Inspect(ctx context.Context, id string, maxWaiters int) (backend.Inspection, error) {
	return b.run.Inspect(ctx, id, maxWaiters)
}

// ForceRelease is an operator's forced release of id (lockctl release,
// which finds it with a type assertion): it deletes the lock only while
// its holder's fence is fence, then hands it off as a release does. It
// returns nil when it released the lock, and an error that matches
// backend.ErrNotHeld, and says why, when it refused. A bad id or a fence
// of 0 is an *backend.ArgumentError, before any I/O.
func (b *adapter) ForceRelease(ctx context.Context, id string, fence uint64) error {
	return b.run.ForceRelease(ctx, id, fence)
}

// Prefix returns the key prefix in use.
func (b *adapter) Prefix() string { return b.e.Prefix() }

// Resolution returns one millisecond: leases are set with PX.
func (b *adapter) Resolution() time.Duration { return time.Millisecond }

// HandsOff reports whether the core may take a grant by hand-off as it
// comes (backend.HandOffer): not with WaitReplicas, where a waiter must
// learn of its grant from a step of its own, which waits for the replicas.
func (b *adapter) HandsOff() bool { return b.e.HandsOff() }

// Shares reports true: shared ids (backend.Sharer), for semaphores and
// reader-writer locks, in every mode.
func (b *adapter) Shares() bool { return true }
