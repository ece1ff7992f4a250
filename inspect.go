package lock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redislocker/lock/backend"
)

// Inspection is a read-only view of one id: whether it is held, by whom
// (a token fingerprint), with which fence and for how long, and its queue.
type Inspection = backend.Inspection

// WaiterInfo describes one queued waiter of an Inspection.
type WaiterInfo = backend.WaiterInfo

// ErrUnsupported: the backend lacks the optional capability a call needs
// (Inspect on a backend that is not a backend.Inspector). It also matches
// errors.ErrUnsupported.
var ErrUnsupported = backend.ErrUnsupported

// InspectWaiters is how many of the first waiters Locker.Inspect lists.
const InspectWaiters = 10

// Fingerprint returns the fingerprint of a token that inspections show in
// its place: the first 8 hex digits of its SHA-1. Compare it with
// Fingerprint(lease.Token()) to recognise one of your own leases.
func Fingerprint(token string) string { return backend.Fingerprint(token) }

// Inspect returns the state of id as the backend sees it now: held or not,
// the holder's fence, remaining TTL and token fingerprint, the number of
// live waiters and the first InspectWaiters of them, head first. It is
// read-only: it changes nothing, not even expired entries. The view may be
// outdated as soon as it is returned.
//
// A backend that is not a backend.Inspector returns an error matching
// ErrUnsupported; the memory backend and both Redis adapters are
// Inspectors. Bad input (nil ctx, empty or too long id) returns an
// *ArgumentError before any I/O; a backend failure an error matching
// ErrBackend.
func (l *Locker) Inspect(ctx context.Context, id string) (Inspection, error) {
	if err := checkCtx(ctx); err != nil {
		return Inspection{ID: id}, err
	}
	if err := checkID("id", id); err != nil {
		return Inspection{ID: id}, err
	}
	if err := l.begin(); err != nil {
		return Inspection{ID: id}, err
	}
	defer l.end()
	in, err, _ := await(l, waitFor{ctx: ctx, close: true}, nil, func() (backend.Inspection, error) {
		return backend.Inspect(ctx, l.b, id, InspectWaiters)
	}, nil)
	if errors.Is(err, ErrUnsupported) {
		return Inspection{ID: id}, fmt.Errorf("%w (inspect %q: the backend is not a backend.Inspector)", err, id)
	}
	if err != nil {
		return Inspection{ID: id}, wrap(ctx, "inspect", id, err)
	}
	in.ID = id
	return in, nil
}
