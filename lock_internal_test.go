package lock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// stepFake is a backend whose steps are functions set by each test; calls
// are recorded by name.
type stepFake struct {
	mu      sync.Mutex
	calls   []string
	acquire func(backend.AcquireRequest) (backend.Grant, error)
	wakeFns map[string]func(backend.Wake)
}

func (f *stepFake) rec(name string) {
	f.mu.Lock()
	f.calls = append(f.calls, name)
	f.mu.Unlock()
}

func (f *stepFake) callsCopy() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *stepFake) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	f.rec("acquire")
	return f.acquire(req)
}
func (f *stepFake) Release(context.Context, string, string) error { f.rec("release"); return nil }
func (f *stepFake) Extend(context.Context, string, string, time.Duration) error {
	f.rec("extend")
	return nil
}
func (f *stepFake) Leave(context.Context, string, string) error { f.rec("leave"); return nil }
func (f *stepFake) Heartbeat(_ context.Context, ws []backend.Waiter, _ time.Duration) ([]backend.HeartbeatResult, error) {
	f.rec("heartbeat")
	return make([]backend.HeartbeatResult, len(ws)), nil
}
func (f *stepFake) Subscribe(_ context.Context, id string, fn func(backend.Wake)) (func(), error) {
	f.rec("subscribe")
	f.mu.Lock()
	if f.wakeFns == nil {
		f.wakeFns = map[string]func(backend.Wake){}
	}
	f.wakeFns[id] = fn
	f.mu.Unlock()
	return func() { f.rec("unsubscribe") }, nil
}
func (f *stepFake) Close() error { return nil }

func quietLocker(b backend.Backend, o *Options) *Locker {
	if o == nil {
		o = &Options{}
	}
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	l, err := New(b, o)
	if err != nil {
		panic(err)
	}
	return l
}

// A client error is wrapped once: it matches ErrBackend and the client's
// own error, and the step whose outcome is unknown is cleaned up by token.
func TestBackendErrorWrappedOnceAndCleanedUp(t *testing.T) {
	clientErr := errors.New("connection reset")
	f := &stepFake{acquire: func(backend.AcquireRequest) (backend.Grant, error) { return backend.Grant{}, clientErr }}
	l := quietLocker(f, nil)
	defer l.Close()
	_, err := l.Acquire(context.Background(), "x", time.Second, nil)
	if !errors.Is(err, ErrBackend) || !errors.Is(err, clientErr) {
		t.Fatalf("err = %v; want it to match ErrBackend and the client error", err)
	}
	var be *backendError
	if !errors.As(err, &be) || be.op != "acquire" || be.id != "x" {
		t.Fatalf("err = %#v; want a *backendError for acquire of x", err)
	}
	if got := f.callsCopy(); len(got) != 2 || got[0] != "acquire" || got[1] != "leave" {
		t.Fatalf("calls = %v; want [acquire leave] (S6: an unknown outcome is cleaned up by token)", got)
	}
}

// A wake-up that names no waiter goes to the local waiter with the lowest
// ticket only.
func TestWakeWithoutTokenGoesToEarliestLocalWaiter(t *testing.T) {
	l := quietLocker(&stepFake{}, nil)
	defer l.Close()
	woken := map[string]int{}
	mk := func(tok string, ticket uint64) *waiter {
		return &waiter{id: "x", token: tok, ticket: ticket, wake: func() { woken[tok]++ }}
	}
	l.room.ids["x"] = &idWaiters{waiters: map[*waiter]struct{}{
		mk("late", 9): {}, mk("early", 3): {}, mk("mid", 5): {},
	}, ready: make(chan struct{})}
	l.room.onWake(backend.Wake{ID: "x"})
	if woken["early"] != 1 || woken["mid"] != 0 || woken["late"] != 0 {
		t.Fatalf("woken = %v; want only the earliest ticket", woken)
	}
	l.room.onWake(backend.Wake{ID: "x", Token: "late"})
	if woken["late"] != 1 || woken["mid"] != 0 {
		t.Fatalf("woken = %v; want the named waiter", woken)
	}
	l.room.onWake(backend.Wake{ID: "x", All: true})
	if woken["early"] != 2 || woken["mid"] != 1 || woken["late"] != 2 {
		t.Fatalf("woken = %v; want every waiter for Wake.All", woken)
	}
	l.room.onWake(backend.Wake{ID: "other", All: true}) // no waiters: nothing happens
	delete(l.room.ids, "x")
}

// An uncontended Acquire+Release costs exactly two backend steps, and no
// subscription.
func TestUncontendedCostsTwoSteps(t *testing.T) {
	f := &stepFake{acquire: func(r backend.AcquireRequest) (backend.Grant, error) {
		return backend.Grant{Acquired: true, Fence: 1, TTL: r.TTL}, nil
	}}
	l := quietLocker(f, nil)
	defer l.Close()
	res, err := l.Acquire(context.Background(), "x", time.Second, nil)
	if err != nil || !res.Acquired || res.WasInUse {
		t.Fatalf("Acquire = %+v, %v; want a grant with WasInUse false", res, err)
	}
	if err := res.Lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := res.Lease.Release(context.Background()); err != nil {
		t.Fatalf("second Release = %v; want nil (idempotent)", err)
	}
	if got := f.callsCopy(); len(got) != 2 || got[0] != "acquire" || got[1] != "release" {
		t.Fatalf("calls = %v; want [acquire release]", got)
	}
}

// ValidUntil is measured from when the request was sent and never exceeds
// the backend's own remaining TTL for a retried grant (S2).
func TestValidUntilIsConservative(t *testing.T) {
	f := &stepFake{acquire: func(r backend.AcquireRequest) (backend.Grant, error) {
		return backend.Grant{Acquired: true, Fence: 7, TTL: 100 * time.Millisecond}, nil // a retried grant: 100ms left
	}}
	l := quietLocker(f, nil)
	defer l.Close()
	before := time.Now()
	res, err := l.Acquire(context.Background(), "x", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	if vu := res.Lease.ValidUntil(); vu.Before(before) || vu.After(time.Now().Add(100*time.Millisecond)) {
		t.Fatalf("ValidUntil = %v; want within [%v, now+100ms]", vu, before)
	}
}

// A ttl is truncated to the backend's resolution and rejected below it.
func TestTTLResolution(t *testing.T) {
	l := quietLocker(&stepFake{}, nil)
	defer l.Close()
	if got, err := l.checkTTL(1500 * time.Microsecond); err != nil || got != time.Millisecond {
		t.Fatalf("checkTTL(1.5ms) = %v, %v; want 1ms", got, err)
	}
	_, err := l.checkTTL(500 * time.Microsecond)
	var ae *backend.ArgumentError
	if !errors.As(err, &ae) || ae.Arg != "ttl" || !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("checkTTL(0.5ms) = %v; want an ArgumentError naming ttl", err)
	}
}

// Sentinels keep their identity through wrap and never read as backend
// failures.
func TestWrapKeepsSentinels(t *testing.T) {
	for _, s := range []error{ErrNotHeld, ErrQueueFull, ErrClosed, ErrInvalidArgument, ErrLeaseLost, ErrNotAcquired} {
		err := wrap(context.Background(), "op", "x", s)
		if !errors.Is(err, s) || errors.Is(err, ErrBackend) {
			t.Errorf("wrap(%v) = %v; want it to match %v and not ErrBackend", s, err, s)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := wrap(ctx, "op", "x", context.Canceled); !errors.Is(err, context.Canceled) || errors.Is(err, ErrBackend) {
		t.Errorf("wrap(context.Canceled) with ctx cancelled = %v; want a ctx error, not ErrBackend", err)
	}
}

// A process that keeps contending on an id keeps its subscription between
// waits (one Subscribe for two waits, and no plain try before the second),
// and Close ends the lingering subscription.
func TestSubscriptionLingersBetweenWaits(t *testing.T) {
	var mu sync.Mutex
	queued := 0
	f := &stepFake{}
	f.acquire = func(r backend.AcquireRequest) (backend.Grant, error) {
		mu.Lock()
		defer mu.Unlock()
		if !r.Wait {
			return backend.Grant{}, nil // held by someone else
		}
		queued++
		if queued%2 == 1 {
			return backend.Grant{Queued: true, Ticket: uint64(queued), Head: true, HolderTTL: time.Millisecond}, nil
		}
		return backend.Grant{Acquired: true, Fence: uint64(queued), TTL: r.TTL}, nil
	}
	l := quietLocker(f, &Options{WaiterTimeout: time.Minute})
	for i := 0; i < 2; i++ {
		res, err := l.Acquire(context.Background(), "x", time.Second, nil)
		if err != nil || !res.Acquired || !res.WasInUse {
			t.Fatalf("wait %d: %+v, %v; want a grant after queueing", i, res, err)
		}
	}
	want := []string{"acquire", "subscribe", "acquire", "acquire", "acquire", "acquire"}
	if got := f.callsCopy(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("calls = %v; want %v (the second wait reuses the subscription and skips the plain try)", got, want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := f.callsCopy(); got[len(got)-1] != "unsubscribe" {
		t.Fatalf("calls after Close = %v; want the lingering subscription cancelled", got)
	}
}

// A replica shortfall is a backend failure that keeps its own identity:
// it matches both ErrNotReplicated and ErrBackend.
func TestWrapNotReplicated(t *testing.T) {
	err := wrap(context.Background(), "acquire", "x", fmt.Errorf("%w: 0 of 1 replicas", backend.ErrNotReplicated))
	if !errors.Is(err, backend.ErrNotReplicated) || !errors.Is(err, ErrBackend) {
		t.Fatalf("wrap = %v; want it to match ErrNotReplicated and ErrBackend", err)
	}
}
