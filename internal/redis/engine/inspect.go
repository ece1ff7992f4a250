package engine

import (
	"context"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/scripts"
)

var _ backend.Inspector = (*Steps)(nil)

// Inspect runs the read-only inspect script: one EVALSHA (EVAL when the
// server lost the script). Waiters' QueuedFor is 0: Redis does not record
// when a waiter was queued. In a client-side-caching mode its read of the
// lock key tracks the key like a step's read.
func (s *Steps) Inspect(ctx context.Context, id string, maxWaiters int) (backend.Inspection, error) {
	if err := s.ready(ctx); err != nil {
		return backend.Inspection{ID: id}, err
	}
	k, a := scripts.InspectCall(s.cfg.ks.For(id), maxWaiters)
	r, err := s.run(ctx, Call{Script: scripts.Inspect, Keys: k, Args: a, Strings: true})
	if err == nil {
		err = s.replyErr(r.Err)
	}
	if err != nil {
		return backend.Inspection{ID: id}, err
	}
	return scripts.ParseInspect(id, r.Strs)
}
