package testkit

import (
	"context"
	"errors"
	"testing"
	"time"
)

type lease struct {
	until time.Time
	lost  chan struct{}
}

func (l lease) ValidUntil() time.Time { return l.until }
func (l lease) Lost() <-chan struct{} { return l.lost }

// AwaitLoss returns when ctx ends, with ctx's cause, the lease's
// ValidUntil and whether Lost was still open.
func TestAwaitLoss(t *testing.T) {
	cause := errors.New("lost")
	for _, closed := range []bool{false, true} {
		le := lease{until: time.Now().Add(-time.Second), lost: make(chan struct{})}
		if closed {
			close(le.lost)
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		l := AwaitLoss(ctx, le)
		if l.Cause != cause || l.ValidUntil != le.until || l.LostOpen == closed || l.Late() < time.Second {
			t.Errorf("Lost closed %v: AwaitLoss = %+v (late %v)", closed, l, l.Late())
		}
	}
}
