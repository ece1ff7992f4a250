package memstore

import (
	"sync"
	"time"
)

// Clock is the store's source of time: every lease expiry and waiter
// deadline is measured by it.
type Clock interface {
	Now() time.Time
}

// realClock is the default Clock: time.Now.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that only moves when Advance is called, so that
// tests of the backend's steps advance time instead of sleeping. It moves
// the store's clock only: a lock.Locker's timers (Lost, queue timeouts)
// run on the process's clock; test those inside a testing/synctest bubble
// instead. It is goroutine-safe. The zero
// value is a clock stopped at the zero time.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a ManualClock that reads start until it is advanced.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start}
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d. It panics if d is negative: the
// store's clock never goes back.
func (c *ManualClock) Advance(d time.Duration) {
	if d < 0 {
		panic("memstore: ManualClock.Advance with a negative duration")
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
