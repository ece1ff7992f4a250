package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// ForceRelease is an operator's forced release of id (lockctl release):
// it deletes the lock whatever its holder's token, but only while the
// holder's fence is fence (as Inspect reported it), so that it can never
// end a newer holder's lease. Then, as a release does, it hands the lock
// off to the live head of the queue, or wakes it: the next grant's fence
// is above fence. It is one force_release script, with the Backend's
// purge limit and wake-up command, and no WAIT (Options.WaitReplicas).
//
// It returns nil when it released the lock, and an error that matches
// backend.ErrNotHeld, and says why, when it refused: the id is not held,
// or its holder has another fence. Nothing changed then. The former
// holder's own Release afterwards reports ErrNotHeld. A bad id or a fence
// of 0 is an *backend.ArgumentError, before any I/O.
//
// It is not a step of backend.Backend: the adapters have it through the
// Steps they embed, and lockctl finds it with a type assertion.
func (s *Steps) ForceRelease(ctx context.Context, id string, fence uint64) error {
	switch {
	case id == "":
		return &backend.ArgumentError{Arg: "id", Reason: "empty"}
	case len(id) > backend.MaxIDLength:
		return &backend.ArgumentError{Arg: "id", Reason: fmt.Sprintf("%d bytes, more than %d", len(id), backend.MaxIDLength)}
	case fence == 0:
		return &backend.ArgumentError{Arg: "fence", Reason: "must be positive: the holder's fence, as Inspect reports it"}
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	k, a := scripts.ForceReleaseCall(s.cfg.ks.For(id), fence, s.cfg.purgeLimit, s.cfg.publish)
	r, first, err := s.runResent(ctx, Call{Script: scripts.ForceRelease, Keys: k, Args: a})
	if err != nil {
		return err
	}
	if err := s.replyErr(r.Err); !errors.Is(err, backend.ErrNotHeld) {
		return err
	}
	if first != nil && !fallback.Unsent(first) {
		// The first send may have released the lock before its connection
		// broke; then the resend finds it free, or granted to the head:
		// the outcome is unknown, not a refusal.
		return first
	}
	msg := strings.TrimPrefix(r.Err.Error(), "ERR ")
	return &refused{reason: strings.TrimPrefix(msg, scripts.CodeNotHeld+" ")}
}

// refused is ForceRelease's refusal; it matches backend.ErrNotHeld.
type refused struct{ reason string }

func (e *refused) Error() string { return "not released: " + e.reason }

// Is reports whether target is backend.ErrNotHeld.
func (e *refused) Is(target error) bool { return target == backend.ErrNotHeld }
