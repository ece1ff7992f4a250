package lock

import (
	"context"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// observedBackend wraps a Locker's backend when it has an Observer: every
// step is reported as an EventStep. It keeps the optional capabilities the
// core uses (Batcher and ExtendBatcher, through the inner one or the
// fallbacks; Resolver; Inspector, or ErrUnsupported; HandOffer; Sharer), so the core treats it
// like the backend it wraps. A new optional capability that the core looks for must be
// forwarded here too.
type observedBackend struct {
	b   backend.Backend
	obs *observer
}

var (
	_ backend.Backend       = (*observedBackend)(nil)
	_ backend.Batcher       = (*observedBackend)(nil)
	_ backend.ExtendBatcher = (*observedBackend)(nil)
	_ backend.Resolver      = (*observedBackend)(nil)
	_ backend.Inspector     = (*observedBackend)(nil)
	_ backend.HandOffer     = (*observedBackend)(nil)
	_ backend.Sharer        = (*observedBackend)(nil)
)

// step reports one step that began at start.
func (o *observedBackend) step(name, id string, start time.Time, err error) {
	o.obs.o.Observe(Event{Kind: EventStep, ID: id, Step: name, Start: start, Duration: time.Since(start), Err: err})
}

func (o *observedBackend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	start := time.Now()
	g, err := o.b.Acquire(ctx, req)
	o.step("acquire", req.ID, start, err)
	return g, err
}

func (o *observedBackend) Release(ctx context.Context, id, token string) error {
	start := time.Now()
	err := o.b.Release(ctx, id, token)
	o.step("release", id, start, err)
	return err
}

func (o *observedBackend) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	start := time.Now()
	err := o.b.Extend(ctx, id, token, ttl)
	o.step("extend", id, start, err)
	return err
}

func (o *observedBackend) Leave(ctx context.Context, id, token string) error {
	start := time.Now()
	err := o.b.Leave(ctx, id, token)
	o.step("leave", id, start, err)
	return err
}

func (o *observedBackend) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	start := time.Now()
	r, err := o.b.Heartbeat(ctx, waiters, waiterTTL)
	o.step("heartbeat", "", start, err)
	return r, err
}

func (o *observedBackend) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (func(), error) {
	start := time.Now()
	cancel, err := o.b.Subscribe(ctx, id, fn)
	o.step("subscribe", id, start, err)
	return cancel, err
}

func (o *observedBackend) Close() error { return o.b.Close() }

// AcquireBatch runs the inner Batcher, or the core's fallback (one
// Acquire at a time, each reported as a step of its own).
func (o *observedBackend) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	bb, ok := o.b.(backend.Batcher)
	if !ok {
		return fallback.AcquireEach(ctx, o, reqs)
	}
	start := time.Now()
	r, err := bb.AcquireBatch(ctx, reqs)
	o.step("acquire_batch", "", start, err)
	return r, err
}

// LeaveBatch runs the inner Batcher, or the core's fallback.
func (o *observedBackend) LeaveBatch(ctx context.Context, waiters []backend.Waiter) error {
	bb, ok := o.b.(backend.Batcher)
	if !ok {
		return fallback.LeaveEach(ctx, o, waiters)
	}
	start := time.Now()
	err := bb.LeaveBatch(ctx, waiters)
	o.step("leave_batch", "", start, err)
	return err
}

func (o *observedBackend) Resolution() time.Duration { return fallback.Resolution(o.b) }

// Inspect runs the inner Inspector, or returns ErrUnsupported.
func (o *observedBackend) Inspect(ctx context.Context, id string, maxWaiters int) (backend.Inspection, error) {
	if _, ok := o.b.(backend.Inspector); !ok {
		return backend.Inspection{ID: id}, backend.ErrUnsupported
	}
	start := time.Now()
	in, err := fallback.Inspect(ctx, o.b, id, maxWaiters)
	o.step("inspect", id, start, err)
	return in, err
}

// ExtendBatch runs the inner ExtendBatcher, or the core's fallback (one
// Extend per request, each reported as a step of its own).
func (o *observedBackend) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]error, error) {
	if _, ok := o.b.(backend.ExtendBatcher); !ok {
		return fallback.ExtendEach(ctx, o, reqs)
	}
	start := time.Now()
	r, err := fallback.ExtendBatch(ctx, o.b, reqs)
	o.step("extend_batch", "", start, err)
	return r, err
}

// HandsOff reports whether the inner backend hands off.
func (o *observedBackend) HandsOff() bool { return fallback.HandsOff(o.b) }

// Shares reports whether the inner backend takes shared ids.
func (o *observedBackend) Shares() bool { return fallback.Shares(o.b) }
