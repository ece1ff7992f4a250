package lock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// inspectWaiters is how many of the first waiters Locker.Inspect lists.
const inspectWaiters = 10

// Inspect returns the state of id as the backend sees it now: held or not,
// the holder's fence, remaining TTL and token fingerprint, the number of
// live waiters and the first 10 of them, head first. It is
// read-only: it changes nothing, not even expired entries. The view may be
// outdated as soon as it is returned. Tokens are shown as fingerprints:
// compare one with backend.Fingerprint(lease.Token()) to recognise one of
// your own leases.
//
// A backend that is not a backend.Inspector returns an error matching
// ErrUnsupported; the memory backend and both Redis adapters are
// Inspectors. Bad input (nil ctx, empty or too long id) returns an
// *backend.ArgumentError before any I/O; a backend failure an error matching
// ErrBackend.
func (l *Locker) Inspect(ctx context.Context, id string) (backend.Inspection, error) {
	if err := checkCtx(ctx); err != nil {
		return backend.Inspection{ID: id}, err
	}
	if err := checkID("id", id); err != nil {
		return backend.Inspection{ID: id}, err
	}
	if err := l.begin(); err != nil {
		return backend.Inspection{ID: id}, err
	}
	defer l.end()
	in, err, _ := await(l.life, waitFor{ctx: ctx, close: true}, nil, func() (backend.Inspection, error) {
		return fallback.Inspect(ctx, l.b, id, inspectWaiters)
	}, nil)
	if errors.Is(err, ErrUnsupported) {
		return backend.Inspection{ID: id}, fmt.Errorf("%w (inspect %q: the backend is not a backend.Inspector)", err, id)
	}
	if err != nil {
		return backend.Inspection{ID: id}, wrap(ctx, "inspect", id, err)
	}
	in.ID = id
	return in, nil
}
