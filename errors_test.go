package lock_test

import (
	"testing"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
)

// The sentinels' messages are part of the API: users log and compare them.
// ErrNotAcquired and ErrLeaseLost are the core's own; the others are
// package backend's, under the same name.
func TestSentinelMessages(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		msg  string
	}{
		{"ErrNotHeld", lock.ErrNotHeld, "lock: not held"},
		{"ErrNotAcquired", lock.ErrNotAcquired, "lock: not acquired"},
		{"ErrLeaseLost", lock.ErrLeaseLost, "lock: lease lost"},
		{"ErrClosed", lock.ErrClosed, "lock: closed"},
		{"ErrQueueFull", lock.ErrQueueFull, "lock: queue full"},
		{"ErrNotReplicated", lock.ErrNotReplicated, "lock: not acknowledged by enough replicas"},
		{"ErrInvalidArgument", lock.ErrInvalidArgument, "lock: invalid argument"},
		{"ErrBackend", lock.ErrBackend, "lock: backend error"},
	} {
		if got := c.err.Error(); got != c.msg {
			t.Errorf("lock.%s.Error() = %q, want %q", c.name, got, c.msg)
		}
	}
	for _, c := range []struct {
		name      string
		ours, bes error
	}{
		{"ErrNotHeld", lock.ErrNotHeld, backend.ErrNotHeld},
		{"ErrClosed", lock.ErrClosed, backend.ErrClosed},
		{"ErrQueueFull", lock.ErrQueueFull, backend.ErrQueueFull},
		{"ErrNotReplicated", lock.ErrNotReplicated, backend.ErrNotReplicated},
		{"ErrInvalidArgument", lock.ErrInvalidArgument, backend.ErrInvalidArgument},
		{"ErrBackend", lock.ErrBackend, backend.ErrBackend},
	} {
		if c.ours != c.bes {
			t.Errorf("lock.%s is not backend.%s", c.name, c.name)
		}
	}
}
