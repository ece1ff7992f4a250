package redisbackend

import (
	"context"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/scripts"
)

var _ backend.Inspector = (*Backend)(nil)

// Inspect runs the read-only inspect script: one EVALSHA (EVAL when the
// server lost the script). Waiters' QueuedFor is 0: Redis does not record
// when a waiter was queued.
func (b *Backend) Inspect(ctx context.Context, id string, maxWaiters int) (backend.Inspection, error) {
	if err := b.check(ctx); err != nil {
		return backend.Inspection{ID: id}, err
	}
	k, a := scripts.InspectCall(b.ks.For(id), maxWaiters)
	r, err := b.run(ctx, scripts.Inspect, k, a).StringSlice()
	if err != nil {
		return backend.Inspection{ID: id}, replyErr(err)
	}
	return scripts.ParseInspect(id, r)
}
