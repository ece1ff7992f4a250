package wakeup

import "time"

// Delays between a subscriber's attempts after a failure (reconnect,
// subscribe again, drain again): the first is MinDelay, each next one
// twice the last, up to MaxDelay.
const (
	MinDelay = 20 * time.Millisecond
	MaxDelay = 2 * time.Second
)

// NextDelay returns the delay after d: MinDelay when d is shorter, else
// twice d, up to MaxDelay.
func NextDelay(d time.Duration) time.Duration {
	if d < MinDelay {
		return MinDelay
	}
	return min(2*d, MaxDelay)
}

// Sleep waits d and reports true, or reports false as soon as done is
// closed.
func Sleep(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		return true
	}
}
