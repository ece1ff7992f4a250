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

// The sentinel errors of package backend that any Locker call may return,
// re-exported under the same value (ErrNotHeld == backend.ErrNotHeld), so
// that a user of a Locker need not import package backend to match them.
// Errors that only some backends return (backend.ErrNotReplicated, from the
// Redis adapters' WaitReplicas option) stay in package backend.
var (
	// ErrNotHeld: Release or Extend by a token that does not hold the lock
	// (never granted, expired, or taken over). Nothing was changed.
	ErrNotHeld = backend.ErrNotHeld
	// ErrClosed: the Locker (or its backend) is closed.
	ErrClosed = backend.ErrClosed
	// ErrQueueFull: the id has as many waiters as the backend allows.
	ErrQueueFull = backend.ErrQueueFull
	// ErrInvalidArgument is matched by every *backend.ArgumentError: bad
	// input, named, returned before any I/O.
	ErrInvalidArgument = backend.ErrInvalidArgument
	// ErrBackend is matched by every failure of the store or its client,
	// which the Locker wraps once so that both ErrBackend and the client's
	// own error match (errors.Is, errors.As). A client's own timeout (dial,
	// read) is such a failure; only the end of the caller's ctx is a ctx
	// error.
	ErrBackend = backend.ErrBackend
	// ErrUnsupported: the backend lacks the optional capability a call
	// needs (Inspect on a backend that is not a backend.Inspector). It also
	// matches errors.ErrUnsupported.
	ErrUnsupported = backend.ErrUnsupported
)

// backendError wraps an error of the store or its client once, so that both
// ErrBackend and the client's own error match with errors.Is / errors.As.
type backendError struct {
	op  string // the step: "acquire", "release", "extend", "leave", "heartbeat", "subscribe"
	id  string // the lock id, if the step had one
	err error  // the client's error
}

func (e *backendError) Error() string {
	if e.id == "" {
		return fmt.Sprintf("lock: backend %s: %v", e.op, e.err)
	}
	return fmt.Sprintf("lock: backend %s %q: %v", e.op, e.id, e.err)
}

func (e *backendError) Unwrap() error { return e.err }

func (e *backendError) Is(target error) bool { return target == ErrBackend }

// wrap turns an error of a backend step into the error the user sees:
// context errors and sentinels keep their identity with the operation added,
// anything else is wrapped once in a *backendError.
func wrap(op, id string, err error) error {
	if err == nil {
		return nil
	}
	var be *backendError
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
		return &backendError{op: op, id: id, err: err}
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
// backend error.
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
