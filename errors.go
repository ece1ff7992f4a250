package lock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

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
	// ErrCapacity: the id is held, or has waiters, with another capacity
	// (AcquireOptions.Capacity: a semaphore's, or a mutex's). Nothing was
	// changed.
	ErrCapacity = backend.ErrCapacity
	// ErrUnsupported: the backend lacks the optional capability a call
	// needs (Inspect on a backend that is not a backend.Inspector, a shared
	// id on one that is not a backend.Sharer). It also
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

// wrap turns the error of a backend step, or one the core made, into the
// error the caller sees. It decides by the error's type and by ctx, the
// caller's context, never by the error's text:
//   - an error wrap made already (a *backendError, a *ctxError) is
//     returned as it is;
//   - one of the lock's sentinels keeps its identity, with the operation
//     added;
//   - a context error is the caller's own only when ctx is done (ctxDone):
//     it becomes a *ctxError that matches ctx.Err();
//   - anything else is wrapped once in a *backendError: a store or client
//     failure, also a timeout of the client's own (a dial or read timeout;
//     Go's net timeouts match context.DeadlineExceeded) or of a bound the
//     Locker put on a step while the caller's ctx lives.
//
// A cleanup's error, never the caller's, is wrapped with context.Background()
// (a nil ctx means the same).
func wrap(ctx context.Context, op, id string, err error) error {
	if err == nil {
		return nil
	}
	var be *backendError
	var ce *ctxError
	switch {
	case errors.As(err, &be), errors.As(err, &ce):
		return err
	case isSentinel(err):
		if !isBareSentinel(err) {
			return err // says more already, e.g. "lock: not held (release "x")"
		}
		return fmt.Errorf("%w (%s)", err, opID(op, id))
	case isCtxErr(err) && ctx != nil && ctxDone(ctx):
		return &ctxError{op: op, id: id, err: ctxErrOf(ctx)}
	default:
		return &backendError{op: op, id: id, err: err}
	}
}

// ctxError is the error of a call that ended because the caller's context
// did: it matches ctx.Err() (context.Canceled or context.DeadlineExceeded)
// and never ErrBackend.
type ctxError struct {
	op, id string
	err    error // ctx.Err()
}

func (e *ctxError) Error() string { return "lock: " + opID(e.op, e.id) + ": " + e.err.Error() }
func (e *ctxError) Unwrap() error { return e.err }

// isCtxErr reports whether err is, or wraps, a context error.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// ctxDone reports whether ctx has ended: it is cancelled, or its deadline
// has passed (a client that applies the deadline to its socket may return
// a moment before the context's own timer fires).
func ctxDone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// ctxErrOf returns the error of a ctx that ctxDone found ended.
func ctxErrOf(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// cancelled reports whether err says that the call ended because its
// caller's context did, or because the Locker closed, rather than by a
// failure: a *ctxError, or ErrClosed, anywhere in err.
func cancelled(err error) bool {
	var ce *ctxError
	return errors.As(err, &ce) || errors.Is(err, ErrClosed)
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
	backend.ErrInvalidArgument, backend.ErrCapacity, ErrLeaseLost, ErrNotAcquired}

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
// errors.Join, but prints on one line, "first; second", leaving out an
// error that another one wraps (whose text it prints already, see wraps).
// It returns nil when every err is nil, and a lone error as it is.
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
	var shown []error
	for _, err := range e.errs {
		if slices.ContainsFunc(shown, func(s error) bool { return wraps(s, err) }) {
			continue // printed already, as s or within it
		}
		// err prints the errors it wraps: it takes the place of the first
		// of them shown, and the others go.
		i := slices.IndexFunc(shown, func(s error) bool { return wraps(err, s) })
		if i < 0 {
			shown = append(shown, err)
			continue
		}
		shown[i] = err
		rest := slices.DeleteFunc(shown[i+1:], func(s error) bool { return wraps(err, s) })
		shown = shown[:i+1+len(rest)]
	}
	msgs := make([]string, len(shown))
	for i, err := range shown {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e *joinError) Unwrap() []error { return e.errs }

// wraps reports whether outer is inner, or wraps it: inner itself is
// found along outer's Unwrap methods. Unlike errors.Is it ignores Is
// methods, which match errors whose text is not printed (a *backendError
// matches ErrBackend, a net timeout context.DeadlineExceeded): an error
// that wraps another prints its text, one that only matches it need not.
func wraps(outer, inner error) bool {
	comparable := reflect.TypeOf(inner).Comparable()
	var walk func(error) bool
	walk = func(e error) bool {
		for e != nil {
			if comparable && e == inner {
				return true
			}
			switch u := e.(type) {
			case interface{ Unwrap() error }:
				e = u.Unwrap()
			case interface{ Unwrap() []error }:
				return slices.ContainsFunc(u.Unwrap(), walk)
			default:
				return false
			}
		}
		return false
	}
	return walk(outer)
}
