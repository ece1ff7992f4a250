package fault

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// keepOpen is a backend that many Lockers share, one after the other:
// the Close of a Locker over it leaves the backend (and its client, its
// connections) open for the next. It forwards every other step, and every
// optional capability, to b: a Locker over it runs as it would over b.
// Whoever made b closes it.
type keepOpen struct{ b backend.Backend }

var (
	_ backend.Backend       = keepOpen{}
	_ backend.Batcher       = keepOpen{}
	_ backend.ExtendBatcher = keepOpen{}
	_ backend.Resolver      = keepOpen{}
	_ backend.Inspector     = keepOpen{}
	_ backend.HandOffer     = keepOpen{}
	_ backend.Sharer        = keepOpen{}
)

func (k keepOpen) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	return k.b.Acquire(ctx, req)
}

func (k keepOpen) Release(ctx context.Context, id, token string) error {
	return k.b.Release(ctx, id, token)
}

func (k keepOpen) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	return k.b.Extend(ctx, id, token, ttl)
}

func (k keepOpen) Leave(ctx context.Context, id, token string) error {
	return k.b.Leave(ctx, id, token)
}

func (k keepOpen) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	return k.b.Heartbeat(ctx, waiters, waiterTTL)
}

func (k keepOpen) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (func(), error) {
	return k.b.Subscribe(ctx, id, fn)
}

// Close leaves b open.
func (k keepOpen) Close() error { return nil }

func (k keepOpen) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	return fallback.AcquireBatch(ctx, k.b, reqs)
}

func (k keepOpen) LeaveBatch(ctx context.Context, waiters []backend.Waiter) error {
	return fallback.LeaveBatch(ctx, k.b, waiters)
}

func (k keepOpen) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]error, error) {
	return fallback.ExtendBatch(ctx, k.b, reqs)
}

func (k keepOpen) Inspect(ctx context.Context, id string, maxWaiters int) (backend.Inspection, error) {
	return fallback.Inspect(ctx, k.b, id, maxWaiters)
}

func (k keepOpen) Resolution() time.Duration { return fallback.Resolution(k.b) }

func (k keepOpen) HandsOff() bool { return fallback.HandsOff(k.b) }

// Shares forwards b's backend.Sharer.
func (k keepOpen) Shares() bool {
	s, ok := k.b.(backend.Sharer)
	return ok && s.Shares()
}

// TestKeepOpenForwardsEveryCapability: a Locker over keepOpen finds every
// optional capability of the backend it wraps.
func TestKeepOpenForwardsEveryCapability(t *testing.T) {
	testkit.Forwards(t, reflect.TypeFor[keepOpen](), filepath.Join("..", "..", "backend"))
}
