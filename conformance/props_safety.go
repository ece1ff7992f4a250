package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
)

// S1. Many processes take one id over and over, with waits and tries; a
// real-time detector counts who is inside, and the fences seen at entry
// must strictly increase.
func mutualExclusion(e *env) {
	const (
		lockers    = 8
		perLocker  = 2  // goroutines per Locker: same-process waiters too
		perRoutine = 13 // 8*2*13 = 208 grants
	)
	id := e.id()
	ctx, stop := context.WithCancel(e.ctx(2 * time.Minute))
	defer stop()

	type interval struct {
		fence       uint64
		enter, exit time.Time
	}
	var (
		failures  atomic.Int32 // the workers stop after the first; five are reported
		inside    atomic.Int32
		mu        sync.Mutex
		lastFence uint64
		intervals []interval
		done      sync.WaitGroup
	)
	for i := 0; i < lockers; i++ {
		l, _ := e.defaultLocker()
		for g := 0; g < perLocker; g++ {
			done.Add(1)
			e.goFn(func() {
				defer done.Done()
				fail := func(format string, args ...any) {
					if ctx.Err() != nil {
						return // stopped after another worker's failure
					}
					if failures.Add(1) <= 5 {
						e.errorf(format, args...)
					}
					stop()
				}
				for n := 0; n < perRoutine && failures.Load() == 0; n++ {
					var le *lock.Lease
					if (i+g+n)%3 == 0 {
						res, err := l.TryAcquire(ctx, id, longTTL)
						if err != nil {
							fail("TryAcquire: %v", err)
							return
						}
						le = res.Lease
					}
					if le == nil {
						res, err := l.Acquire(ctx, id, longTTL, nil)
						if err != nil || !res.Acquired {
							fail("Acquire: Acquired=%v err=%v, want a lease", res.Acquired, err)
							return
						}
						le = res.Lease
					}
					enter := time.Now()
					if c := inside.Add(1); c != 1 {
						fail("%d holders inside at once (entering with fence %d)", c, le.Fence())
					}
					mu.Lock()
					if f := le.Fence(); f <= lastFence {
						fail("fence %d granted after fence %d: fences must strictly increase in grant order", f, lastFence)
					} else {
						lastFence = f
					}
					mu.Unlock()
					runtime.Gosched()
					exit := time.Now()
					mu.Lock()
					intervals = append(intervals, interval{le.Fence(), enter, exit})
					mu.Unlock()
					inside.Add(-1)
					if err := le.Release(ctx); err != nil {
						fail("Release (fence %d): %v", le.Fence(), err)
						return
					}
				}
			})
		}
	}
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		if failures.Load() == 0 {
			e.fatalf("the %d acquisitions did not finish within the scenario's deadline", lockers*perLocker*perRoutine)
		}
	}
	if failures.Load() > 5 {
		e.t.Logf("%d more violations not reported", failures.Load()-5)
	}
	if failures.Load() > 0 {
		return
	}
	if want := lockers * perLocker * perRoutine; len(intervals) != want {
		e.errorf("%d grants recorded, want %d", len(intervals), want)
	}
	sort.Slice(intervals, func(i, j int) bool { return intervals[i].enter.Before(intervals[j].enter) })
	for i := 1; i < len(intervals); i++ {
		a, b := intervals[i-1], intervals[i]
		if b.enter.Before(a.exit) {
			e.errorf("grant intervals overlap: fence %d held [%v, %v], fence %d entered at %v",
				a.fence, a.enter.Format(time.StampMicro), a.exit.Format(time.StampMicro), b.fence, b.enter.Format(time.StampMicro))
		}
	}
}

// S2. A lease with a short TTL and no extend: another client polling with
// TryAcquire must not be granted before the first lease's ValidUntil, and
// ValidUntil is at most the return of the call plus ttl. Then the same for
// an extended lease.
func conservativeValidity(e *env) {
	const ttl = 150 * time.Millisecond
	la, _ := e.defaultLocker()
	lb, _ := e.defaultLocker()
	for _, extend := range []bool{false, true} {
		id := e.id()
		sent := time.Now()
		le := e.mustAcquire(la, id, ttl)
		returned := time.Now()
		what := "Acquire"
		if extend {
			sent = time.Now()
			if err := le.Extend(e.ctx(prompt), ttl); err != nil {
				e.fatalf("Extend: %v", err)
			}
			returned = time.Now()
			what = "Extend"
		}
		vu := le.ValidUntil()
		if vu.After(returned.Add(ttl)) {
			e.errorf("after %s(ttl %v): ValidUntil is %v after the call returned, more than the ttl",
				what, ttl, vu.Sub(returned))
		}
		if vu.Before(sent) {
			e.errorf("after %s(ttl %v): ValidUntil is before the call was made", what, ttl)
		}
		e.notTakenBefore(lb, id, vu, ttl, what)
	}
}

// notTakenBefore checks S2 for a lease of id for ttl, valid until vu, got
// by what: another client (lb) polling with TryAcquire takes the id only
// once the lease has ended, never before vu.
func (e *env) notTakenBefore(lb *lock.Locker, id string, vu time.Time, ttl time.Duration, what string) {
	e.t.Helper()
	var first *lock.Lease
	var firstAt time.Time
	ok := eventually(e.t, ttl+prompt, func() bool {
		got, err := e.tryAcquire(lb, id, longTTL)
		if err != nil {
			e.errorf("TryAcquire by another client: %v", err)
			return true
		}
		if got != nil {
			first, firstAt = got, time.Now()
			return true
		}
		return false
	})
	if !ok {
		e.errorf("after %s(ttl %v) and no extend, another client could not take the id within %v", what, ttl, ttl+prompt)
		return
	}
	if first == nil {
		return
	}
	if firstAt.Before(vu) {
		e.errorf("after %s(ttl %v), another client was granted the id (and its call had returned) %v before the first lease's ValidUntil",
			what, ttl, vu.Sub(firstAt))
	}
	e.mustRelease(first)
}

// S3. Fences strictly increase across successive holders of an id (after
// release, after a queue hand-off, after expiry); Extend keeps the fence;
// a retried Acquire with the same token returns the same fence.
func fencing(e *env) {
	la, _ := e.defaultLocker()
	lb, _ := e.defaultLocker()
	lc, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)
	id := e.id()

	var fences []uint64
	check := func(how string, le *lock.Lease) {
		e.t.Helper()
		f := le.Fence()
		if n := len(fences); n > 0 && f <= fences[n-1] {
			e.errorf("%s: fence %d after fence %d: fences must strictly increase per id (all so far: %v)", how, f, fences[n-1], fences)
		}
		fences = append(fences, f)
	}

	// Successive holders, release in between.
	for _, l := range []*lock.Locker{la, lb, lc, la, la} {
		le := e.mustAcquire(l, id, longTTL)
		check("successive holders", le)
		e.mustRelease(le)
	}

	// A hand-off through the queue.
	held := e.mustAcquire(la, id, longTTL)
	check("holder before a hand-off", held)
	lb2, sb := e.defaultLocker()
	p := e.acquireAsync(ctx, lb2, id, longTTL)
	e.waitFor(prompt, "the second client queued", func() bool { return sb.queued(id) })
	e.mustRelease(held)
	next := p.granted(e, prompt, "the queued client after the release")
	check("after a hand-off through the queue", next)

	// Extend keeps the fence, and a retry with the same token returns it.
	if err := next.Extend(ctx, longTTL); err != nil {
		e.fatalf("Extend: %v", err)
	}
	if next.Fence() != fences[len(fences)-1] {
		e.errorf("Extend changed the lease's fence from %d to %d", fences[len(fences)-1], next.Fence())
	}
	for _, l := range []*lock.Locker{lb2, lc} {
		res, err := l.Acquire(ctx, id, longTTL, &lock.AcquireOptions{Token: next.Token()})
		if err != nil || !res.Acquired || res.Lease == nil {
			e.errorf("a retried Acquire with the holder's token: Acquired=%v err=%v, want the existing lease", res.Acquired, err)
			continue
		}
		if res.Lease.Fence() != next.Fence() {
			e.errorf("a retried Acquire with the holder's token (after an Extend) returned fence %d, want the same fence %d",
				res.Lease.Fence(), next.Fence())
		}
	}
	e.mustRelease(next)

	// A retried Acquire on a free id, twice in a row.
	tok := "fencing-retry-" + nonce
	r1, err1 := la.Acquire(ctx, id, longTTL, &lock.AcquireOptions{Token: tok})
	r2, err2 := la.Acquire(ctx, id, longTTL, &lock.AcquireOptions{Token: tok})
	if err1 != nil || err2 != nil || !r1.Acquired || !r2.Acquired {
		e.fatalf("Acquire the same token twice: (%v, %v) and (%v, %v), want two grants", r1.Acquired, err1, r2.Acquired, err2)
	}
	check("after release", r1.Lease)
	if r2.Lease.Fence() != r1.Lease.Fence() {
		e.errorf("a retried Acquire with the same token returned fence %d, want %d", r2.Lease.Fence(), r1.Lease.Fence())
	}
	e.mustRelease(r1.Lease)

	// After an expiry, the next holder's fence is higher.
	const ttl = 200 * time.Millisecond
	short := e.mustAcquire(la, id, ttl)
	check("after release", short)
	how := e.expire(short, ttl)
	after := e.takeOver(lb, id, ttl, how)
	check("after the previous lease "+how, after)
	e.mustRelease(after)
}

// takeOver tries l on id until it is granted, after a lease of ttl that
// ended as how says (e.expire), and returns the new lease; it fails the
// subtest after ttl plus prompt.
func (e *env) takeOver(l *lock.Locker, id string, ttl time.Duration, how string) *lock.Lease {
	e.t.Helper()
	var le *lock.Lease
	if !eventually(e.t, ttl+prompt, func() bool {
		le, _ = e.tryAcquire(l, id, longTTL)
		return le != nil
	}) {
		e.fatalf("the lease %s, but another client could not take the id", how)
	}
	return le
}

// S4. Release and Extend are compare-and-set on the owner token.
func ownerOnly(e *env) {
	la, _ := e.defaultLocker()
	lb, _ := e.defaultLocker()
	lc, _ := e.defaultLocker()
	raw := e.backend()
	ctx := e.ctx(time.Minute)
	const ttl = 200 * time.Millisecond

	// A non-owner's steps change nothing.
	id := e.id()
	le := e.mustAcquire(la, id, longTTL)
	if err := raw.Release(ctx, id, "not-the-owner-"+nonce); !errors.Is(err, backend.ErrNotHeld) {
		e.errorf("backend Release by a non-owner token: %v, want ErrNotHeld", err)
	}
	if err := raw.Extend(ctx, id, "not-the-owner-"+nonce, longTTL); !errors.Is(err, backend.ErrNotHeld) {
		e.errorf("backend Extend by a non-owner token: %v, want ErrNotHeld", err)
	}
	e.assertHeld(lc, id, "after a non-owner's Release and Extend")
	if err := le.Extend(ctx, longTTL); err != nil {
		e.errorf("the owner's Extend after a non-owner's Release: %v, want nil", err)
	}
	e.mustRelease(le)

	// Taken over after expiry: the old owner's Release, then Extend, fail
	// and change nothing.
	for _, op := range []string{"Release", "Extend"} {
		id := e.id()
		old := e.mustAcquire(la, id, ttl)
		how := e.expire(old, ttl)
		cur := e.takeOver(lb, id, ttl, how)
		var err error
		if op == "Release" {
			err = old.Release(ctx)
		} else {
			err = old.Extend(ctx, longTTL)
		}
		if !errors.Is(err, lock.ErrNotHeld) {
			e.errorf("%s of a lease that %s and was taken over: %v, want an error matching ErrNotHeld", op, how, err)
		}
		e.assertHeld(lc, id, fmt.Sprintf("after the old owner's %s", op))
		if err := cur.Release(ctx); err != nil {
			e.errorf("the new owner's Release after the old owner's %s: %v, want nil (its lock must be untouched)", op, err)
		}
	}

	// Extend after expiry does not re-create the lock.
	id = e.id()
	old := e.mustAcquire(la, id, ttl)
	how := e.expire(old, ttl)
	if err := old.Extend(ctx, longTTL); !errors.Is(err, lock.ErrNotHeld) {
		e.errorf("Extend of a lease that %s: %v, want an error matching ErrNotHeld", how, err)
	}
	select {
	case <-old.Lost():
	default:
		e.errorf("Extend found the lease not held, but Lost() is not closed")
	}
	e.assertFree(lb, id, "after Extend of an expired lease (Extend must never re-create it)")

	// Release is idempotent.
	id = e.id()
	le = e.mustAcquire(la, id, longTTL)
	err1 := le.Release(ctx)
	err2 := le.Release(ctx)
	if err1 != nil || err2 != nil {
		e.errorf("Release twice: %v, %v; want nil, nil", err1, err2)
	}
	if err := le.Extend(ctx, longTTL); !errors.Is(err, lock.ErrNotHeld) {
		e.errorf("Extend after Release: %v, want an error matching ErrNotHeld", err)
	}
	e.assertFree(lb, id, "after Release twice")
}

// S5. Lost() closes no later than ValidUntil; Do's ctx is cancelled with
// cause ErrLeaseLost when the lease is lost, and Do returns ErrLeaseLost.
func lostLeaseSignalled(e *env) {
	const (
		ttl   = 200 * time.Millisecond
		grace = 200 * time.Millisecond // scheduling slack past ValidUntil
	)
	la, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)

	// An unextended lease: Lost closes by ValidUntil.
	le := e.mustAcquire(la, e.id(), ttl)
	vu := le.ValidUntil()
	timer := time.NewTimer(time.Until(vu.Add(grace)))
	select {
	case <-le.Lost():
		timer.Stop()
	case <-timer.C:
		e.errorf("Lost() was not closed %v after ValidUntil (ttl %v, no extend)", grace, ttl)
	}

	// A lease that the store ended early: Extend finds it, Lost closes.
	if e.canExpireEarly() {
		le := e.mustAcquire(la, e.id(), longTTL)
		lost := le.Lost()
		how := e.expire(le, longTTL)
		if err := le.Extend(ctx, longTTL); !errors.Is(err, lock.ErrNotHeld) {
			e.errorf("Extend of a lease that %s: %v, want ErrNotHeld", how, err)
		}
		select {
		case <-lost:
		default:
			e.errorf("Extend found that the lease %s, but Lost() is not closed", how)
		}
	}

	// Do: the lease is lost while fn runs.
	type variant struct {
		name string
		lose func(l *spy, id string) // called from fn
	}
	variants := []variant{{
		name: "Extend reports ErrNotHeld",
		lose: func(s *spy, id string) { s.loseExtend.Store(true) },
	}, {
		// Nobody says the lease is gone: it is presumed lost at ValidUntil.
		name: "the backend is unreachable, every Extend fails",
		lose: func(s *spy, id string) { s.kill() },
	}}
	if _, ok := e.h.(Expirer); ok {
		variants = append(variants, variant{
			name: "the store expired the lease",
			lose: func(s *spy, id string) { e.h.(Expirer).ExpireNow(e.t, id) },
		})
	}
	for _, v := range variants {
		l, s := e.defaultLocker()
		id := e.id()
		const doTTL = 300 * time.Millisecond
		var cause error
		var lostAfter time.Duration
		_, err := lock.Do(ctx, l, id, doTTL, func(fctx context.Context, _ *lock.Lease) (int, error) {
			start := time.Now()
			v.lose(s, id)
			t := time.NewTimer(doTTL + prompt)
			defer t.Stop()
			select {
			case <-fctx.Done():
				cause, lostAfter = context.Cause(fctx), time.Since(start)
			case <-t.C:
			}
			return 1, nil
		}, nil)
		switch {
		case cause == nil:
			e.errorf("Do (%s): fn's ctx was not cancelled within %v", v.name, doTTL+prompt)
		case !errors.Is(cause, lock.ErrLeaseLost):
			e.errorf("Do (%s): fn's ctx was cancelled with cause %v, want ErrLeaseLost", v.name, cause)
		case lostAfter > doTTL+grace:
			e.errorf("Do (%s): fn's ctx was cancelled %v after the loss, later than the lease's ttl (%v) plus %v",
				v.name, lostAfter, doTTL, grace)
		}
		if !errors.Is(err, lock.ErrLeaseLost) {
			e.errorf("Do (%s): returned %v, want an error matching ErrLeaseLost", v.name, err)
		}
	}
}

// S6. Retries with the same token are no-ops; Leave by token cleans up; a
// step whose reply was lost is cleaned up by the core.
func retrySafe(e *env) {
	b1 := e.backend()
	b2 := e.backend()
	ctx := e.ctx(time.Minute)
	id := e.id()
	tok := func(n int) string { return fmt.Sprintf("retry-%s-%d", nonce, n) }

	req := backend.AcquireRequest{ID: id, Token: tok(1), TTL: longTTL}
	g1, err1 := b1.Acquire(ctx, req)
	g2, err2 := b1.Acquire(ctx, req)
	g3, err3 := b2.Acquire(ctx, req)
	if err1 != nil || !g1.Acquired {
		e.fatalf("backend Acquire of a free id: %+v, %v", g1, err1)
	}
	for i, r := range []struct {
		g   backend.Grant
		err error
	}{{g2, err2}, {g3, err3}} {
		switch {
		case r.err != nil || !r.g.Acquired:
			e.errorf("retry %d of a granted Acquire with the same token: %+v, %v; want Acquired", i+1, r.g, r.err)
		case r.g.Fence != g1.Fence:
			e.errorf("retry %d of a granted Acquire with the same token: fence %d, want the same fence %d", i+1, r.g.Fence, g1.Fence)
		case r.g.TTL <= 0 || r.g.TTL > longTTL:
			e.errorf("retry %d of a granted Acquire: TTL %v, want the remaining TTL in (0, %v]", i+1, r.g.TTL, longTTL)
		}
	}

	wreq := backend.AcquireRequest{ID: id, Token: tok(2), TTL: longTTL, Wait: true, WaiterTTL: longTTL}
	q1, qerr1 := b2.Acquire(ctx, wreq)
	q2, qerr2 := b2.Acquire(ctx, wreq)
	if qerr1 != nil || qerr2 != nil || q1.Acquired || q2.Acquired || !q1.Queued || !q2.Queued {
		e.errorf("Acquire with Wait on a held id, twice: %+v, %v and %+v, %v; want queued twice", q1, qerr1, q2, qerr2)
	} else if q1.Ticket != q2.Ticket {
		e.errorf("a retried enqueue got ticket %d, want its first ticket %d (a retry is a no-op)", q2.Ticket, q1.Ticket)
	}
	for i := 0; i < 2; i++ {
		if err := b2.Leave(ctx, id, tok(2)); err != nil {
			e.errorf("Leave of a queue entry (call %d): %v, want nil (Leave is idempotent)", i+1, err)
		}
	}
	if err := b2.Leave(ctx, id, tok(99)); err != nil {
		e.errorf("Leave of a token that never queued: %v, want nil", err)
	}
	if err := b1.Leave(ctx, id, tok(1)); err != nil {
		e.errorf("Leave by the holder's token: %v, want nil", err)
	}
	g4, err4 := b2.Acquire(ctx, backend.AcquireRequest{ID: id, Token: tok(3), TTL: longTTL})
	if err4 != nil || !g4.Acquired {
		e.errorf("after Leave by the holder's token and by the waiter's, a third token's Acquire: %+v, %v; want Acquired (the grant and the entry must be gone)", g4, err4)
	} else if err := b2.Release(ctx, id, tok(3)); err != nil {
		e.errorf("Release: %v", err)
	}

	// The core: the reply of a granting Acquire is lost.
	l, s := e.defaultLocker()
	other, _ := e.defaultLocker()
	third, _ := e.defaultLocker()
	id = e.id()
	s.loseAcquire.Store(1)
	res, err := l.Acquire(ctx, id, longTTL, nil)
	if !errors.Is(err, lock.ErrBackend) || !errors.Is(err, errLostReply) {
		e.errorf("Acquire whose granting step lost its reply: %v, want an error matching ErrBackend and the backend's error", err)
	}
	if res.Acquired || res.Lease != nil {
		e.errorf("Acquire whose step lost its reply returned Acquired=%v Lease=%v with an error", res.Acquired, res.Lease != nil)
	}
	e.assertFree(other, id, "after an Acquire whose granting step lost its reply (the core must clean up by token)")

	// The core: the reply of an enqueue is lost. Queued, the core retries
	// with the same token (a no-op that keeps its place) and is granted.
	id = e.id()
	held := e.mustAcquire(other, id, longTTL)
	s.loseAcquire.Store(2)
	p := e.acquireAsync(ctx, l, id, longTTL)
	e.waitFor(prompt, "the waiter whose enqueue lost its reply queued again", func() bool {
		return s.loseAcquire.Load() == 0 && s.queued(id)
	})
	e.mustRelease(held)
	e.mustRelease(p.granted(e, prompt, "an Acquire whose enqueue lost its reply (retried with the same token)"))
	e.assertFree(third, id, "after the retried waiter released")

	// The core: a waiter's process loses the backend for longer than
	// WaiterTimeout. Its Acquire ends with ErrBackend, and its entry is
	// purged, so the queue moves on.
	id = e.id()
	held = e.mustAcquire(other, id, longTTL)
	l2, s2 := e.defaultLocker()
	// A lease of WaiterTimeout: a backend that hands off may grant the
	// release to the dead waiter while its entry lives; that costs its TTL.
	p = e.queuedAsync(ctx, l2, s2, id, waiterTimeout)
	s2.kill()
	res, err = p.wait(e, waiterTimeout+prompt, "a waiter whose backend stays down")
	if !errors.Is(err, lock.ErrBackend) || res.Acquired {
		e.errorf("Acquire whose backend stayed down past WaiterTimeout: Acquired=%v err=%v, want an error matching ErrBackend", res.Acquired, err)
	}
	e.mustRelease(held)
	if !eventually(e.t, waiterTimeout+prompt, func() bool {
		le, err := e.tryAcquire(third, id, longTTL)
		if err == nil && le != nil {
			e.mustRelease(le)
			return true
		}
		return false
	}) {
		e.errorf("the entry of a waiter whose backend stayed down was never purged: the id stays blocked")
	}
}

// S7. Breaking out of AcquireMany, or an error ending it, leaves no lease
// held and no queue entry that the caller was not shown.
func acquireManyNoUnseen(e *env) {
	for _, how := range []string{"break", "cancel"} {
		lm, _ := e.defaultLocker()
		h1, _ := e.defaultLocker()
		h2, _ := e.defaultLocker()
		x, _ := e.defaultLocker()
		ids := make([]string, 6)
		for i := range ids {
			ids[i] = e.id()
		}
		heldB := e.mustAcquire(h1, ids[1], longTTL)
		heldD := e.mustAcquire(h2, ids[4], longTTL)

		shown := map[string]*lock.Lease{}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		snapshots := 0
		for snap, err := range lm.AcquireMany(ctx, ids, longTTL, nil) {
			if err != nil {
				if how == "cancel" && snapshots > 0 && errors.Is(err, context.Canceled) {
					break
				}
				cancel()
				e.fatalf("AcquireMany (%s): %v", how, err)
			}
			snapshots++
			for _, le := range snap.Acquired {
				shown[le.ID()] = le
			}
			if snapshots > 1 {
				continue // only after a cancel
			}
			// One holder releases while the caller still looks at the
			// first snapshot: a backend that hands the lock to the head
			// on release grants it to a call that is about to end.
			e.mustRelease(heldB)
			if how == "break" {
				break
			}
			cancel()
		}
		cancel()
		e.mustRelease(heldD)
		for _, id := range ids {
			if le := shown[id]; le != nil {
				e.mustRelease(le)
				continue
			}
			e.assertFree(x, id, fmt.Sprintf("an id that AcquireMany did not show before the loop ended (%s)", how))
		}
	}
}
