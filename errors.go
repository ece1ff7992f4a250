package lock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redislocker/lock/backend"
)

// The errors only the core returns: no backend step returns them.
var (
	// ErrNotAcquired is returned by Do when the lock was not granted before
	// the queue timeout.
	ErrNotAcquired = errors.New("lock: not acquired")
	// ErrLeaseLost is returned by Do when the lease ended (expired or taken
	// over) while fn ran, so fn may have run unprotected. It is also the
	// cause of the cancellation of fn's context.
	ErrLeaseLost = errors.New("lock: lease lost")
)

// The sentinel errors of package backend, re-exported so that either name
// matches with errors.Is.
var (
	// ErrNotHeld: Release or Extend by a token that does not hold the lock
	// (never granted, expired, or taken over). Nothing was changed.
	ErrNotHeld = backend.ErrNotHeld
	// ErrClosed: the Locker (or its backend) is closed.
	ErrClosed = backend.ErrClosed
	// ErrQueueFull: the id has as many waiters as the backend allows.
	ErrQueueFull = backend.ErrQueueFull
	// ErrNotReplicated: a Redis adapter's WaitReplicas option could not get
	// a grant or an extension acknowledged by enough replicas. It also
	// matches ErrBackend.
	ErrNotReplicated = backend.ErrNotReplicated
	// ErrInvalidArgument is matched by every *ArgumentError.
	ErrInvalidArgument = backend.ErrInvalidArgument
	// ErrBackend is matched by every *BackendError.
	ErrBackend = backend.ErrBackend
)

// ArgumentError reports bad input; it names the argument and is returned
// before any I/O.
type ArgumentError = backend.ArgumentError

// BackendError wraps a store or client failure once; errors.Is matches both
// ErrBackend and the client's error.
type BackendError = backend.BackendError

// wrap turns an error of a backend step into the error the user sees:
// context errors and sentinels keep their identity with the operation added,
// anything else is wrapped once in a *BackendError.
func wrap(op, id string, err error) error {
	if err == nil {
		return nil
	}
	var be *backend.BackendError
	switch {
	case errors.As(err, &be):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("lock: %s %q: %w", op, id, err)
	case isSentinel(err):
		return fmt.Errorf("%w (%s %q)", err, op, id)
	default:
		return &backend.BackendError{Op: op, ID: id, Err: err}
	}
}

func argErr(arg, reason string) error {
	return &backend.ArgumentError{Arg: arg, Reason: reason}
}

// isSentinel reports whether err is (or wraps) one of the lock's own
// sentinel errors, which keep their identity instead of becoming a
// *BackendError.
func isSentinel(err error) bool {
	for _, s := range [...]error{backend.ErrNotHeld, backend.ErrQueueFull, backend.ErrClosed,
		backend.ErrInvalidArgument, ErrLeaseLost, ErrNotAcquired} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
