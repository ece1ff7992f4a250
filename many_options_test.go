package lock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redislocker/lock"
)

// TestAcquireManyOptions: AcquireMany takes Acquire's options. NoWait takes
// the free ids in one step and lists the others in the one snapshot's
// NotAcquired, queueing nothing; Token is every lease's token; QueueTimeout
// bounds the wait of this call; a bad option is an *ArgumentError yielded
// before any I/O.
func TestAcquireManyOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := newStore(t)
		l := newLocker(t, store.NewBackend(), nil)
		other := newLocker(t, store.NewBackend(), nil)
		held, err := other.Acquire(ctx, "b", time.Hour, nil)
		if err != nil || !held.Acquired {
			t.Fatalf("Acquire(b) = %+v, %v", held, err)
		}

		var snaps []lock.Snapshot
		for s, err := range l.AcquireMany(ctx, []string{"a", "b", "c"}, time.Minute, &lock.AcquireOptions{NoWait: true, Token: "tok-1"}) {
			if err != nil {
				t.Fatal(err)
			}
			snaps = append(snaps, s)
		}
		if len(snaps) != 1 {
			t.Fatalf("NoWait yielded %d snapshots, want 1", len(snaps))
		}
		var got []string
		for _, le := range snaps[0].Acquired {
			got = append(got, le.ID())
			if le.Token() != "tok-1" {
				t.Errorf("lease of %s has token %q, want the caller's %q", le.ID(), le.Token(), "tok-1")
			}
		}
		if !slices.Equal(got, []string{"a", "c"}) || !slices.Equal(snaps[0].NotAcquired, []string{"b"}) {
			t.Fatalf("NoWait: acquired %v, not acquired %v; want [a c] and [b]", got, snaps[0].NotAcquired)
		}
		if in, err := l.Inspect(ctx, "b"); err != nil || in.QueueLen != 0 {
			t.Fatalf("after a NoWait AcquireMany, b's queue has %d waiters (%v); want none", in.QueueLen, err)
		}

		start := time.Now()
		snaps = snaps[:0]
		for s, err := range l.AcquireMany(ctx, []string{"b"}, time.Minute, &lock.AcquireOptions{QueueTimeout: 2 * time.Second}) {
			if err != nil {
				t.Fatal(err)
			}
			snaps = append(snaps, s)
		}
		if waited := time.Since(start); waited != 2*time.Second || len(snaps) != 1 || !slices.Equal(snaps[0].NotAcquired, []string{"b"}) {
			t.Fatalf("QueueTimeout 2s on a held id: after %v, snapshots %+v; want b not acquired after 2s", waited, snaps)
		}

		var ae interface{ Error() string }
		for _, err := range l.AcquireMany(ctx, []string{"d"}, time.Minute, &lock.AcquireOptions{KeepAlive: true, ExtendEvery: time.Hour}) {
			ae = err
		}
		if ae == nil || !errors.Is(ae.(error), lock.ErrInvalidArgument) {
			t.Fatalf("AcquireMany with ExtendEvery over ttl: %v; want an *ArgumentError", ae)
		}
	})
}
