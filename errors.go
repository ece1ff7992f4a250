package lock

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
		if strings.HasPrefix(err.Error(), "lock: ") {
			return err // wrapped already, by the step that failed
		}
		return fmt.Errorf("lock: %s: %w", opID(op, id), err)
	case isSentinel(err):
		if !isBareSentinel(err) {
			return err // says more already, e.g. "lock: not held (release "x")"
		}
		return fmt.Errorf("%w (%s)", err, opID(op, id))
	default:
		return &backend.BackendError{Op: op, ID: id, Err: err}
	}
}

// opID is op followed by the quoted id, or op alone when there is no id.
func opID(op, id string) string {
	if id == "" {
		return op
	}
	return fmt.Sprintf("%s %q", op, id)
}

func argErr(arg, reason string) error {
	return &backend.ArgumentError{Arg: arg, Reason: reason}
}

var sentinels = [...]error{backend.ErrNotHeld, backend.ErrQueueFull, backend.ErrClosed,
	backend.ErrInvalidArgument, ErrLeaseLost, ErrNotAcquired}

// isSentinel reports whether err is (or wraps) one of the lock's own
// sentinel errors, which keep their identity instead of becoming a
// *BackendError.
func isSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// isBareSentinel reports whether err is one of the sentinels itself, not
// wrapped: only then does wrap add the operation to its text.
func isBareSentinel(err error) bool {
	for _, s := range sentinels {
		if err == s {
			return true
		}
	}
	return false
}

// joinErrs joins the non-nil errs into one that matches each of them, like
// errors.Join, but prints on one line, "first; second", leaving out a
// message already printed (or contained in one printed). It returns nil
// when every err is nil, and a lone error as it is.
func joinErrs(errs ...error) error {
	var kept []error
	for _, e := range errs {
		if e != nil {
			kept = append(kept, e)
		}
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return &joinError{errs: kept}
}

type joinError struct{ errs []error }

func (e *joinError) Error() string {
	var msgs []string
	for _, err := range e.errs {
		m := err.Error()
		dup := false
		for i, prev := range msgs {
			switch {
			case strings.Contains(prev, m):
				dup = true
			case strings.Contains(m, prev):
				msgs[i], dup = m, true
			}
			if dup {
				break
			}
		}
		if !dup {
			msgs = append(msgs, m)
		}
	}
	return strings.Join(msgs, "; ")
}

func (e *joinError) Unwrap() []error { return e.errs }
