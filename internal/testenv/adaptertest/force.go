package adaptertest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// forceReleaser is how lockctl finds the forced release on a Backend.
type forceReleaser interface {
	ForceRelease(ctx context.Context, id string, fence uint64) error
}

// ForceRelease checks an operator's forced release (the step layer's
// ForceRelease, a method of the adapter) through op, a third Backend on
// the store of holder and waiter: it is refused for another fence, ends the
// holder's lease for its own fence and hands the lock off to the queued
// waiter, with a higher fence; it is refused for an id that is not held.
func ForceRelease(t *testing.T, holder, waiter, op backend.Backend) {
	t.Helper()
	ctx := context.Background()
	fr, ok := op.(forceReleaser)
	if !ok {
		t.Fatal("the Backend has no ForceRelease")
	}
	g := MustAcquire(t, holder, Req("job", "H", false))
	wakes := Subscribed(t, waiter, "job")
	if q := MustAcquire(t, waiter, Req("job", "W", true)); !q.Queued {
		t.Fatalf("the waiter was not queued: %+v", q)
	}
	err := fr.ForceRelease(ctx, "job", g.Fence+1)
	if !errors.Is(err, backend.ErrNotHeld) || !strings.Contains(err.Error(), "fence") {
		t.Fatalf("another fence: %v, want ErrNotHeld naming the holder's fence", err)
	}
	if err := holder.Extend(ctx, "job", "H", time.Minute); err != nil {
		t.Fatalf("the holder lost its lease to a refused forced release: %v", err)
	}
	if err := fr.ForceRelease(ctx, "job", g.Fence); err != nil {
		t.Fatal(err)
	}
	w := wakes.NextMatching(t, "the waiter's hand-off", func(w backend.Wake) bool { return w.Token == "W" && w.Grant != nil })
	if w.Grant.Fence <= g.Fence {
		t.Fatalf("the hand-off's fence %d is not above the old holder's %d", w.Grant.Fence, g.Fence)
	}
	if err := holder.Release(ctx, "job", "H"); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("the former holder's Release: %v, want ErrNotHeld", err)
	}
	if err := waiter.Release(ctx, "job", "W"); err != nil {
		t.Fatalf("the new holder's Release: %v", err)
	}
	if err := fr.ForceRelease(ctx, "job", w.Grant.Fence); !errors.Is(err, backend.ErrNotHeld) || !strings.Contains(err.Error(), "not held") {
		t.Fatalf("a free id: %v, want ErrNotHeld saying it is not held", err)
	}
}
