package redisbackend

import (
	"context"
	"errors"
	"time"

	"github.com/redislocker/lock/backend"
)

// The backend steps. Each one asks the engine for its call, sends it with
// the adapter's client (b.run, built on b's commands) and hands the reply
// to the engine to parse.

// Acquire runs the acquire script: fair try-acquire with optional enqueue.
// With WaitReplicas, a grant too few replicas acknowledged is released
// again and fails with backend.ErrNotReplicated.
func (b *adapter) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	r, err := b.run.Send(ctx, b.e.AcquireCall(req))
	if err != nil {
		return backend.Grant{}, err
	}
	g, err := b.e.AcquireReply(r)
	if errors.Is(err, backend.ErrNotReplicated) {
		b.run.Unconfirmed(ctx, req.ID, req.Token)
	}
	return g, err
}

// Release runs the release script: compare-and-delete, then wake the head.
func (b *adapter) Release(ctx context.Context, id, token string) error {
	r, err := b.run.Send(ctx, b.e.ReleaseCall(id, token))
	if err != nil {
		return err
	}
	return b.e.ReleaseReply(r)
}

// Extend runs the extend script: compare-and-PEXPIRE.
func (b *adapter) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	r, err := b.run.Send(ctx, b.e.ExtendCall(backend.ExtendRequest{ID: id, Token: token, TTL: ttl}))
	if err != nil {
		return err
	}
	return b.e.ExtendReply(r)
}

// Leave runs the leave script: drop the entry, release a raced grant, wake
// the new head.
func (b *adapter) Leave(ctx context.Context, id, token string) error {
	r, err := b.run.Send(ctx, b.e.LeaveCall(id, token))
	if err != nil {
		return err
	}
	return b.e.LeaveReply(r)
}

// Heartbeat runs the heartbeat script once per id (the waiters of one id
// share a call), all of them in one pipeline.
func (b *adapter) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	h := b.e.HeartbeatCalls(waiters, waiterTTL)
	rs, err := b.run.SendAll(ctx, h.Calls)
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	return b.e.HeartbeatReply(h, rs)
}

// AcquireBatch runs the acquire_many script: one call per chunk of
// requests (per hash slot on Redis Cluster), all in one pipeline (one per
// master on a cluster). ErrQueueFull and ErrNotReplicated are reported
// per request, in BatchGrant.Err.
func (b *adapter) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	batch := b.e.AcquireBatchCalls(reqs)
	rs, err := b.run.SendAll(ctx, batch.Calls)
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	out, err := b.e.AcquireBatchReply(batch, rs)
	for i, g := range out {
		if errors.Is(g.Err, backend.ErrNotReplicated) {
			b.run.Unconfirmed(ctx, reqs[i].ID, reqs[i].Token)
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LeaveBatch runs one leave script per waiter, in one pipeline.
func (b *adapter) LeaveBatch(ctx context.Context, waiters []backend.Waiter) error {
	rs, err := b.run.SendAll(ctx, b.e.LeaveBatchCalls(waiters))
	if err != nil {
		return err
	}
	return b.e.LeaveBatchReply(rs)
}

// ExtendBatch runs one extend script per request in one pipeline (one per
// master on a cluster), so that a Locker keeps all its kept-alive leases
// alive at the cost of one round trip. With WaitReplicas each master's
// round trip ends with a WAIT, and an extend that too few replicas
// acknowledged gets ErrNotReplicated.
func (b *adapter) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]error, error) {
	rs, err := b.run.SendAll(ctx, b.e.ExtendBatchCalls(reqs))
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	return b.e.ExtendBatchReply(rs), nil
}

// Inspect runs the read-only inspect script: one EVALSHA (EVAL when the
// server lost the script). Waiters' QueuedFor is 0: Redis does not record
// when a waiter was queued.
func (b *adapter) Inspect(ctx context.Context, id string, maxWaiters int) (backend.Inspection, error) {
	r, err := b.run.Send(ctx, b.e.InspectCall(id, maxWaiters))
	if err != nil {
		return backend.Inspection{ID: id}, err
	}
	return b.e.InspectReply(id, r)
}

// ForceRelease is an operator's forced release of id (lockctl release,
// which finds it with a type assertion): it deletes the lock only while
// its holder's fence is fence, then hands it off as a release does. It
// returns nil when it released the lock, and an error that matches
// backend.ErrNotHeld, and says why, when it refused. A bad id or a fence
// of 0 is an *backend.ArgumentError, before any I/O.
func (b *adapter) ForceRelease(ctx context.Context, id string, fence uint64) error {
	c, err := b.e.ForceReleaseCall(id, fence)
	if err != nil {
		return err
	}
	r, err := b.run.Send(ctx, c)
	if err != nil {
		return err
	}
	return b.e.ForceReleaseReply(r)
}

// Prefix returns the key prefix in use.
func (b *adapter) Prefix() string { return b.e.Prefix() }

// Resolution returns one millisecond: leases are set with PX.
func (b *adapter) Resolution() time.Duration { return time.Millisecond }

// HandsOff reports whether the core may take a grant by hand-off as it
// comes (backend.HandOffer): not with WaitReplicas, where a waiter must
// learn of its grant from a step of its own, which waits for the replicas.
func (b *adapter) HandsOff() bool { return b.e.HandsOff() }
