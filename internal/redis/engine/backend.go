package engine

import (
	"context"
	"errors"
	"time"

	"github.com/redislocker/lock/backend"
)

// The backend steps, as both Redis adapters run them: each asks the Engine
// for its call, sends it with the adapter's Sender, and hands the reply to
// the Engine to parse. The adapters' backend.Backend methods call these.

// Acquire runs the acquire script: fair try-acquire with optional enqueue.
// With WaitReplicas, a grant too few replicas acknowledged is released
// again and fails with backend.ErrNotReplicated.
func (r *Runner) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	rep, err := r.Send(ctx, r.e.AcquireCall(req))
	if err != nil {
		return backend.Grant{}, err
	}
	g, err := r.e.AcquireReply(rep)
	if errors.Is(err, backend.ErrNotReplicated) {
		r.Unconfirmed(ctx, req.ID, req.Token)
	}
	return g, err
}

// Release runs the release script: compare-and-delete, then wake the head.
func (r *Runner) Release(ctx context.Context, id, token string) error {
	rep, err := r.Send(ctx, r.e.ReleaseCall(id, token))
	if err != nil {
		return err
	}
	return r.e.ReleaseReply(rep)
}

// Extend runs the extend script: compare-and-PEXPIRE.
func (r *Runner) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	rep, err := r.Send(ctx, r.e.ExtendCall(backend.ExtendRequest{ID: id, Token: token, TTL: ttl}))
	if err != nil {
		return err
	}
	return r.e.ExtendReply(rep)
}

// Leave runs the leave script: drop the entry, release a raced grant, wake
// the new head.
func (r *Runner) Leave(ctx context.Context, id, token string) error {
	rep, err := r.Send(ctx, r.e.LeaveCall(id, token))
	if err != nil {
		return err
	}
	return r.e.LeaveReply(rep)
}

// Heartbeat runs the heartbeat script once per id (the waiters of one id
// share a call), all of them in one round trip.
func (r *Runner) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	h := r.e.HeartbeatCalls(waiters, waiterTTL)
	reps, err := r.SendAll(ctx, h.Calls)
	if err != nil || len(reps) == 0 {
		return nil, err
	}
	return r.e.HeartbeatReply(h, reps)
}

// AcquireBatch runs the acquire_many script: one call per chunk of
// requests (per hash slot on Redis Cluster), all in one round trip (one per
// master on a cluster). ErrQueueFull and ErrNotReplicated are reported
// per request, in BatchGrant.Err.
func (r *Runner) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	batch := r.e.AcquireBatchCalls(reqs)
	reps, err := r.SendAll(ctx, batch.Calls)
	if err != nil || len(reps) == 0 {
		return nil, err
	}
	out, err := r.e.AcquireBatchReply(batch, reps)
	for i, g := range out {
		if errors.Is(g.Err, backend.ErrNotReplicated) {
			r.Unconfirmed(ctx, reqs[i].ID, reqs[i].Token)
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LeaveBatch runs one leave script per waiter, in one round trip.
func (r *Runner) LeaveBatch(ctx context.Context, waiters []backend.Waiter) error {
	reps, err := r.SendAll(ctx, r.e.LeaveBatchCalls(waiters))
	if err != nil {
		return err
	}
	return r.e.LeaveBatchReply(reps)
}

// ExtendBatch runs one extend script per request in one round trip (one per
// master on a cluster), so that a Locker keeps all its kept-alive leases
// alive at the cost of one round trip. With WaitReplicas each master's
// round trip ends with a WAIT, and an extend that too few replicas
// acknowledged gets ErrNotReplicated.
func (r *Runner) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]error, error) {
	reps, err := r.SendAll(ctx, r.e.ExtendBatchCalls(reqs))
	if err != nil || len(reps) == 0 {
		return nil, err
	}
	return r.e.ExtendBatchReply(reps), nil
}

// Inspect runs the read-only inspect script: one EVALSHA (EVAL when the
// server lost the script). Waiters' QueuedFor is 0: Redis does not record
// when a waiter was queued.
func (r *Runner) Inspect(ctx context.Context, id string, maxWaiters int) (backend.Inspection, error) {
	rep, err := r.Send(ctx, r.e.InspectCall(id, maxWaiters))
	if err != nil {
		return backend.Inspection{ID: id}, err
	}
	return r.e.InspectReply(id, rep)
}

// ForceRelease is an operator's forced release of id (lockctl release,
// which finds it with a type assertion): it deletes the lock only while
// its holder's fence is fence, then hands it off as a release does. It
// returns nil when it released the lock, and an error that matches
// backend.ErrNotHeld, and says why, when it refused. A bad id or a fence
// of 0 is an *backend.ArgumentError, before any I/O.
func (r *Runner) ForceRelease(ctx context.Context, id string, fence uint64) error {
	c, err := r.e.ForceReleaseCall(id, fence)
	if err != nil {
		return err
	}
	rep, err := r.Send(ctx, c)
	if err != nil {
		return err
	}
	return r.e.ForceReleaseReply(rep)
}
