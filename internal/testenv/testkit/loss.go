package testkit

import (
	"context"
	"time"
)

// Lease is what AwaitLoss reads of a lease (a *lock.Lease).
type Lease interface {
	ValidUntil() time.Time
	Lost() <-chan struct{}
}

// Loss is how a lease's loss was seen from inside the function that held
// it.
type Loss struct {
	// At is when ctx ended.
	At time.Time
	// ValidUntil is the lease's ValidUntil then.
	ValidUntil time.Time
	// Cause is ctx's cause.
	Cause error
	// LostOpen reports that the lease's Lost channel was still open then.
	LostOpen bool
}

// Late is how long after ValidUntil ctx ended (negative when before).
func (l Loss) Late() time.Duration { return l.At.Sub(l.ValidUntil) }

// AwaitLoss waits until ctx, the context of a function run under le,
// ends, and records what was seen at that moment.
func AwaitLoss(ctx context.Context, le Lease) Loss {
	<-ctx.Done()
	l := Loss{At: time.Now(), ValidUntil: le.ValidUntil(), Cause: context.Cause(ctx)}
	select {
	case <-le.Lost():
	default:
		l.LostOpen = true
	}
	return l
}
