package wakeup

import "context"

// Life is how long a wake-up source runs: its context bounds the source's
// own commands and goroutines, and End, called when the source closes,
// cancels it. Make one with NewLife.
type Life struct {
	ctx context.Context
	end context.CancelFunc
}

// NewLife returns a Life that has not ended.
func NewLife() Life {
	ctx, end := context.WithCancel(context.Background())
	return Life{ctx: ctx, end: end}
}

// Ctx returns the context, cancelled when the life ends.
func (l Life) Ctx() context.Context { return l.ctx }

// Done is closed when the life ends.
func (l Life) Done() <-chan struct{} { return l.ctx.Done() }

// Ended reports whether End was called.
func (l Life) Ended() bool { return l.ctx.Err() != nil }

// End ends the life; calls after the first do nothing.
func (l Life) End() { l.end() }
