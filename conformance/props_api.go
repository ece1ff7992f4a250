package conformance

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// badCall is one call that must fail before any I/O.
type badCall struct {
	what string
	arg  string // what the message must name (case-insensitive)
	call func() error
}

// checkBad runs each call and checks that it fails with want (an
// *ArgumentError naming the argument when want is ErrInvalidArgument) and
// makes no backend call.
func (e *env) checkBad(s *spy, want error, calls []badCall) {
	e.t.Helper()
	for _, c := range calls {
		before := 0
		if s != nil {
			before = s.callCount()
		}
		err := c.call()
		switch {
		case !errors.Is(err, want):
			e.errorf("%s: %v, want an error matching %v", c.what, err, want)
		case want == lock.ErrInvalidArgument:
			var ae *backend.ArgumentError
			if !errors.As(err, &ae) {
				e.errorf("%s: %v (%T) is not an *ArgumentError", c.what, err, err)
			} else if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(c.arg)) {
				e.errorf("%s: %q does not name the argument %q", c.what, err, c.arg)
			}
		}
		if s != nil {
			if n := s.callCount() - before; n != 0 {
				e.errorf("%s: %d backend calls before failing, want 0", c.what, n)
			}
		}
	}
}

// bad-input: every invalid argument, and every call after Close, fails
// before any I/O with an error that names the argument (or ErrClosed), and
// nothing is held afterwards.
func badInput(e *env) {
	l, s := e.defaultLocker()
	other, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)
	var nilCtx context.Context
	id := e.id()
	ids := []string{e.id(), e.id()}
	fn := func(context.Context, *lock.Lease) (int, error) { return 1, nil }
	res := fallback.Resolution(s)

	calls := []badCall{
		{"Acquire(nil ctx)", "ctx", func() error { _, err := l.Acquire(nilCtx, id, longTTL, nil); return err }},
		{"TryAcquire(nil ctx)", "ctx", func() error { _, err := l.TryAcquire(nilCtx, id, longTTL); return err }},
		{"Acquire(empty id)", "id", func() error { _, err := l.Acquire(ctx, "", longTTL, nil); return err }},
		{"TryAcquire(empty id)", "id", func() error { _, err := l.TryAcquire(ctx, "", longTTL); return err }},
		{"Acquire(ttl 0)", "ttl", func() error { _, err := l.Acquire(ctx, id, 0, nil); return err }},
		{"Acquire(ttl -1s)", "ttl", func() error { _, err := l.Acquire(ctx, id, -time.Second, nil); return err }},
		{"TryAcquire(ttl 0)", "ttl", func() error { _, err := l.TryAcquire(ctx, id, 0); return err }},
		{"Acquire(token over MaxTokenLength)", "token", func() error {
			_, err := l.Acquire(ctx, id, longTTL, &lock.AcquireOptions{Token: strings.Repeat("t", backend.MaxTokenLength+1)})
			return err
		}},
		{"Acquire(negative QueueTimeout)", "QueueTimeout", func() error {
			_, err := l.Acquire(ctx, id, longTTL, &lock.AcquireOptions{QueueTimeout: -time.Second})
			return err
		}},
		{"Do(nil ctx)", "ctx", func() error { _, err := lock.Do(nilCtx, l, id, longTTL, fn, nil); return err }},
		{"Do(empty id)", "id", func() error { _, err := lock.Do(ctx, l, "", longTTL, fn, nil); return err }},
		{"Do(ttl 0)", "ttl", func() error { _, err := lock.Do(ctx, l, id, 0, fn, nil); return err }},
		{"Do(nil fn)", "fn", func() error { _, err := lock.Do[int](ctx, l, id, longTTL, nil, nil); return err }},
		{"Do(nil locker)", "locker", func() error { _, err := lock.Do(ctx, nil, id, longTTL, fn, nil); return err }},
		{"AcquireMany(nil ctx)", "ctx", func() error { return firstErr(l.AcquireMany(nilCtx, ids, longTTL, nil)) }},
		{"AcquireMany(nil ids)", "ids", func() error { return firstErr(l.AcquireMany(ctx, nil, longTTL, nil)) }},
		{"AcquireMany(no ids)", "ids", func() error { return firstErr(l.AcquireMany(ctx, []string{}, longTTL, nil)) }},
		{"AcquireMany(an empty id)", "ids[1]", func() error { return firstErr(l.AcquireMany(ctx, []string{ids[0], ""}, longTTL, nil)) }},
		{"AcquireMany(a duplicate id)", "ids[2]", func() error {
			return firstErr(l.AcquireMany(ctx, []string{ids[0], ids[1], ids[0]}, longTTL, nil))
		}},
		{"AcquireMany(a duplicate id) names the first position", "ids[0]", func() error {
			return firstErr(l.AcquireMany(ctx, []string{ids[0], ids[1], ids[0]}, longTTL, nil))
		}},
		{"AcquireMany(ttl 0)", "ttl", func() error { return firstErr(l.AcquireMany(ctx, ids, 0, nil)) }},
	}
	if res > time.Nanosecond {
		below := res - time.Nanosecond
		calls = append(calls,
			badCall{"Acquire(ttl below the backend's resolution)", "ttl", func() error { _, err := l.Acquire(ctx, id, below, nil); return err }},
			badCall{"AcquireMany(ttl below the backend's resolution)", "ttl", func() error { return firstErr(l.AcquireMany(ctx, ids, below, nil)) }},
		)
	}
	e.checkBad(s, lock.ErrInvalidArgument, calls)

	// A lease's methods.
	le := e.mustAcquire(l, e.id(), longTTL)
	lcalls := []badCall{
		{"Lease.Release(nil ctx)", "ctx", func() error { return le.Release(nilCtx) }},
		{"Lease.Extend(nil ctx)", "ctx", func() error { return le.Extend(nilCtx, longTTL) }},
		{"Lease.Extend(ttl 0)", "ttl", func() error { return le.Extend(ctx, 0) }},
	}
	if res > time.Nanosecond {
		lcalls = append(lcalls, badCall{"Lease.Extend(ttl below the backend's resolution)", "ttl", func() error { return le.Extend(ctx, res-time.Nanosecond) }})
	}
	e.checkBad(s, lock.ErrInvalidArgument, lcalls)
	e.assertHeld(other, le.ID(), "after a lease's methods failed on bad input")
	e.mustRelease(le)

	// Nothing is held or queued.
	for _, id := range append([]string{id}, ids...) {
		e.assertFree(other, id, "after calls with bad input")
	}

	// Every call after Close.
	lc, sc := e.defaultLocker()
	if err := lc.Close(); err != nil {
		e.errorf("Close: %v", err)
	}
	e.checkBad(sc, lock.ErrClosed, []badCall{
		{"Acquire after Close", "", func() error { _, err := lc.Acquire(ctx, id, longTTL, nil); return err }},
		{"TryAcquire after Close", "", func() error { _, err := lc.TryAcquire(ctx, id, longTTL); return err }},
		{"Acquire after Close", "", func() error {
			_, err := lc.Acquire(ctx, id, longTTL, &lock.AcquireOptions{Token: "closed-" + nonce})
			return err
		}},
		{"AcquireMany after Close", "", func() error { return firstErr(lc.AcquireMany(ctx, ids, longTTL, nil)) }},
		{"Do after Close", "", func() error { _, err := lock.Do(ctx, lc, id, longTTL, fn, nil); return err }},
	})
	for _, id := range append([]string{id}, ids...) {
		e.assertFree(other, id, "after calls on a closed Locker")
	}
}

// acquire-many: snapshots are never empty, every id arrives exactly once,
// ids held by others arrive in later snapshots, duplicates fail before
// I/O, and a queue timeout reports the ids left in the last snapshot.
func acquireMany(e *env) {
	lm, sm := e.defaultLocker()
	h1, _ := e.defaultLocker()
	h2, _ := e.defaultLocker()
	x, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)

	const n = 6
	ids := make([]string, n)
	pos := map[string]int{}
	for i := range ids {
		ids[i] = e.id()
		pos[ids[i]] = i
	}
	holders := []*lock.Lease{e.mustAcquire(h1, ids[1], longTTL), e.mustAcquire(h2, ids[4], longTTL)}
	seen := map[string]int{}
	var all []*lock.Lease
	snapshots := 0
	var firstSnap []string
	for snap, err := range lm.AcquireMany(ctx, ids, longTTL, nil) {
		if err != nil {
			e.fatalf("AcquireMany: %v", err)
		}
		snapshots++
		if len(snap.Acquired) == 0 && len(snap.NotAcquired) == 0 {
			e.errorf("snapshot %d is empty", snapshots)
		}
		if len(snap.NotAcquired) > 0 {
			e.errorf("snapshot %d reports timed-out ids %v with no queue timeout due", snapshots, snap.NotAcquired)
		}
		last := -1
		for _, le := range snap.Acquired {
			p, ok := pos[le.ID()]
			if !ok {
				e.errorf("snapshot %d has a lease on %q, which was not asked for", snapshots, le.ID())
				continue
			}
			if p <= last {
				e.errorf("snapshot %d lists ids[%d] after ids[%d]: leases must come in the order of ids", snapshots, p, last)
			}
			last = p
			seen[le.ID()]++
			all = append(all, le)
			if snapshots == 1 {
				firstSnap = append(firstSnap, le.ID())
			}
		}
		// Let the next held id go.
		if len(holders) > 0 {
			e.mustRelease(holders[0])
			holders = holders[1:]
		}
	}
	for i, id := range ids {
		if seen[id] != 1 {
			e.errorf("ids[%d] arrived %d times over %d snapshots, want exactly once", i, seen[id], snapshots)
		}
	}
	for _, i := range []int{1, 4} {
		for _, id := range firstSnap {
			if id == ids[i] {
				e.errorf("ids[%d], held by another client, arrived in the first snapshot", i)
			}
		}
	}
	if snapshots < 3 {
		e.errorf("%d snapshots, want at least 3 (the free ids, then each held id after its release)", snapshots)
	}
	for _, le := range all {
		e.mustRelease(le)
	}

	// Duplicates fail before any I/O.
	before := sm.callCount()
	err := firstErr(lm.AcquireMany(ctx, []string{ids[0], ids[1], ids[0]}, longTTL, nil))
	if !errors.Is(err, lock.ErrInvalidArgument) {
		e.errorf("AcquireMany with a duplicate id: %v, want an error matching ErrInvalidArgument", err)
	}
	if d := sm.callCount() - before; d != 0 {
		e.errorf("AcquireMany with a duplicate id made %d backend calls, want 0", d)
	}

	// A queue timeout: the held id is reported in the last snapshot.
	const qt = 300 * time.Millisecond
	lq, _ := e.locker(lock.Options{QueueTimeout: qt})
	free, busy := e.id(), e.id()
	held := e.mustAcquire(h1, busy, longTTL)
	start := time.Now()
	var got []string
	var timedOut []string
	snapshots = 0
	for snap, err := range lq.AcquireMany(ctx, []string{free, busy}, longTTL, nil) {
		if err != nil {
			e.fatalf("AcquireMany with a queue timeout: %v", err)
		}
		snapshots++
		if len(timedOut) > 0 {
			e.errorf("a snapshot came after the one that reported timed-out ids")
		}
		if len(snap.Acquired) == 0 && len(snap.NotAcquired) == 0 {
			e.errorf("snapshot %d is empty", snapshots)
		}
		for _, le := range snap.Acquired {
			got = append(got, le.ID())
			e.mustRelease(le)
		}
		timedOut = append(timedOut, snap.NotAcquired...)
	}
	took := time.Since(start)
	if len(got) != 1 || got[0] != free || len(timedOut) != 1 || timedOut[0] != busy {
		e.errorf("AcquireMany([free, held]) with QueueTimeout %v: acquired %q, timed out %q; want [free] and [held]", qt, got, timedOut)
	}
	if took < qt || took > qt+prompt {
		e.errorf("AcquireMany with QueueTimeout %v ended after %v", qt, took)
	}
	e.mustRelease(held)
	e.assertFree(x, busy, "after AcquireMany timed out on it")
}

// do: Do returns fn's result, releases on error and panic, extends while
// fn runs past the ttl, and returns ErrNotAcquired on a queue timeout.
func doProp(e *env) {
	l, _ := e.defaultLocker()
	other, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)

	id := e.id()
	v, err := lock.Do(ctx, l, id, longTTL, func(context.Context, *lock.Lease) (string, error) { return "done", nil }, nil)
	if v != "done" || err != nil {
		e.errorf("Do with a succeeding fn: (%q, %v), want (\"done\", nil)", v, err)
	}
	e.assertFree(other, id, "after Do returned")

	// fn fails.
	fnErr := errors.New("conformance: fn failed")
	id = e.id()
	_, err = lock.Do(ctx, l, id, longTTL, func(context.Context, *lock.Lease) (string, error) { return "", fnErr }, nil)
	if !errors.Is(err, fnErr) {
		e.errorf("Do with a failing fn: %v, want fn's error", err)
	}
	e.assertFree(other, id, "after Do's fn failed")

	// fn panics.
	type boom struct{}
	id = e.id()
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_, _ = lock.Do(ctx, l, id, longTTL, func(context.Context, *lock.Lease) (int, error) { panic(boom{}) }, nil)
	}()
	if _, ok := recovered.(boom); !ok {
		e.errorf("Do with a panicking fn: recovered %v, want fn's panic re-raised", recovered)
	}
	e.assertFree(other, id, "after Do's fn panicked")

	// fn runs for three ttls: the lease is extended, nobody else gets in.
	// Do extends every ttl/3, so the lease survives an extend loop stalled
	// for up to about 400 ms (seen: 300 ms under -race on a loaded 2-core
	// machine).
	const ttl = 600 * time.Millisecond
	id = e.id()
	var wins []uint64
	var fnErrSeen error
	_, err = lock.Do(ctx, l, id, ttl, func(fctx context.Context, _ *lock.Lease) (int, error) {
		nc := e.startNewcomer(other, id)
		t := time.NewTimer(3 * ttl)
		defer t.Stop()
		select {
		case <-t.C:
		case <-fctx.Done():
			fnErrSeen = context.Cause(fctx)
		}
		wins = nc.halt()
		return 0, nil
	}, nil)
	if err != nil || fnErrSeen != nil {
		e.errorf("Do with fn running 3x the ttl (%v): Do returned %v, fn's ctx ended with %v; want the lease extended", ttl, err, fnErrSeen)
	}
	if len(wins) > 0 {
		e.errorf("while Do's fn ran 3x the ttl, another client acquired the id %d times (first fences %v): the lease was not extended", len(wins), wins[:min(len(wins), 3)])
	}
	e.assertFree(other, id, "after Do returned")

	// A queue timeout.
	lq, _ := e.locker(lock.Options{QueueTimeout: 200 * time.Millisecond})
	id = e.id()
	held := e.mustAcquire(other, id, longTTL)
	called := false
	n, err := lock.Do(ctx, lq, id, longTTL, func(context.Context, *lock.Lease) (int, error) { called = true; return 7, nil }, nil)
	if n != 0 || !errors.Is(err, lock.ErrNotAcquired) || called {
		e.errorf("Do on a held id with a queue timeout: (%d, %v), fn called=%v; want (0, ErrNotAcquired) and fn not called", n, err, called)
	}
	e.mustRelease(held)
}

// close: Close ends a queued Acquire, AcquireMany and Do promptly with
// ErrClosed, they leave the queue, and Close twice is fine.
func closeProp(e *env) {
	la, _ := e.defaultLocker()
	lx, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)
	id := e.id()
	held := e.mustAcquire(la, id, longTTL)

	// A queued Acquire.
	lb, sb := e.defaultLocker()
	p := e.queuedAsync(ctx, lb, sb, id, longTTL)

	// A queued AcquireMany, past its first snapshot.
	lm, sm := e.defaultLocker()
	free := e.id()
	manyErr := make(chan error, 1)
	e.goFn(func() {
		var last error
		for snap, err := range lm.AcquireMany(ctx, []string{free, id}, longTTL, nil) {
			for _, le := range snap.Acquired {
				_ = le.Release(ctx)
			}
			last = err
		}
		manyErr <- last
	})
	e.waitFor(prompt, "AcquireMany queued", func() bool { return sm.queued(id) })

	// A queued Do.
	ld, sd := e.defaultLocker()
	doErr := make(chan error, 1)
	e.goFn(func() {
		_, err := lock.Do(ctx, ld, id, longTTL, func(context.Context, *lock.Lease) (int, error) { return 0, nil }, nil)
		doErr <- err
	})
	e.waitFor(prompt, "Do queued", func() bool { return sd.queued(id) })

	for _, c := range []struct {
		name string
		l    *lock.Locker
		err  func() error
	}{
		{"Acquire", lb, func() error { _, err := p.wait(e, prompt, "a queued Acquire after Close"); return err }},
		{"AcquireMany", lm, func() error { return <-manyErr }},
		{"Do", ld, func() error { return <-doErr }},
	} {
		closed := make(chan error, 1)
		start := time.Now()
		e.goFn(func() { closed <- c.l.Close() })
		var first error
		select {
		case first = <-closed:
		case <-time.After(prompt):
			e.fatalf("Close of a Locker with a queued %s did not return within %v", c.name, prompt)
		}
		if err := c.err(); !errors.Is(err, lock.ErrClosed) {
			e.errorf("a queued %s when its Locker was closed: %v, want an error matching ErrClosed", c.name, err)
		}
		if took := time.Since(start); took > prompt {
			e.errorf("Close with a queued %s took %v", c.name, took)
		}
		if again := c.l.Close(); again != nil && again != first {
			e.errorf("Close twice: %v then %v, want nil or the same error again", first, again)
		}
	}
	e.mustRelease(held)
	e.assertFree(lx, id, "after the Lockers of three queued calls were closed (they must leave the queue)")
	e.assertFree(lx, free, "after AcquireMany was closed")

	// A backend's own Close: twice is harmless, and every step after it
	// fails with ErrClosed.
	raw := e.backend()
	if err := raw.Close(); err != nil {
		e.errorf("backend Close: %v", err)
	}
	if err := raw.Close(); err != nil && !errors.Is(err, backend.ErrClosed) {
		e.errorf("backend Close twice: %v, want nil or ErrClosed", err)
	}
	_, aerr := raw.Acquire(ctx, backend.AcquireRequest{ID: e.id(), Token: e.token("closed"), TTL: longTTL})
	_, serr := raw.Subscribe(ctx, e.id(), func(backend.Wake) {})
	for what, err := range map[string]error{"Acquire": aerr, "Release": raw.Release(ctx, id, "closed"), "Subscribe": serr} {
		if !errors.Is(err, backend.ErrClosed) {
			e.errorf("backend %s after Close: %v, want ErrClosed", what, err)
		}
	}
}
