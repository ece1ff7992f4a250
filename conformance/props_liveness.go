package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redislocker/lock"
)

// L1. A holds, B waits (with heartbeats too slow to matter and a holder
// TTL too long to matter), A releases: B is woken and acquires at once.
func wakeOnRelease(e *env) {
	la, _ := e.defaultLocker()
	lb, sb := e.locker(lock.Options{WaiterTimeout: time.Minute})
	ctx := e.ctx(time.Minute)
	id := e.id()
	held := e.mustAcquire(la, id, longTTL)
	p := e.queuedAsync(ctx, lb, sb, id, longTTL)
	tok, _ := sb.queuedToken(id)
	e.mustRelease(held)
	res, err := p.wait(e, prompt, "the queued waiter after the holder released (no wake-up?)")
	if err != nil || !res.Acquired {
		e.fatalf("the queued waiter after the release: Acquired=%v err=%v, want a lease", res.Acquired, err)
	}
	if !res.WasInUse {
		e.errorf("a waiter that queued was granted with WasInUse=false")
	}
	if sb.wakesFor(id, tok, true) == 0 {
		e.errorf("the waiter acquired, but no wake-up for it reached its subscription (heartbeats every %v cannot explain it)", time.Minute/3)
	}
	e.mustRelease(res.Lease)
}

// fallbackWT is the WaiterTimeout of the properties that wait for the
// heartbeat (every third of it) to find what no wake-up told.
const fallbackWT = 600 * time.Millisecond

// L1. Without a notification a free lock is still noticed: (a) the
// wake-ups are lost: the heartbeat finds the lock free; (b) the holder's
// lease expires, which publishes nothing: the holder-TTL timer (and, with
// an Expirer, the heartbeat) finds it.
func noLostWakeup(e *env) {
	const wt, hb = fallbackWT, fallbackWT / 3
	la, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)

	// (a) Every wake-up of the waiter is lost.
	{
		lb, sb := e.locker(lock.Options{WaiterTimeout: wt})
		sb.dropWakes.Store(true)
		id := e.id()
		held := e.mustAcquire(la, id, longTTL)
		p := e.queuedAsync(ctx, lb, sb, id, longTTL)
		e.mustRelease(held)
		bound := wt + hb + slack
		le := p.granted(e, bound, fmt.Sprintf("(a) wake-ups lost, lock released: the waiter must acquire within WaiterTimeout %v + a heartbeat", wt))
		e.mustRelease(le)
	}

	// (b1) The holder's lease expires at its TTL: no release, no
	// notification, heartbeats too slow to matter. The TTL leaves the
	// waiter's first step (on a new client: a dial, and on a cluster the
	// slot map) time to queue before it runs out.
	{
		const ttl = time.Second
		lb, sb := e.locker(lock.Options{WaiterTimeout: time.Minute})
		id := e.id()
		held := e.mustAcquire(la, id, ttl)
		p := e.queuedAsync(ctx, lb, sb, id, longTTL)
		bound := time.Until(held.ValidUntil()) + slack
		le := p.granted(e, bound, fmt.Sprintf("(b) the holder's lease (ttl %v) expired without a release: the waiter must acquire within the holder's TTL", ttl))
		e.mustRelease(le)
	}

	// (b2) The store ends the lease early (no notification): the
	// heartbeat finds it.
	if x, ok := e.h.(Expirer); ok {
		lb, sb := e.locker(lock.Options{WaiterTimeout: wt})
		id := e.id()
		e.mustAcquire(la, id, longTTL)
		p := e.queuedAsync(ctx, lb, sb, id, longTTL)
		x.ExpireNow(e.t, id)
		bound := wt + hb + slack
		le := p.granted(e, bound, "(b) the store expired the holder's lease early, with no notification: the waiter must acquire within a few heartbeats")
		e.mustRelease(le)
	} else {
		e.skipCase("no Expirer: skipping the case of a lease the store ends early (heartbeat fallback)")
	}
}

// grantLog records the order in which waiters were granted.
type grantLog struct {
	mu     sync.Mutex
	who    []int
	fences []uint64
}

func (g *grantLog) add(who int, fence uint64) {
	g.mu.Lock()
	g.who = append(g.who, who)
	g.fences = append(g.fences, fence)
	g.mu.Unlock()
}

func (g *grantLog) snapshot() ([]int, []uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.who), slices.Clone(g.fences)
}

// waitAndRelease starts an Acquire of id by l as waiter number who: once
// granted it records the grant in g and releases at once. The returned
// channel is closed when it is done.
func (e *env) waitAndRelease(ctx context.Context, l *lock.Locker, id string, who int, g *grantLog) <-chan struct{} {
	done := make(chan struct{})
	e.goFn(func() {
		defer close(done)
		res, err := l.Acquire(ctx, id, longTTL, nil)
		if err != nil || !res.Acquired {
			e.errorf("waiter W%d: Acquired=%v err=%v, want a lease", who, res.Acquired, err)
			return
		}
		g.add(who, res.Lease.Fence())
		if err := res.Lease.Release(ctx); err != nil {
			e.errorf("waiter W%d: Release: %v", who, err)
		}
	})
	return done
}

// newcomer hammers TryAcquire on id from l until stopped, and records the
// fences of the grants it got (each released at once).
type newcomer struct {
	stop     atomic.Bool
	attempts atomic.Int64
	done     chan struct{}
	mu       sync.Mutex
	wins     []uint64
}

func (e *env) startNewcomer(l *lock.Locker, id string) *newcomer {
	n := &newcomer{done: make(chan struct{})}
	e.goFn(func() {
		defer close(n.done)
		pace := time.NewTicker(time.Millisecond)
		defer pace.Stop()
		for !n.stop.Load() {
			le, err := e.tryAcquire(l, id, longTTL)
			n.attempts.Add(1)
			if err != nil {
				e.errorf("a newcomer's TryAcquire: %v", err)
				return
			}
			if le != nil {
				n.mu.Lock()
				n.wins = append(n.wins, le.Fence())
				n.mu.Unlock()
				_ = le.Release(context.Background())
			}
			<-pace.C
		}
	})
	return n
}

// halt stops the newcomer and returns the fences it won.
func (n *newcomer) halt() []uint64 {
	n.stop.Store(true)
	<-n.done
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.wins)
}

// L2. Waiters queued one after another, each in its own process, are
// granted in queue order; a newcomer's TryAcquire never wins meanwhile.
func fifoOrder(e *env) {
	const n = 5
	la, _ := e.defaultLocker()
	ln, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)
	id := e.id()
	held := e.mustAcquire(la, id, longTTL)
	var g grantLog
	var done []<-chan struct{}
	for i := 1; i <= n; i++ {
		l, s := e.defaultLocker()
		done = append(done, e.waitAndRelease(ctx, l, id, i, &g))
		e.waitFor(prompt, fmt.Sprintf("W%d queued", i), func() bool { return s.queued(id) })
	}
	nc := e.startNewcomer(ln, id)
	e.waitFor(prompt, "the newcomer tried", func() bool { return nc.attempts.Load() > 0 })
	e.mustRelease(held)
	for i, d := range done {
		select {
		case <-d:
		case <-time.After(prompt * 2):
			nc.halt()
			e.fatalf("W%d was not granted within %v of the hand-offs", i+1, prompt*2)
		}
	}
	wins := nc.halt()
	who, fences := g.snapshot()
	if !slices.Equal(who, []int{1, 2, 3, 4, 5}) {
		e.errorf("grant order %v, want the queue order [1 2 3 4 5]", who)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			e.errorf("fences in grant order %v do not strictly increase", fences)
			break
		}
	}
	if len(fences) == n {
		for _, f := range wins {
			if f < fences[n-1] {
				e.errorf("a newcomer's TryAcquire was granted (fence %d) while waiters were queued (their fences %v)", f, fences)
				break
			}
		}
	}
}

// L2. A holds, W is queued, A releases while a newcomer hammers TryAcquire:
// the newcomer never gets the lock before W. In the later rounds W's
// wake-ups are lost, so the lock stays free with W queued until W's next
// heartbeat: a wide window for a TryAcquire that jumps the queue.
func tryAcquireFair(e *env) {
	la, _ := e.defaultLocker()
	lw, sw := e.defaultLocker()
	// Its wake-ups are lost: it finds the free lock by its heartbeat
	// (every 800 ms). A heartbeat late by more than 1.6 s under load would
	// let its entry be purged as dead, and the newcomer win fairly.
	ls, ss := e.locker(lock.Options{WaiterTimeout: 2400 * time.Millisecond})
	ss.dropWakes.Store(true)
	ln, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)
	for round := 1; round <= 5; round++ {
		l, s, how := lw, sw, "woken"
		if round > 3 {
			l, s, how = ls, ss, "with its wake-ups lost"
		}
		id := e.id()
		held := e.mustAcquire(la, id, longTTL)
		p := e.queuedAsync(ctx, l, s, id, longTTL)
		nc := e.startNewcomer(ln, id)
		e.waitFor(prompt, "the newcomer tried", func() bool { return nc.attempts.Load() > 0 })
		e.mustRelease(held)
		res, err := p.wait(e, prompt, "the queued waiter after the release")
		// While W holds, let the newcomer try a few more times.
		from := nc.attempts.Load()
		if err == nil && res.Acquired {
			e.waitFor(prompt, "the newcomer tried again", func() bool { return nc.attempts.Load() >= from+3 })
		}
		wins := nc.halt()
		if err != nil || !res.Acquired {
			e.errorf("round %d: the queued waiter (%s): Acquired=%v err=%v, want a lease (the newcomer won %d times)", round, how, res.Acquired, err, len(wins))
			continue
		}
		if len(wins) > 0 {
			e.errorf("round %d: a TryAcquire was granted %d times (first fences %v) ahead of the queued waiter (%s; fence %d)",
				round, len(wins), wins[:min(len(wins), 3)], how, res.Lease.Fence())
		}
		e.mustRelease(res.Lease)
	}
}

// L3. Two waiters that die (their process stops heartbeating) are ahead
// of a live one; after the release, the live one acquires within
// WaiterTimeout plus two heartbeats, not at the queue timeout.
func deadWaiterPurge(e *env) {
	const wt, hb = fallbackWT, fallbackWT / 3
	la, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)
	id := e.id()
	held := e.mustAcquire(la, id, longTTL)
	opts := lock.Options{WaiterTimeout: wt, QueueTimeout: time.Minute}
	for i := 1; i <= 2; i++ {
		ld, sd := e.locker(opts)
		// A lease of wt: a backend that hands off grants the release to
		// D1, whose entry is still live; that lease then costs wt.
		e.acquireAsync(ctx, ld, id, wt)
		e.waitFor(prompt, fmt.Sprintf("dead waiter D%d queued", i), func() bool { return sd.queued(id) })
		sd.kill()
	}
	ll, sl := e.locker(opts)
	p := e.acquireAsync(ctx, ll, id, longTTL)
	e.waitFor(prompt, "the live waiter queued", func() bool { return sl.queued(id) })
	released := time.Now()
	e.mustRelease(held)
	bound := wt + 2*hb + slack
	res, err := p.wait(e, bound, fmt.Sprintf("the live waiter behind two dead ones (bound WaiterTimeout %v + 2 heartbeats + %v slack; the queue timeout is %v)",
		wt, slack, opts.QueueTimeout))
	if err != nil || !res.Acquired {
		e.fatalf("the live waiter behind two dead ones: Acquired=%v err=%v, want a lease", res.Acquired, err)
	}
	e.t.Logf("the live waiter acquired %v after the release", time.Since(released).Round(time.Millisecond))
	e.mustRelease(res.Lease)
}

// L3. A waiter queued for several WaiterTimeouts (while the holder extends)
// is never purged: it keeps its ticket and is granted before a waiter that
// queued after it.
func liveWaiterKept(e *env) {
	// Heartbeats every 400 ms: one late by 800 ms (a loaded machine; a
	// 400 ms WaiterTimeout failed beside two busy loops) would purge W1.
	const wt = 1200 * time.Millisecond
	la, _ := e.defaultLocker()
	l1, s1 := e.locker(lock.Options{WaiterTimeout: wt})
	l2, s2 := e.locker(lock.Options{WaiterTimeout: wt})
	ctx := e.ctx(time.Minute)
	id := e.id()
	held := e.mustAcquire(la, id, longTTL)
	var g grantLog
	d1 := e.waitAndRelease(ctx, l1, id, 1, &g)
	e.waitFor(prompt, "W1 queued", func() bool { return s1.queued(id) })
	tok1, _ := s1.queuedToken(id)
	queuedAt := time.Now()
	// Stay queued for three WaiterTimeouts: nine heartbeats.
	e.waitFor(3*wt+prompt, "W1 sent nine heartbeats", func() bool { return len(s1.heartbeatsOf(id, tok1)) >= 9 })
	if err := held.Extend(ctx, longTTL); err != nil {
		e.fatalf("the holder's Extend: %v", err)
	}
	d2 := e.waitAndRelease(ctx, l2, id, 2, &g)
	e.waitFor(prompt, "W2 queued", func() bool { return s2.queued(id) })
	releasedAt := time.Now()
	e.mustRelease(held)
	for i, d := range []<-chan struct{}{d1, d2} {
		select {
		case <-d:
		case <-time.After(prompt):
			e.fatalf("W%d was not granted within %v of the release", i+1, prompt)
		}
	}
	if who, _ := g.snapshot(); !slices.Equal(who, []int{1, 2}) {
		e.errorf("grant order %v, want [1 2]: the waiter queued for %v (WaiterTimeout %v) lost its place", who, releasedAt.Sub(queuedAt).Round(time.Millisecond), wt)
	}
	for _, h := range s1.heartbeatsOf(id, tok1) {
		if h.at.Before(releasedAt) && !h.result.Queued {
			e.errorf("a heartbeat of the live waiter W1 at %v reported its entry gone: a live waiter was purged", h.at.Format(time.StampMilli))
			break
		}
	}
	if ts := s1.tickets(id, tok1); len(ts) > 0 && slices.Min(ts) != slices.Max(ts) {
		e.errorf("the live waiter W1 had tickets %v: it was purged and re-queued", ts)
	}
}

// L4. The queue timeout ends a wait with Acquired=false, WasInUse=true and
// no error, and leaves no entry behind; per-call QueueTimeout overrides.
func queueTimeoutProp(e *env) {
	const qt = 200 * time.Millisecond
	la, _ := e.defaultLocker()
	lb, _ := e.locker(lock.Options{QueueTimeout: qt})
	lc, _ := e.defaultLocker()
	lx, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)
	id := e.id()
	held := e.mustAcquire(la, id, longTTL)
	check := func(what string, call func() (lock.Result, error)) {
		e.t.Helper()
		start := time.Now()
		res, err := call()
		took := time.Since(start)
		if err != nil || res.Acquired || !res.WasInUse || res.Lease != nil || res.ID != id {
			e.errorf("%s on a held id: %+v, %v; want Acquired=false WasInUse=true Lease=nil ID=%q and a nil error", what, res, err, id)
		}
		if took < qt {
			e.errorf("%s returned after %v, before its queue timeout %v", what, took, qt)
		}
		if took > qt+prompt {
			e.errorf("%s returned after %v, long after its queue timeout %v", what, took, qt)
		}
	}
	check("Acquire with QueueTimeout "+qt.String(), func() (lock.Result, error) { return lb.Acquire(ctx, id, longTTL, nil) })
	check("Acquire(QueueTimeout "+qt.String()+") on a Locker with a longer one", func() (lock.Result, error) {
		return lc.Acquire(ctx, id, longTTL, &lock.AcquireOptions{QueueTimeout: qt})
	})
	e.mustRelease(held)
	e.assertFree(lx, id, "after two waits ended at their queue timeout")
}

// L5. Two AcquireMany calls on the same ids in opposite orders, each
// releasing every lease as it is shown, both complete with every id.
func acquireManyOverlap(e *env) {
	const n = 6
	l1, s1 := e.defaultLocker()
	l2, s2 := e.defaultLocker()
	lh, _ := e.defaultLocker()
	for round := 1; round <= 3; round++ {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = e.id()
		}
		rev := slices.Clone(ids)
		slices.Reverse(rev)
		// An outside holder makes sure both calls are queued at once.
		held := e.mustAcquire(lh, ids[n/2], longTTL)
		ctx, cancel := context.WithTimeout(context.Background(), queueTimeout)
		type outcome struct {
			got      map[string]int
			timedOut []string
			err      error
		}
		run := func(l *lock.Locker, ids []string, out *outcome, done chan<- struct{}) {
			defer close(done)
			out.got = map[string]int{}
			for snap, err := range l.AcquireMany(ctx, ids, longTTL, nil) {
				if err != nil {
					out.err = err
					return
				}
				out.timedOut = append(out.timedOut, snap.NotAcquired...)
				for _, le := range snap.Acquired {
					out.got[le.ID()]++
					if err := le.Release(ctx); err != nil {
						out.err = err
						return
					}
				}
			}
		}
		var o1, o2 outcome
		d1, d2 := make(chan struct{}), make(chan struct{})
		e.goFn(func() { run(l1, ids, &o1, d1) })
		e.goFn(func() { run(l2, rev, &o2, d2) })
		e.waitFor(prompt, "both AcquireMany calls queued on the held id", func() bool {
			return s1.queued(ids[n/2]) && s2.queued(ids[n/2])
		})
		e.mustRelease(held)
		bound := 2 * prompt
		for i, d := range []chan struct{}{d1, d2} {
			select {
			case <-d:
			case <-time.After(bound):
				cancel()
				e.fatalf("round %d: AcquireMany call %d did not complete within %v: overlapping calls deadlocked", round, i+1, bound)
			}
		}
		cancel()
		for i, o := range []outcome{o1, o2} {
			if o.err != nil || len(o.timedOut) > 0 || len(o.got) != n {
				e.errorf("round %d: AcquireMany call %d ended with %d of %d ids, timed out %v, err %v; want every id", round, i+1, len(o.got), n, o.timedOut, o.err)
			}
		}
	}
}

// L6. Cancelling a queued Acquire returns ctx's error, holds nothing and
// removes the entry; a cancel that races the grant leaves nothing held.
func cancelWhileQueued(e *env) {
	la, _ := e.defaultLocker()
	lb, sb := e.defaultLocker()
	lc, _ := e.defaultLocker()

	id := e.id()
	held := e.mustAcquire(la, id, longTTL)
	ctx, cancel := context.WithCancel(context.Background())
	p := e.queuedAsync(ctx, lb, sb, id, longTTL)
	cancel()
	res, err := p.wait(e, prompt, "the cancelled waiter")
	if !errors.Is(err, context.Canceled) {
		e.errorf("a cancelled Acquire returned %v, want an error matching context.Canceled", err)
	}
	if res.Acquired || res.Lease != nil {
		e.errorf("a cancelled Acquire returned Acquired=%v Lease=%v", res.Acquired, res.Lease != nil)
	}
	e.mustRelease(held)
	e.assertFree(lc, id, "after a queued Acquire was cancelled")

	// A cancel racing the release that grants the waiter.
	for round := 1; round <= 5; round++ {
		id := e.id()
		held := e.mustAcquire(la, id, longTTL)
		ctx, cancel := context.WithCancel(context.Background())
		p := e.queuedAsync(ctx, lb, sb, id, longTTL)
		released := make(chan struct{})
		e.goFn(func() {
			defer close(released)
			if err := held.Release(context.Background()); err != nil {
				e.errorf("Release: %v", err)
			}
		})
		cancel()
		res, err := p.wait(e, prompt, "the waiter cancelled while the holder released")
		<-released
		switch {
		case res.Acquired && err == nil:
			e.mustRelease(res.Lease)
		case res.Acquired || res.Lease != nil:
			e.errorf("round %d: Acquire returned Acquired=%v with error %v", round, res.Acquired, err)
		case !errors.Is(err, context.Canceled):
			e.errorf("round %d: a cancelled Acquire returned %v, want an error matching context.Canceled", round, err)
		}
		e.assertFree(lc, id, fmt.Sprintf("round %d: after a cancel that raced the release", round))
	}
}

// Timings of head-after-grant.
const (
	// headTTL is the lease that ends without a release.
	headTTL = time.Second
	// headBound is how soon after that lease's end the head at that
	// moment must be granted (plus slack, for a loaded machine).
	headBound = 100 * time.Millisecond
	// headWaiterTimeout makes the heartbeats too slow to be what grants
	// the head: the first one comes headWaiterTimeout/3 after the head
	// queued, seconds after the lease's end plus headBound and slack.
	headWaiterTimeout = 20 * time.Second
)

// L1 head-after-grant (checklist item 7): a waiter that becomes the head
// while the lock is held, with no step of its own telling it, still learns
// when the lease ends. (a) A holds; B and C queue, each in its own process;
// A releases to B, which makes C the head; B dies holding. (b) A holds
// (headTTL); B and C queue; B leaves, which makes C the head; A's lease
// ends. Either way C must be granted within headBound (+ slack) of the
// lease's end, as when it queued as the head. Heartbeats (every
// headWaiterTimeout/3) are too slow to be what grants it.
func headAfterGrant(e *env) {
	ctx := e.ctx(time.Minute)
	// check waits for C's grant and fails unless it came within headBound
	// (+ slack) of end, a time before which the lease did not end (so
	// the lateness measured is never less than the true one).
	check := func(what string, pc *pending, end time.Time) {
		e.t.Helper()
		le := pc.granted(e, time.Until(end)+headWaiterTimeout/3+prompt, what+": C, the head")
		late := pc.end.Sub(end)
		e.t.Logf("%s: C was granted %v after the lease's end", what, late.Round(time.Millisecond))
		if late > headBound+slack {
			e.errorf("%s: C, the head when the lease ended without a release, was granted %v after its end, want within %v (+ %v slack); its heartbeat every %v was what found it: nobody told C it was the head",
				what, late.Round(time.Millisecond), headBound, slack, headWaiterTimeout/3)
		}
		e.mustRelease(le)
	}

	// (a) The grant to B makes C the head; B dies holding.
	{
		la, _ := e.defaultLocker()
		lb, sb := e.locker(lock.Options{WaiterTimeout: headWaiterTimeout})
		lc, sc := e.locker(lock.Options{WaiterTimeout: headWaiterTimeout})
		id := e.id()
		held := e.mustAcquire(la, id, longTTL)
		pb := e.acquireAsync(ctx, lb, id, headTTL)
		e.waitFor(prompt, "B queued", func() bool { return sb.queued(id) })
		pc := e.acquireAsync(ctx, lc, id, longTTL)
		e.waitFor(prompt, "C queued", func() bool { return sc.queued(id) })
		released := time.Now() // B's grant, and so its lease, starts after this
		e.mustRelease(held)
		pb.granted(e, prompt, "(a) B after A's release")
		sb.kill() // B dies holding: no release, no extend
		check("(a) A released to B, B died holding", pc, released.Add(headTTL))
	}

	// (b) B's Leave makes C the head; A's lease ends.
	if e.limits().HeadChangeUnwoken {
		e.skipCase("Limits.HeadChangeUnwoken: skipping the head's Leave while the lock is held")
		return
	}
	{
		la, sa := e.defaultLocker()
		lb, sb := e.locker(lock.Options{WaiterTimeout: headWaiterTimeout})
		lc, sc := e.locker(lock.Options{WaiterTimeout: headWaiterTimeout})
		id := e.id()
		start := time.Now() // A's lease ends by start + headTTL
		held := e.mustAcquire(la, id, headTTL)
		sa.kill() // A dies holding
		bctx, leave := context.WithCancel(ctx)
		pb := e.acquireAsync(bctx, lb, id, longTTL)
		e.waitFor(prompt, "B queued", func() bool { return sb.queued(id) })
		pc := e.acquireAsync(ctx, lc, id, longTTL)
		e.waitFor(prompt, "C queued", func() bool { return sc.queued(id) })
		leave()
		if _, err := pb.wait(e, prompt, "(b) B, cancelled"); !errors.Is(err, context.Canceled) {
			e.errorf("(b) B, cancelled while queued: %v, want context.Canceled", err)
		}
		if time.Now().After(held.ValidUntil()) {
			e.t.Logf("(b) skipped: B left %v after A's lease (%v) was granted, too late to test a head change while it is held",
				time.Since(start).Round(time.Millisecond), headTTL)
			return
		}
		check("(b) B left while A held, A died holding", pc, start.Add(headTTL))
	}
}
