package fault

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/locktest"
	"github.com/redislocker/lock/internal/testenv/testkit"
	"github.com/redislocker/lock/redisbackend"
)

// timerSlack is how late, past ValidUntil, fn may see its ctx end: the
// Locker's timer fires at ValidUntil and a goroutine must be scheduled to
// cancel the ctx and another to observe it, on a loaded 2-core machine.
const timerSlack = 100 * time.Millisecond

// defaultGoRedis returns a go-redis backend whose client has default
// options (the README's snippet sets timeouts): ContextTimeoutEnabled is
// false, so the client ignores ctx deadlines and a step on a stalled
// server waits for its ReadTimeout (3 s).
func defaultGoRedis(e *env) backend.Backend {
	client := redis.NewClient(&redis.Options{Addr: e.srv.Addr})
	b, err := redisbackend.New(client, &redisbackend.Options{Prefix: e.prefix})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = b.Close()
		_ = client.Close()
	})
	return b
}

// TestDoLeaseLossWithGoRedisDefaults: with a go-redis client on default
// options and redis-server SIGSTOPped while Do's fn runs, fn's ctx ends
// (cause ErrLeaseLost) and Lost fires no later than ValidUntil (+
// timerSlack) although the keep-alive extend is stuck for the client's 3 s
// read timeout (S5). The server resumes after the key expired there too;
// Do returns ErrLeaseLost, since fn ran past the lease.
func TestDoLeaseLossWithGoRedisDefaults(t *testing.T) {
	e := newEnv(t, adapters[0])
	l := e.locker(defaultGoRedis(e), lock.Options{})
	t.Cleanup(func() { _ = e.srv.Resume() }) // never leave it stopped
	const ttl = 500 * time.Millisecond
	var loss testkit.Loss
	_, err := lock.Do(context.Background(), l, "stall", ttl, func(ctx context.Context, le *lock.Lease) (int, error) {
		if err := e.srv.Pause(); err != nil {
			t.Error(err)
		}
		loss = testkit.AwaitLoss(ctx, le)
		// Resume once the key has surely expired on the server too: a
		// release that still found it held would prove fn protected.
		time.AfterFunc(2*ttl, func() { _ = e.srv.Resume() })
		return 0, nil
	}, nil)
	late := loss.Late()
	t.Logf("fn's ctx ended %v after ValidUntil; Do returned %v", late, err)
	if late > timerSlack || !errors.Is(loss.Cause, lock.ErrLeaseLost) || loss.LostOpen {
		t.Errorf("S5: fn's ctx ended %v after ValidUntil (cause %v, Lost still open: %v) while the server was stopped; want at most %v, cause ErrLeaseLost, Lost closed",
			late, loss.Cause, loss.LostOpen, timerSlack)
	}
	if !errors.Is(err, lock.ErrLeaseLost) {
		t.Errorf("Do = %v; want ErrLeaseLost: fn ran past its lease", err)
	}
}

// TestDoReleaseStallIsNoLeaseLoss: fn returns inside its lease and the
// server is SIGSTOPped before the release, for 3 ttls; the release finds
// the lease expired (or times out). fn never ran unprotected, so Do returns
// fn's value and no ErrLeaseLost.
func TestDoReleaseStallIsNoLeaseLoss(t *testing.T) {
	e := newEnv(t, adapters[0])
	l := e.locker(defaultGoRedis(e), lock.Options{})
	t.Cleanup(func() { _ = e.srv.Resume() })
	const ttl = 500 * time.Millisecond
	var returnedIn time.Duration
	v, err := lock.Do(context.Background(), l, "release-stall", ttl, func(ctx context.Context, le *lock.Lease) (int, error) {
		if err := e.srv.Pause(); err != nil {
			t.Error(err)
		}
		time.AfterFunc(3*ttl, func() { _ = e.srv.Resume() })
		returnedIn = time.Until(le.ValidUntil())
		return 7, nil
	}, nil)
	if returnedIn <= 0 {
		t.Fatalf("fn returned %v after ValidUntil; the test needs it to return inside the lease", -returnedIn)
	}
	if v != 7 || errors.Is(err, lock.ErrLeaseLost) {
		t.Errorf("Do = (%d, %v) when only the release stalled; want 7 and no ErrLeaseLost", v, err)
	}
	t.Logf("Do returned (%d, %v)", v, err)
}

// TestAcquireManyKeepAliveRedis: AcquireMany of 1,000 ids with a 1 s TTL,
// each lease processed for 2 ms (2 s, two TTLs, in all), on a Locker with
// KeepAlive: every release succeeds. The Redis adapters use the core's
// fallback (one Extend per lease per tick, 16 at a time), which costs one
// script call per lease every ttl/3: the TTL is twice the 500 ms
// so that the race detector on a loaded 2-core machine keeps up (the
// issue's exact figures run on memorybackend, TestAcquireManyKeepAlive).
func TestAcquireManyKeepAliveRedis(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *env) {
		l := e.directLocker(lock.Options{})
		const n, ttl, work = 1000, time.Second, 2 * time.Millisecond
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("job-%d", i)
		}
		start := time.Now()
		w, err := locktest.WorkAll(context.Background(), l, ids, ttl, work, &lock.AcquireOptions{KeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d snapshots, %d released, %d ErrNotHeld, in %v", w.Snapshots, w.Released, w.NotHeld, time.Since(start))
		if w.Released != n {
			t.Fatalf("with keep-alive %d of %d releases succeeded (%d ErrNotHeld); want all; Locker's log: %q",
				w.Released, n, w.NotHeld, e.logs.matching("lock: "))
		}
		if took := time.Since(start); took < 2*ttl {
			t.Logf("processing took %v, less than 2 ttls: the keep-alive was not exercised on this run", took)
		}
	})
}
