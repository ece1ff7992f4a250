package backend

import (
	"errors"
	"fmt"
)

// Sentinel errors a backend returns or the core matches. The lock package
// re-exports the ones any Locker call may return (ErrNotHeld, ErrClosed,
// ErrQueueFull, ErrInvalidArgument, ErrBackend, ErrUnsupported) under the
// same name and value (lock.ErrNotHeld == backend.ErrNotHeld); the errors
// only the core returns (lock.ErrNotAcquired, lock.ErrLeaseLost) are
// defined in package lock.
var (
	// ErrNotHeld is returned by Release, Extend and their backend steps when
	// the token does not hold the lock: it was never granted, it expired, or
	// another owner holds it now. Nothing is changed.
	ErrNotHeld = errors.New("lock: not held")

	// ErrClosed is returned by every call on a closed Locker or backend.
	ErrClosed = errors.New("lock: closed")

	// ErrQueueFull is returned when an id already has the maximum number of
	// waiters the backend allows (H3). Nothing is enqueued.
	ErrQueueFull = errors.New("lock: queue full")

	// ErrCapacity is returned when a request names a capacity (a shared
	// id's, or a mutex's) other than the one the id has while it is held
	// or has waiters (see AcquireRequest.Capacity). Nothing is changed.
	ErrCapacity = errors.New("lock: the id is in use with another capacity")

	// ErrNotReplicated is returned by a grant or an extension that fewer
	// replicas acknowledged than the backend was told to wait for (the
	// Redis adapters' WaitReplicas option). A grant is released again
	// before it is returned. The core wraps it as a backend error, so it
	// matches ErrBackend too.
	ErrNotReplicated = errors.New("lock: not acknowledged by enough replicas")

	// ErrInvalidArgument is matched by every *ArgumentError.
	ErrInvalidArgument = errors.New("lock: invalid argument")

	// ErrBackend is matched by every error of the store or its client
	// that a Locker call returns (the core wraps each once, so that both
	// ErrBackend and the client's own error match): the outcome of the step
	// may be unknown.
	ErrBackend = errors.New("lock: backend error")
)

// ArgumentError reports bad input. It is returned before any I/O.
type ArgumentError struct {
	Arg    string // the argument's name, e.g. "id", "ttl", "ids[3]"
	Reason string // what is wrong with it
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("lock: invalid argument %s: %s", e.Arg, e.Reason)
}

// Is reports whether target is ErrInvalidArgument.
func (e *ArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

// Kind is what a failed step's error says about the step's outcome. A
// backend classifies its client's errors with [WithKind]; the core decides
// from the kind whether to clean up, and the conformance suite checks the
// classification (property error-kinds):
//
//   - after a failed Acquire of KindUnknown or KindAnswer (but
//     ErrQueueFull and ErrCapacity), the core removes whatever the step may have left with
//     a Leave by the same token, sent in the background with a bounded
//     timeout (S6); after one of KindUnsent it sends none;
//   - a waiting caller's step that failed with any kind but a sentinel
//     answer is retried with the same token (steps are idempotent by
//     token) while its queue entry can still be alive;
//   - the sentinels (ErrNotHeld, ErrQueueFull, ErrCapacity,
//     ErrNotReplicated) end the call as they are.
//
// So the one mistake that costs something is KindUnsent for a step that
// took effect: its entry or grant is left until its WaiterTTL or TTL runs
// out. Say KindUnsent only when nothing took effect.
type Kind int

const (
	// KindUnknown: the step may have reached the store, and no answer came
	// (a timeout, a reset connection, a ctx that ended while the call was
	// in flight). It may or may not have taken effect. An error a backend
	// did not classify is of this kind.
	KindUnknown Kind = iota
	// KindUnsent: the step took no effect. Either it never reached the
	// store (no connection could be made, the client was closed before it
	// wrote, the ctx ended before the call was sent), or the store
	// answered that it undid all of it: a SQL transaction that was rolled
	// back (a serialization failure, a deadlock victim, a statement
	// timeout inside the step's transaction) is of this kind, not
	// KindAnswer, because nothing of the step is left to clean up.
	KindUnsent
	// KindAnswer: the store answered; the step ran, or was refused, as the
	// answer says. The sentinel errors are of this kind; so is a store
	// error after which part of the step may stand (a script that failed
	// after a write).
	KindAnswer
)

// String returns "unknown", "unsent" or "answer".
func (k Kind) String() string {
	switch k {
	case KindUnsent:
		return "unsent"
	case KindAnswer:
		return "answer"
	}
	return "unknown"
}

// kindError is an error with the Kind a backend gave it.
type kindError struct {
	kind Kind
	err  error
}

func (e *kindError) Error() string { return e.err.Error() }
func (e *kindError) Unwrap() error { return e.err }

// WithKind returns err marked with kind; errors.Is and errors.As still see
// err. It returns nil for a nil err.
func WithKind(kind Kind, err error) error {
	if err == nil {
		return nil
	}
	return &kindError{kind: kind, err: err}
}

// KindOf returns the Kind of err: the one given by WithKind; KindUnsent
// for ErrClosed and ErrInvalidArgument (returned before any I/O);
// KindAnswer for the store's sentinels (ErrNotHeld, ErrQueueFull,
// ErrCapacity, ErrNotReplicated); KindUnknown otherwise.
func KindOf(err error) Kind {
	var ke *kindError
	switch {
	case errors.As(err, &ke):
		return ke.kind
	case errors.Is(err, ErrClosed), errors.Is(err, ErrInvalidArgument):
		return KindUnsent
	case errors.Is(err, ErrNotHeld), errors.Is(err, ErrQueueFull), errors.Is(err, ErrCapacity), errors.Is(err, ErrNotReplicated):
		return KindAnswer
	}
	return KindUnknown
}
