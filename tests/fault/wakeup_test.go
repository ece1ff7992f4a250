package fault

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/faultproxy"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// hooked wraps a backend and runs hooks at the points where a wake-up can
// slip: right after Subscribe returns (after the core's "check", before it
// enqueues) and right after an enqueueing Acquire returns not granted
// (after the check, before the core waits). It can also drop wake-ups.
type hooked struct {
	backend.Backend
	afterSubscribe func()
	afterEnqueue   func()
	drop           atomic.Bool
	wakes          atomic.Int64
	wakeAll        atomic.Int64
}

func (h *hooked) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (func(), error) {
	cancel, err := h.Backend.Subscribe(ctx, id, func(w backend.Wake) {
		if h.drop.Load() {
			return
		}
		h.wakes.Add(1)
		if w.All {
			h.wakeAll.Add(1)
		}
		fn(w)
	})
	if err == nil && h.afterSubscribe != nil {
		h.afterSubscribe()
	}
	return cancel, err
}

func (h *hooked) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	g, err := h.Backend.Acquire(ctx, req)
	if err == nil && req.Wait && !g.Acquired && h.afterEnqueue != nil {
		h.afterEnqueue()
	}
	return g, err
}

// slow are Locker options under which neither the heartbeat fallback
// (WaiterTimeout/3 = 20 s) nor the holder's TTL (1 min) can grant within a
// test's deadline: only a wake-up can.
var slow = lock.Options{WaiterTimeout: time.Minute}

const longTTL = time.Minute

// TestNoLostWakeup (L1): a free lock is noticed within one notification,
// or within the documented fallback bound.
func TestNoLostWakeup(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter) {
		t.Run("release-between-check-and-subscribe", func(t *testing.T) { testReleaseRace(t, a, "subscribe", false) })
		t.Run("release-between-enqueue-and-wait", func(t *testing.T) { testReleaseRace(t, a, "enqueue", false) })
		t.Run("detector-sees-dropped-wakeups", func(t *testing.T) { testReleaseRace(t, a, "enqueue", true) })
		t.Run("client-kill-pubsub", func(t *testing.T) { testKillPubsub(t, a) })
		t.Run("pubsub-down-during-release", func(t *testing.T) { testPubsubDown(t, a) })
		t.Run("holder-expires-without-release", func(t *testing.T) { testHolderExpires(t, a) })
	})
}

// testReleaseRace: the holder releases (through another client) exactly
// at the racy point; the waiter must be granted at once. With drop set,
// wake-ups are dropped and the waiter must NOT be granted within the same
// deadline: the test can tell a wake-up from a fallback.
func testReleaseRace(t *testing.T, a adapter, at string, drop bool) {
	e := newEnv(t, a)
	id := "race"
	r := e.hold(slow, id, longTTL)
	var once sync.Once
	var released atomic.Bool
	release := func() {
		once.Do(func() {
			if err := r.Lease.Release(context.Background()); err != nil {
				t.Errorf("release: %v", err)
			}
			released.Store(true)
		})
	}
	h := &hooked{Backend: e.backend(e.srv.Addr, clientOpts{})}
	h.drop.Store(drop)
	if at == "subscribe" {
		h.afterSubscribe = release
	} else {
		h.afterEnqueue = release
	}
	w := e.locker(h, slow)
	bound := 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	start := time.Now()
	got, err := w.Acquire(ctx, id, longTTL, nil)
	if !released.Load() {
		t.Fatalf("the hook never ran (acquired %v, err %v)", got.Acquired, err)
	}
	if drop {
		if err == nil && got.Acquired {
			t.Fatalf("granted in %v with every wake-up dropped: the test cannot tell a wake-up from a fallback", time.Since(start))
		}
		return
	}
	if err != nil || !got.Acquired {
		t.Fatalf("L1: a release %s was not noticed within %v (acquired %v, err %v): lost wake-up", at, bound, got.Acquired, err)
	}
	t.Logf("granted %v after the call began (%d wake-ups)", time.Since(start), h.wakes.Load())
	_ = got.Lease.Release(context.Background())
}

// queuedWaiter starts an Acquire on l in the background and returns once
// its queue entry is on the server.
func queuedWaiter(t *testing.T, e *env, l *lock.Locker, id string) <-chan lock.Result {
	t.Helper()
	before := e.queued(id)
	done := make(chan lock.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := l.Acquire(ctx, id, longTTL, nil)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		done <- r
	}()
	testkit.Eventually(t, 5*time.Second, "waiter queued", func() bool { return e.queued(id) > before })
	return done
}

// recoveringWaiter is queuedWaiter for tests that take the server or the
// path away while the waiter waits. A waiting Acquire whose re-check step
// fails (the server unreachable) returns that error, as the contract
// allows ("backend failure: a non-nil error; the call holds nothing
// afterwards"): the rueidis adapter wakes every waiter when its connection
// drops, so its waiters re-check during the outage and fail, where
// go-redis's re-check only after the re-subscription succeeded. The
// caller then retries with the same token (AcquireOptions.Token, S6): the
// retry keeps the entry the failed call may have left (its cleanup by
// token fails too while the server is unreachable) instead of queueing
// behind it until WaiterTimeout. This waiter does so; the test's bound
// covers the retries.
func recoveringWaiter(t *testing.T, e *env, l *lock.Locker, id string) (<-chan lock.Result, *atomic.Int64) {
	t.Helper()
	before := e.queued(id)
	done := make(chan lock.Result, 1)
	var failed atomic.Int64
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		opts := &lock.AcquireOptions{Token: fmt.Sprintf("recovering-%d", time.Now().UnixNano())}
		for {
			r, err := l.Acquire(ctx, id, longTTL, opts)
			if err != nil && errors.Is(err, lock.ErrBackend) && ctx.Err() == nil {
				failed.Add(1)
				retry := time.NewTimer(20 * time.Millisecond) // the caller's back-off
				<-retry.C
				continue
			}
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			done <- r
			return
		}
	}()
	testkit.Eventually(t, 5*time.Second, "waiter queued", func() bool { return e.queued(id) > before })
	return done, &failed
}

// killWakeupConns kills the connections that carry wake-ups: pub/sub
// connections (CLIENT KILL TYPE pubsub) and connections with client-side
// caching on (flag t), and returns how many it killed.
func (e *env) killWakeupConns() int {
	e.t.Helper()
	ctx := context.Background()
	n, err := e.raw.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	list, err := e.raw.ClientList(ctx).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, line := range strings.Split(list, "\n") {
		var id, flags string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(f, "flags="); ok {
				flags = v
			}
		}
		if id != "" && strings.Contains(flags, "t") {
			if err := e.raw.ClientKillByFilter(ctx, "ID", id).Err(); err == nil {
				n++
			}
		}
	}
	return int(n)
}

// testKillPubsub: CLIENT KILL TYPE pubsub (and, for an adapter woken by
// client-side caching, CLIENT KILL of its tracking connection) while a
// waiter waits, then a release: the waiter must still be granted. With heartbeats every 20 s
// and a 1 min holder TTL, only the re-subscription's Wake{All} (re-check
// after every reconnect) can grant it within the deadline.
func testKillPubsub(t *testing.T, a adapter) {
	e := newEnv(t, a)
	id := "kill"
	r := e.hold(slow, id, longTTL)
	h := &hooked{Backend: e.backend(e.srv.Addr, clientOpts{})}
	w := e.locker(h, slow)
	done, failed := recoveringWaiter(t, e, w, id)
	if n := e.killWakeupConns(); n < 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub (and tracking connections) killed %d", n)
	}
	start := time.Now()
	// With client-side caching the holder's connection carries tracking
	// too and was killed as well: its release may fail once (unknown
	// outcome) and is retried by token.
	releaseRetrying(t, r.Lease)
	got := recv(t, done, 8*time.Second, "L1: the waiter granted after its pub/sub connection was killed")
	if !got.Acquired {
		t.Fatal("L1: waiter not granted after its pub/sub connection was killed")
	}
	t.Logf("granted %v after the release; %d wake-ups, %d of them Wake{All}; %d failed re-checks", time.Since(start), h.wakes.Load(), h.wakeAll.Load(), failed.Load())
	_ = got.Lease.Release(context.Background())
}

// testPubsubDown: the waiter's connections are cut and refused while the
// holder releases, so the release's PUBLISH reaches nobody. The waiter
// must be granted after it reconnects (re-check on re-subscribe), well
// before the 20 s heartbeat. A second run uses a 900 ms WaiterTimeout and
// drops every wake-up: the heartbeat fallback alone must grant it within
// WaiterTimeout/3 (plus one reconnect).
func testPubsubDown(t *testing.T, a adapter) {
	for _, fallback := range []bool{false, true} {
		name := "resubscribe"
		if fallback {
			name = "heartbeat-fallback"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, a)
			id := "down"
			r := e.hold(slow, id, longTTL)
			p := faultproxy.Start(t, e.srv.Addr)
			h := &hooked{Backend: e.backend(p.Addr(), clientOpts{})}
			opts, bound := slow, 8*time.Second
			if fallback {
				opts = lock.Options{WaiterTimeout: 900 * time.Millisecond}
				bound = 300*time.Millisecond + 2*time.Second // one heartbeat interval + reconnect slack
				h.drop.Store(true)
			}
			w := e.locker(h, opts)
			done, failed := recoveringWaiter(t, e, w, id)
			p.Refuse(true)
			p.CutAll()
			if err := r.Lease.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			p.Refuse(false)
			got := recv(t, done, bound, "L1: the waiter granted after its connections came back")
			if !got.Acquired {
				t.Fatal("L1: waiter not granted")
			}
			t.Logf("granted %v after the path came back; %d wake-ups, %d Wake{All}; %d failed re-checks", time.Since(start), h.wakes.Load(), h.wakeAll.Load(), failed.Load())
			_ = got.Lease.Release(context.Background())
		})
	}
}

// testHolderExpires: the holder's lease runs out with no release (nothing
// is published). The waiter must be granted within the holder's TTL plus
// the resolution (its timer at the holder's remaining TTL), plus slack for
// one round trip under the race detector.
func testHolderExpires(t *testing.T, a adapter) {
	e := newEnv(t, a)
	id := "expire"
	const ttl = 400 * time.Millisecond
	holder := e.directLocker(slow)
	sent := time.Now()
	r, err := holder.Acquire(context.Background(), id, ttl, nil)
	if err != nil || !r.Acquired {
		t.Fatal(err)
	}
	w := e.directLocker(slow)
	done := queuedWaiter(t, e, w, id)
	bound := ttl + time.Millisecond + loadSlack
	got := recv(t, done, time.Until(sent.Add(bound))+time.Second, "waiter granted after the holder expired")
	at := time.Since(sent)
	if !got.Acquired {
		t.Fatal("L1: waiter not granted after the holder's lease expired")
	}
	if at > bound {
		t.Fatalf("L1: waiter granted %v after the holder's acquire; bound TTL+resolution+slack = %v", at, bound)
	}
	if at < ttl {
		t.Fatalf("S1: waiter granted %v after the holder's acquire, before its %v TTL", at, ttl)
	}
	t.Logf("granted %v after the holder's acquire (TTL %v)", at, ttl)
	_ = got.Lease.Release(context.Background())
}

// releaseRetrying releases le, retrying (by token) while the outcome is
// unknown; ErrNotHeld after a failed attempt means that attempt released.
func releaseRetrying(t *testing.T, le *lock.Lease) {
	t.Helper()
	var err error
	for i := 0; i < 5; i++ {
		err = le.Release(context.Background())
		switch {
		case err == nil:
			return
		case errors.Is(err, lock.ErrNotHeld) && i > 0:
			return
		case !errors.Is(err, lock.ErrBackend):
			t.Fatalf("release: %v", err)
		}
	}
	t.Fatalf("release: %v", err)
}
