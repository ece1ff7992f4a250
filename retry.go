package lock

import (
	"context"
	"time"

	"github.com/redislocker/lock/backend"
)

// retryBackoff is the first wait before a failed waiting step is retried;
// it doubles up to the heartbeat interval.
const retryBackoff = 10 * time.Millisecond

// retries is the state of a queued caller's run of failed steps. They are
// retried while the queue entry can still be alive: for WaiterTimeout from
// the last step or heartbeat that found it queued (or from the first
// failure, when none did). No step starts after that, and one in flight
// then is cut by its context.
type retries struct {
	failing time.Time     // when the entry was last known alive; zero: no run
	backoff time.Duration // the next wait
	last    error         // the last step's error
}

// failed records a failed step; alive is when the entry was last known
// alive. It reports whether the step began the run.
func (r *retries) failed(alive time.Time, err error) bool {
	r.last = err
	if !r.failing.IsZero() {
		return false
	}
	r.failing, r.backoff = alive, retryBackoff
	return true
}

// over reports whether the run has lasted ttl: the caller gives up.
func (r *retries) over(ttl time.Duration) bool {
	return !r.failing.IsZero() && time.Since(r.failing) >= ttl
}

// wait returns how long to wait before the next retry: the backoff,
// doubled each time up to most, and never past the end of the run.
func (r *retries) wait(ttl, most time.Duration) time.Duration {
	d := min(r.backoff, time.Until(r.failing.Add(ttl)))
	r.backoff = min(2*r.backoff, most)
	return max(d, 0)
}

// end returns when the run ends (it lasts ttl), or the zero time when
// none runs.
func (r *retries) end(ttl time.Duration) time.Time {
	if r.failing.IsZero() {
		return time.Time{}
	}
	return r.failing.Add(ttl)
}

// boundTo returns ctx with end as its deadline, or ctx itself when end is
// zero.
func boundTo(ctx context.Context, end time.Time) (context.Context, context.CancelFunc) {
	if end.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, end)
}

// cut returns err, or, when the run's deadline (not ctx) ended the step,
// the run's last error marked as of unknown outcome: the cut step may
// have reached the store.
func (r *retries) cut(ctx, sctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || sctx.Err() == nil || r.last == nil {
		return err
	}
	return backend.WithKind(backend.KindUnknown, r.last)
}
