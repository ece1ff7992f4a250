package conformance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
)

// inspectContract is the contract sentence of the inspect property.
const inspectContract = "inspect: Inspect reports the holder (fence, TTL, token fingerprint) and the live waiters in ticket order, bounded, and changes nothing"

// inspectProp: on a backend that is a backend.Inspector, Locker.Inspect
// and the backend's Inspect report a free id as free; a held id with the
// holder's fence, a TTL within the lease and the fingerprint of its token
// (never the token); the live waiters, head first, with increasing tickets,
// fingerprints and deadlines within WaiterTimeout, at most as many as asked
// for; and, after a hand-off, the new holder and the shorter queue.
// Skipped, with the reason, when the backend lacks the capability.
func inspectProp(e *env) {
	raw := e.h.NewBackend(e.t)
	in, ok := raw.(backend.Inspector)
	if !ok {
		_ = raw.Close()
		e.skipf("%T does not implement backend.Inspector (an optional capability)", raw)
	}
	il, err := lock.New(raw, &lock.Options{WaiterTimeout: waiterTimeout, Logger: slog.New(slog.NewTextHandler(e.logw, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		e.fatalf("lock.New: %v", err)
	}
	e.t.Cleanup(func() { _ = il.Close() })
	ctx := e.ctx(time.Minute)
	id := e.id()
	inspect := func(what string) backend.Inspection {
		e.t.Helper()
		got, err := il.Inspect(ctx, id)
		if err != nil {
			e.fatalf("%s: Inspect: %v", what, err)
		}
		if got.ID != id {
			e.errorf("%s: Inspection.ID %q, want %q", what, got.ID, id)
		}
		return got
	}

	if got := inspect("a free id"); got.Held || got.QueueLen != 0 || len(got.Waiters) != 0 {
		e.errorf("a free id: %+v, want not held and no waiters", got)
	}
	for _, bad := range []string{"", string(make([]byte, backend.MaxIDLength+1))} {
		if _, err := il.Inspect(ctx, bad); !errors.Is(err, lock.ErrInvalidArgument) {
			e.errorf("Inspect(id of %d bytes): %v, want ErrInvalidArgument", len(bad), err)
		}
	}

	holder, _ := e.defaultLocker()
	le := e.mustAcquire(holder, id, longTTL)
	got := inspect("a held id")
	switch {
	case !got.Held || got.Fence != le.Fence():
		e.errorf("a held id: Held=%v Fence=%d, want held with the holder's fence %d", got.Held, got.Fence, le.Fence())
	case got.TTL <= 0 || got.TTL > longTTL:
		e.errorf("a held id: TTL %v, want in (0, %v]", got.TTL, longTTL)
	case got.Holder != backend.Fingerprint(le.Token()) || len(got.Holder) != 8:
		e.errorf("a held id: Holder %q, want the fingerprint %q of the holder's token", got.Holder, backend.Fingerprint(le.Token()))
	}

	// Three waiters in three processes, queued one after the other.
	type result struct {
		res lock.Result
		err error
	}
	start := time.Now()
	var tokens []string
	var cancels []context.CancelFunc
	results := make([]chan result, 3)
	var wg sync.WaitGroup
	e.t.Cleanup(func() {
		for _, c := range cancels {
			c()
		}
		wg.Wait()
	})
	for i := range results {
		w, _ := e.defaultLocker()
		tok := fmt.Sprintf("inspect-waiter-%d", i)
		tokens = append(tokens, tok)
		wctx, cancel := context.WithCancel(ctx)
		cancels = append(cancels, cancel)
		results[i] = make(chan result, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := w.Acquire(wctx, id, longTTL, &lock.AcquireOptions{Token: tok})
			results[i] <- result{res, err}
		}()
		if !pollInspect(prompt, func() bool { return inspect("queueing").QueueLen == i+1 }) {
			e.fatalf("waiter %d: QueueLen did not reach %d within %v: %+v", i, i+1, prompt, inspect("queueing"))
		}
	}
	got = inspect("three waiters")
	if got.QueueLen != 3 || len(got.Waiters) != 3 {
		e.fatalf("three waiters: QueueLen %d, %d listed; want 3 and 3", got.QueueLen, len(got.Waiters))
	}
	for i, w := range got.Waiters {
		if w.Token != backend.Fingerprint(tokens[i]) {
			e.errorf("waiter %d: fingerprint %q, want %q (head first, in queue order)", i, w.Token, backend.Fingerprint(tokens[i]))
		}
		if i > 0 && w.Ticket <= got.Waiters[i-1].Ticket {
			e.errorf("waiter %d: ticket %d not above the one before (%d)", i, w.Ticket, got.Waiters[i-1].Ticket)
		}
		if w.Deadline <= 0 || w.Deadline > waiterTimeout+10*time.Millisecond {
			e.errorf("waiter %d: deadline in %v, want in (0, WaiterTimeout %v]", i, w.Deadline, waiterTimeout)
		}
		if w.QueuedFor < 0 || w.QueuedFor > time.Since(start)+slack {
			e.errorf("waiter %d: QueuedFor %v, want 0 (unknown) or at most %v", i, w.QueuedFor, time.Since(start)+slack)
		}
	}
	for _, n := range []int{2, 0} {
		b, err := in.Inspect(ctx, id, n)
		if err != nil || b.QueueLen != 3 || len(b.Waiters) != n || (n > 0 && b.Waiters[0].Token != backend.Fingerprint(tokens[0])) {
			e.errorf("backend Inspect(maxWaiters %d): QueueLen %d, %d listed, %v; want 3 and the first %d", n, b.QueueLen, len(b.Waiters), err, n)
		}
	}
	if again := inspect("inspected again"); again.Fence != le.Fence() || again.QueueLen != 3 || again.Holder != got.Holder {
		e.errorf("inspecting changed the state: %+v after %+v", again, got)
	}

	// Hand-off to the head.
	e.mustRelease(le)
	var first result
	select {
	case first = <-results[0]:
	case <-time.After(prompt + slack):
		e.fatalf("the head was not granted within %v of the release", prompt+slack)
	}
	if first.err != nil || !first.res.Acquired {
		e.fatalf("the head after the release: %+v, %v; want a lease", first.res, first.err)
	}
	got = inspect("after the hand-off")
	switch {
	case !got.Held || got.Fence != first.res.Lease.Fence() || got.Fence <= le.Fence():
		e.errorf("after the hand-off: Held=%v Fence=%d, want the new holder's fence %d (> %d)", got.Held, got.Fence, first.res.Lease.Fence(), le.Fence())
	case got.Holder != backend.Fingerprint(tokens[0]):
		e.errorf("after the hand-off: Holder %q, want the head's fingerprint %q", got.Holder, backend.Fingerprint(tokens[0]))
	case got.QueueLen != 2 || len(got.Waiters) != 2 || got.Waiters[0].Token != backend.Fingerprint(tokens[1]):
		e.errorf("after the hand-off: QueueLen %d, waiters %+v; want the two others, in order", got.QueueLen, got.Waiters)
	}
	for _, c := range cancels[1:] {
		c()
	}
	wg.Wait()

	// A waiter whose process died stops counting once its deadline passes,
	// although no step purged its entry yet (nobody else heartbeats).
	dead, deadSpy := e.defaultLocker()
	dctx, dcancel := context.WithCancel(ctx)
	cancels = append(cancels, dcancel)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = dead.Acquire(dctx, id, longTTL, &lock.AcquireOptions{Token: "inspect-dead"})
	}()
	if !pollInspect(prompt, func() bool { return inspect("queueing").QueueLen == 1 }) {
		e.fatalf("a waiter alone: QueueLen did not reach 1 within %v", prompt)
	}
	deadSpy.kill()
	if !pollInspect(waiterTimeout+slack, func() bool { return inspect("a dead waiter").QueueLen == 0 }) {
		e.errorf("a waiter dead for WaiterTimeout + %v is still counted: %+v", slack, inspect("a dead waiter"))
	}
	for _, w := range inspect("a dead waiter").Waiters {
		if w.Token == backend.Fingerprint("inspect-dead") {
			e.errorf("a dead waiter is listed: %+v", w)
		}
	}
	e.mustRelease(first.res.Lease)
	if got := inspect("after everyone left"); got.Held || got.QueueLen != 0 {
		e.errorf("after everyone left: %+v, want not held and no waiters", got)
	}
}

// pollInspect checks cond every few milliseconds until it holds or timeout
// passes.
func pollInspect(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// inspect-read-only (backend.Inspector): Inspect tells the truth and
// changes nothing.
//   - The fence it reports is the holder's, also after grants of other ids
//     and an earlier holder of the same id moved the store's counters.
//   - A lease that ended with no step since is not held (and no TTL is
//     negative), and a waiter past its deadline is not counted, although
//     no step has removed either yet.
//   - It writes nothing: what the harness's StateChecker shows is the same
//     before and after, no wake-up is sent, and a second Inspect sees what
//     the first saw (an Inspect that purged the dead head of a free lock,
//     or handed the lock to the next waiter, would show it).
//
// Skipped, with the reason, when the backend lacks the capability.
func inspectReadOnly(e *env) {
	ra, rb, rv := e.backend(), e.backend(), e.backend()
	if !ra.inspects() {
		e.skipf("%T does not implement backend.Inspector (an optional capability)", ra.inner)
	}
	ctx := e.ctx(time.Minute)

	// The holder's fence, not the store's latest.
	id := e.id()
	z, a := e.token("z"), e.token("a")
	e.grant(ra, backend.AcquireRequest{ID: id, Token: z, TTL: longTTL})
	e.mustStep("Release", ra.Release(ctx, id, z))
	ga := e.grant(ra, backend.AcquireRequest{ID: id, Token: a, TTL: longTTL})
	others := []string{e.id(), e.id()}
	for _, other := range others {
		tok := e.token("other")
		if g := e.grant(rb, backend.AcquireRequest{ID: other, Token: tok, TTL: longTTL}); !g.Acquired {
			e.fatalf("Acquire of a free id: %+v", g)
		}
		defer func() { _ = rb.Release(ctx, other, tok) }()
	}
	in, err := ra.Inspect(ctx, id, 10)
	if err != nil || !in.Held || in.Fence != ga.Fence || in.TTL <= 0 || in.TTL > longTTL {
		e.errorf("Inspect of a held id, after grants of other ids: %+v, %v; want held with the holder's fence %d and a TTL in (0, %v]", in, err, ga.Fence, longTTL)
	}
	e.mustStep("Release", ra.Release(ctx, id, a))

	// An ended lease and a dead head, with no step since.
	const ttl = 300 * time.Millisecond
	id = e.id()
	h, d, v := e.token("holder"), e.token("dead"), e.token("live")
	gh := e.grant(ra, backend.AcquireRequest{ID: id, Token: h, TTL: ttl})
	returned := time.Now()
	if !gh.Acquired {
		e.fatalf("Acquire of a free id: %+v", gh)
	}
	if g := e.grant(rb, backend.AcquireRequest{ID: id, Token: d, TTL: longTTL, Wait: true, WaiterTTL: ttl}); !g.Queued {
		e.fatalf("Acquire with Wait on a held id: %+v; want queued", g)
	}
	if g := e.grant(rv, backend.AcquireRequest{ID: id, Token: v, TTL: longTTL, Wait: true, WaiterTTL: longTTL}); !g.Queued {
		e.fatalf("Acquire with Wait on a held id: %+v; want queued", g)
	}
	wakes, _ := e.wakeChan(rv, id)
	e.letPass(returned, ttl+expiryMargin)
	sc, _ := e.h.(StateChecker)
	var before []string
	if sc != nil {
		before = sc.StateLeft(e.t, id)
	}
	var seen []backend.Inspection
	for range 2 {
		in, err := rv.Inspect(ctx, id, 10)
		if err != nil {
			e.fatalf("Inspect: %v", err)
		}
		seen = append(seen, in)
	}
	for i, in := range seen {
		switch {
		case in.Held || in.TTL < 0:
			e.errorf("Inspect %d of an id whose lease ended %v ago, with no step since: Held=%v TTL=%v fence %d; want not held (an ended lease is not held, whether or not a step cleared it; and no negative TTL)",
				i+1, time.Since(returned.Add(ttl)).Round(time.Millisecond), in.Held, in.TTL, in.Fence)
		case in.QueueLen != 1 || len(in.Waiters) != 1 || in.Waiters[0].Token != backend.Fingerprint(v):
			e.errorf("Inspect %d, the head past its deadline, with no step since: QueueLen %d, waiters %+v; want only the live waiter %s (a dead entry is not counted, purged or not)",
				i+1, in.QueueLen, in.Waiters, backend.Fingerprint(v))
		}
	}
	if sc != nil {
		if after := sc.StateLeft(e.t, id); !slices.Equal(before, after) {
			e.errorf("Inspect changed the store: before %v, after %v; it must not purge, expire, hand off or write anything", before, after)
		}
	} else {
		e.skipCase("the harness has no StateChecker: cannot compare the store before and after Inspect")
	}
	if w, ok := awaitWake(wakes, settle, func(backend.Wake) bool { return true }); ok {
		e.errorf("Inspect sent a wake-up: %+v; it must not purge, hand off or wake", w)
	}
	// A step now finds what Inspect saw and must not have changed: the
	// dead head goes, and the live waiter's own step is granted.
	if g := e.grant(rv, backend.AcquireRequest{ID: id, Token: v, TTL: longTTL, Wait: true, WaiterTTL: longTTL}); !g.Acquired {
		e.errorf("the live waiter's Acquire after the lease ended and the head died: %+v; want granted", g)
	} else if g.Fence <= gh.Fence {
		e.errorf("the live waiter's fence %d is not above the ended lease's %d", g.Fence, gh.Fence)
	}
	e.mustStep("Release", rv.Release(ctx, id, v))
}
