package conformance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
)

// rootFrame is how a stack frame of the lock package (not a subpackage)
// starts: "github.com/redislocker/lock." followed by a function name.
var rootFrame = reflect.TypeFor[lock.Locker]().PkgPath() + "."

// lockGoroutines returns the stacks of the goroutines that have a frame of
// the lock package (or were created by one), by goroutine id.
func lockGoroutines() map[string]string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, rootFrame) {
			continue
		}
		header, _, _ := strings.Cut(g, "\n") // "goroutine 12 [select]:"
		if f := strings.Fields(header); len(f) >= 2 && f[0] == "goroutine" {
			out[f[1]] = g
		}
	}
	return out
}

// H1. After Lockers waited, heartbeated, ran AcquireMany and Do, timed
// out and were cancelled, and were closed, no goroutine of the lock
// package is left.
func noGoroutineLeak(e *env) {
	before := lockGoroutines()
	la, _ := e.defaultLocker()
	lb, sb := e.locker(lock.Options{WaiterTimeout: 300 * time.Millisecond})
	lc, sc := e.defaultLocker()
	ctx := e.ctx(time.Minute)

	// A wait, with heartbeats, ended by a release.
	id := e.id()
	held := e.mustAcquire(la, id, longTTL)
	p := e.queuedAsync(ctx, lb, sb, id, longTTL)
	tok, _ := sb.queuedToken(id)
	e.waitFor(prompt, "the waiter heartbeated", func() bool { return len(sb.heartbeatsOf(id, tok)) > 0 })
	_ = held.Lost() // armed, then ended by the release below
	e.mustRelease(held)
	e.mustRelease(p.granted(e, prompt, "the waiter"))

	// A wait ended by the queue timeout, one by a cancel.
	held = e.mustAcquire(la, id, longTTL)
	if res, err := lb.Acquire(ctx, id, longTTL, &lock.AcquireOptions{QueueTimeout: 100 * time.Millisecond}); err != nil || res.Acquired {
		e.errorf("Acquire(QueueTimeout 100ms) on a held id: Acquired=%v err=%v", res.Acquired, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	p = e.queuedAsync(cctx, lc, sc, id, longTTL)
	cancel()
	p.wait(e, prompt, "the cancelled waiter")

	// AcquireMany with one id held by another process.
	ids := []string{e.id(), id, e.id()}
	released := false
	for snap, err := range lb.AcquireMany(ctx, ids, longTTL, nil) {
		if err != nil {
			e.fatalf("AcquireMany: %v", err)
		}
		for _, le := range snap.Acquired {
			e.mustRelease(le)
		}
		if !released {
			released = true
			e.mustRelease(held)
		}
	}

	// Do, with an extend while fn runs (every ttl/3: 200 ms; the lease
	// outlives an extend loop stalled for 400 ms on a loaded machine).
	if _, err := lock.Do(ctx, lc, e.id(), 600*time.Millisecond, func(ctx context.Context, _ *lock.Lease) (int, error) {
		t := time.NewTimer(250 * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return 0, nil
	}, nil); err != nil {
		e.errorf("Do: %v", err)
	}

	for _, l := range []*lock.Locker{la, lb, lc} {
		_ = l.Close()
	}
	var left map[string]string
	if !eventually(e.t, prompt, func() bool {
		left = lockGoroutines()
		for id := range before {
			delete(left, id)
		}
		return len(left) == 0
	}) {
		var stacks []string
		for _, s := range left {
			stacks = append(stacks, s)
		}
		e.errorf("%d goroutine(s) of the lock package outlived Close by %v:\n\n%s", len(left), prompt, strings.Join(stacks, "\n\n"))
	}
}

// H2. After every kind of scenario the store keeps nothing for the id.
func noStateLeft(e *env) {
	sc, ok := e.h.(StateChecker)
	if !ok {
		e.skipf("the harness has no StateChecker: cannot look at the store's state")
	}
	la, _ := e.defaultLocker()
	lb, sb := e.defaultLocker()
	lq, _ := e.locker(lock.Options{QueueTimeout: 150 * time.Millisecond})
	raw := e.backend()
	ctx := e.ctx(time.Minute)

	type scenario struct {
		name   string
		settle time.Duration // how long the state may take to go
		ids    []string
	}
	var scenarios []scenario
	add := func(name string, settle time.Duration, ids ...string) {
		scenarios = append(scenarios, scenario{name, settle, ids})
	}

	// Acquire, extend, release.
	id := e.id()
	le := e.mustAcquire(la, id, longTTL)
	if err := le.Extend(ctx, longTTL); err != nil {
		e.errorf("Extend: %v", err)
	}
	e.mustRelease(le)
	add("acquire, extend, release", prompt, id)

	// A hand-off through the queue.
	id = e.id()
	held := e.mustAcquire(la, id, longTTL)
	p := e.queuedAsync(ctx, lb, sb, id, longTTL)
	e.mustRelease(held)
	e.mustRelease(p.granted(e, prompt, "the waiter"))
	add("a hand-off through the queue", prompt, id)

	// A failed TryAcquire, a queue timeout and a cancelled waiter.
	id = e.id()
	held = e.mustAcquire(la, id, longTTL)
	if got, err := e.tryAcquire(lb, id, longTTL); got != nil || err != nil {
		e.errorf("TryAcquire of a held id: lease=%v err=%v", got != nil, err)
	}
	if res, err := lq.Acquire(ctx, id, longTTL, nil); res.Acquired || err != nil {
		e.errorf("Acquire with a queue timeout on a held id: Acquired=%v err=%v", res.Acquired, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	p = e.queuedAsync(cctx, lb, sb, id, longTTL)
	cancel()
	p.wait(e, prompt, "the cancelled waiter")
	e.mustRelease(held)
	add("a failed TryAcquire, a queue timeout and a cancelled waiter", prompt, id)

	// Backend steps: an enqueue left by Leave, a grant left by Leave.
	id = e.id()
	tok := func(n int) string { return fmt.Sprintf("state-%s-%d", nonce, n) }
	for _, step := range []func() error{
		func() error {
			_, err := raw.Acquire(ctx, backend.AcquireRequest{ID: id, Token: tok(1), TTL: longTTL})
			return err
		},
		func() error {
			_, err := raw.Acquire(ctx, backend.AcquireRequest{ID: id, Token: tok(2), TTL: longTTL, Wait: true, WaiterTTL: longTTL})
			return err
		},
		func() error {
			_, err := raw.Heartbeat(ctx, []backend.Waiter{{ID: id, Token: tok(2)}}, longTTL)
			return err
		},
		func() error { return raw.Leave(ctx, id, tok(2)) },
		func() error { return raw.Leave(ctx, id, tok(1)) },
	} {
		if err := step(); err != nil {
			e.errorf("backend step: %v", err)
		}
	}
	add("backend Acquire, enqueue, Heartbeat, Leave of both", prompt, id)

	// AcquireMany broken off with an id still queued.
	ids := []string{e.id(), e.id(), e.id()}
	held = e.mustAcquire(la, ids[1], longTTL)
	for snap, err := range lb.AcquireMany(ctx, ids, longTTL, nil) {
		if err != nil {
			e.fatalf("AcquireMany: %v", err)
		}
		for _, le := range snap.Acquired {
			e.mustRelease(le)
		}
		break
	}
	e.mustRelease(held)
	add("AcquireMany broken off while queued", prompt, ids...)

	// Do.
	id = e.id()
	if _, err := lock.Do(ctx, la, id, longTTL, func(context.Context, *lock.Lease) (int, error) { return 0, nil }, nil); err != nil {
		e.errorf("Do: %v", err)
	}
	add("Do", prompt, id)

	// A lease that expires with no release, and no step after it: a store
	// that expires by itself (Redis) keeps nothing once the TTL ran out;
	// one that expires lazily keeps it until its documented idle bound,
	// which the harness's Forgetter makes pass.
	const ttl = 150 * time.Millisecond
	id = e.id()
	e.mustAcquire(la, id, ttl)
	e.letPass(time.Now(), ttl+expiryMargin)
	what := "a lease that expired without a release"
	if f, ok := e.h.(Forgetter); ok {
		f.ForgetIdle(e.t, id)
		what += ", once the store's idle bound passed (Forgetter)"
	}
	add(what, prompt, id)

	for _, s := range scenarios {
		for _, id := range s.ids {
			var left []string
			if !eventually(e.t, s.settle, func() bool {
				left = sc.StateLeft(e.t, id)
				return len(left) == 0
			}) {
				e.errorf("after %s, %v later the store still keeps for %q: %v", s.name, s.settle, id, left)
			}
		}
	}
}

// paddedID returns a unique id of exactly n bytes: e.id() padded with
// bytes that key encodings must handle (hash-tag braces, separators, NUL,
// invalid UTF-8).
func (e *env) paddedID(n int) string {
	const pad = "{}:*?[]\\\x00\xff -"
	id := e.id() + "/"
	if len(id) > n-len(pad) {
		e.fatalf("internal: test name too long for an id of %d bytes: %q", n, id)
	}
	var b strings.Builder
	b.WriteString(id)
	for b.Len() < n {
		b.WriteByte(pad[b.Len()%len(pad)])
	}
	return b.String()
}

// H3. Over-long ids are rejected before any I/O; an id of exactly
// MaxIDLength (with awkward bytes) works end to end.
func boundedInput(e *env) {
	l, s := e.defaultLocker()
	lw, sw := e.locker(lock.Options{WaiterTimeout: time.Minute})
	other, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)

	long := e.paddedID(backend.MaxIDLength + 1)
	calls := []struct {
		what, arg string
		call      func() error
	}{
		{"Acquire", "id", func() error { _, err := l.Acquire(ctx, long, longTTL, nil); return err }},
		{"TryAcquire", "id", func() error { _, err := l.TryAcquire(ctx, long, longTTL); return err }},
		{"AcquireMany", "ids[1]", func() error { return firstErr(l.AcquireMany(ctx, []string{e.id(), long}, longTTL, nil)) }},
		{"Do", "id", func() error {
			_, err := lock.Do(ctx, l, long, longTTL, func(context.Context, *lock.Lease) (int, error) { return 0, nil }, nil)
			return err
		}},
	}
	for _, c := range calls {
		before := s.callCount()
		err := c.call()
		var ae *backend.ArgumentError
		if !errors.As(err, &ae) || !errors.Is(err, lock.ErrInvalidArgument) || ae.Arg != c.arg {
			e.errorf("%s with an id of MaxIDLength+1 (%d) bytes: %v, want an *ArgumentError for %q", c.what, len(long), err, c.arg)
		}
		if n := s.callCount() - before; n != 0 {
			e.errorf("%s with an id of MaxIDLength+1 bytes made %d backend calls before failing, want 0", c.what, n)
		}
	}

	exact := e.paddedID(backend.MaxIDLength)
	sibling := exact[:len(exact)-1] + "+" // differs in the last byte only
	le := e.mustAcquire(l, exact, longTTL)
	e.assertHeld(other, exact, "an id of exactly MaxIDLength bytes, held")
	e.assertFree(other, sibling, "an id that differs from a held one of MaxIDLength bytes in its last byte")
	p := e.acquireAsync(ctx, lw, exact, longTTL)
	e.waitFor(prompt, "a waiter queued on an id of MaxIDLength bytes", func() bool { return sw.queued(exact) })
	e.mustRelease(le)
	le = p.granted(e, prompt, "the waiter on an id of MaxIDLength bytes, after the release (its wake-up must name the id exactly)")
	e.mustRelease(le)
	e.assertFree(other, exact, "an id of exactly MaxIDLength bytes, after release")
	for snap, err := range l.AcquireMany(ctx, []string{exact, sibling}, longTTL, nil) {
		if err != nil {
			e.fatalf("AcquireMany of ids of MaxIDLength bytes: %v", err)
		}
		for _, le := range snap.Acquired {
			e.mustRelease(le)
		}
	}
}

// firstErr runs an AcquireMany sequence and returns its first error,
// releasing any lease it yields.
func firstErr(seq func(func(lock.Snapshot, error) bool)) error {
	for snap, err := range seq {
		if err != nil {
			return err
		}
		for _, le := range snap.Acquired {
			_ = le.Release(context.Background())
		}
	}
	return nil
}
