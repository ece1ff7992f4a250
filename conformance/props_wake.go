package conformance

import (
	"fmt"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// settle is how long the suite waits for wake-ups that should not come:
// one that is on its way when the check starts arrives well within it on
// any store the suite runs against (a loopback round trip is ~0.1 ms).
const settle = 300 * time.Millisecond

// slowHeartbeats is the WaiterTimeout of waiters whose heartbeats must not
// matter: they come every 20 s, four times prompt.
const slowHeartbeats = time.Minute

// limits returns the harness's Limits, or the zero Limits.
func (e *env) limits() Limits {
	if l, ok := e.h.(Limiter); ok {
		return l.Limits()
	}
	return Limits{}
}

// letPass lets d pass on the store's clock after since: through the
// harness's ClockAdvancer when it has one, otherwise by waiting until
// since+d (the store's clock runs at real speed).
func (e *env) letPass(since time.Time, d time.Duration) {
	if c, ok := e.h.(ClockAdvancer); ok {
		c.Advance(e.t, d)
		return
	}
	waitUntil(since.Add(d))
}

// token returns a token unique per subtest and per process.
func (e *env) token(what string) string {
	return fmt.Sprintf("%s-%s-%d", what, nonce, e.ids.Add(1))
}

// mustStep fails the subtest when a backend step fails.
func (e *env) mustStep(what string, err error) {
	e.t.Helper()
	if err != nil {
		e.fatalf("%s: %v", what, err)
	}
}

// grant runs one backend Acquire and fails the subtest on an error.
func (e *env) grant(b *spy, req backend.AcquireRequest) backend.Grant {
	e.t.Helper()
	g, err := b.Acquire(e.ctx(prompt), req)
	e.mustStep(fmt.Sprintf("backend Acquire(%s, wait=%v)", req.Token, req.Wait), err)
	return g
}

// wake-only-head (checklist item 7): waiters of one id in four processes;
// the holder releases. Across every process, the release's wake-ups reach
// the head and no other waiter: none names another waiter (but W2, the
// head once W1 is granted), and no Wake{All} or unnamed wake-up reaches a
// process whose only waiter is not the head.
func wakeOnlyHead(e *env) {
	const n = 4
	lim := e.limits()
	la, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)
	id := e.id()
	held := e.mustAcquire(la, id, longTTL)
	type proc struct {
		s   *spy
		tok string
		p   *pending
	}
	procs := make([]proc, n)
	for i := range procs {
		l, s := e.locker(lock.Options{WaiterTimeout: slowHeartbeats})
		p := e.acquireAsync(ctx, l, id, longTTL)
		e.waitFor(prompt, fmt.Sprintf("W%d queued", i+1), func() bool { return s.queued(id) })
		tok, _ := s.queuedToken(id)
		procs[i] = proc{s, tok, p}
	}
	who := map[string]int{}
	marks := make([]int, n)
	for i, pr := range procs {
		who[pr.tok] = i + 1
		marks[i] = pr.s.wakeMark()
	}
	e.mustRelease(held)
	le := procs[0].p.granted(e, prompt, "the head W1 after the release")
	waitUntil(time.Now().Add(settle))
	headWoken := 0
	for i, pr := range procs {
		for _, wk := range pr.s.wakesSince(id, marks[i]) {
			switch {
			case wk.All && i == 0, wk.Token == "" && i == 0:
				headWoken++
			case wk.All:
				// With one waiter per process, Wake{All} wakes what an
				// unnamed wake-up does.
				if !lim.UnnamedWakes {
					e.errorf("after one release, W%d's process got Wake{All}: every waiter re-checks, not only the head W1", i+1)
				}
			case wk.Token == "":
				if !lim.UnnamedWakes {
					e.errorf("after one release, W%d's process got a wake-up naming no token, which wakes its earliest waiter (W%d), not the head W1 (a backend that cannot name the head states Limits.UnnamedWakes)", i+1, i+1)
				}
			case wk.Token == procs[0].tok:
				if i == 0 {
					headWoken++
				}
			case wk.Token == procs[1].tok:
				// W1's grant made W2 the head of a held lock: it may be
				// told so (checklist item 7), with or without HolderTTL,
				// and the wake-up may reach every process.
			default:
				if w, ok := who[wk.Token]; ok {
					e.errorf("after one release, a wake-up named W%d, not the head W1 (it reached W%d's process)", w, i+1)
				} else {
					e.errorf("after one release, a wake-up named %q, which is no waiter of the id", wk.Token)
				}
			}
		}
	}
	if headWoken == 0 {
		e.errorf("W1 acquired, but no wake-up reached the head's process (heartbeats every %v cannot explain it)", slowHeartbeats/3)
	}
	e.mustRelease(le)
}

// wake-new-head (checklist item 7): a waiter W that is not the head, with
// heartbeats too slow to matter, must be woken when a step makes it the
// head of a free lock: the holder's release; the head's Leave; the purge
// of a dead head by another client's step; a heartbeat (of another
// waiter) that finds the holder's lease ended by the store.
func wakeNewHead(e *env) {
	ra, rb := e.backend(), e.backend()
	lx, _ := e.defaultLocker()
	lim := e.limits()
	ctx := e.ctx(time.Minute)
	const deadTTL = 300 * time.Millisecond

	type scenario struct {
		name       string
		headChange bool // the lock is free before the step; only the head changes
		ahead      func(id string)
		behind     func(id string)
		step       func(id, holder string)
		after      func(id string)
	}
	var ahead string
	var aheadAt time.Time
	scenarios := []scenario{{
		name: "the holder's Release",
		step: func(id, holder string) { e.mustStep("Release", ra.Release(ctx, id, holder)) },
	}, {
		name:       "the head's Leave while the lock is free",
		headChange: true,
		ahead: func(id string) {
			ahead = e.token("head")
			e.grant(rb, backend.AcquireRequest{ID: id, Token: ahead, TTL: longTTL, Wait: true, WaiterTTL: longTTL})
		},
		step: func(id, holder string) {
			e.mustStep("Release", ra.Release(ctx, id, holder))
			e.mustStep("Leave of the head", rb.Leave(ctx, id, ahead))
		},
	}, {
		name:       "another client's step that purges the dead head of a free lock",
		headChange: true,
		ahead: func(id string) {
			ahead = e.token("dead-head")
			e.grant(rb, backend.AcquireRequest{ID: id, Token: ahead, TTL: longTTL, Wait: true, WaiterTTL: deadTTL})
			aheadAt = time.Now()
		},
		step: func(id, holder string) {
			if e.handsOff() {
				// The release would grant the head, still live by its
				// deadline: here it is purged first, by the release.
				e.letPass(aheadAt, deadTTL+50*time.Millisecond)
			}
			e.mustStep("Release", ra.Release(ctx, id, holder))
			e.letPass(aheadAt, deadTTL+50*time.Millisecond)
			if le, err := e.tryAcquire(lx, id, longTTL); err != nil || le != nil {
				e.errorf("a newcomer's TryAcquire with W queued: lease=%v err=%v, want refused", le != nil, err)
			}
		},
	}}
	if x, ok := e.h.(Expirer); ok {
		var behind string
		scenarios = append(scenarios, scenario{
			name: "a heartbeat of another waiter that finds the holder's lease ended by the store",
			behind: func(id string) {
				behind = e.token("behind")
				e.grant(rb, backend.AcquireRequest{ID: id, Token: behind, TTL: longTTL, Wait: true, WaiterTTL: longTTL})
			},
			step: func(id, holder string) {
				x.ExpireNow(e.t, id)
				res, err := rb.Heartbeat(ctx, []backend.Waiter{{ID: id, Token: behind}}, longTTL)
				e.mustStep("Heartbeat", err)
				if len(res) != 1 || !res[0].Queued || res[0].Ready {
					e.errorf("the Heartbeat of the second waiter: %+v, want Queued and not Ready", res)
				}
			},
			after: func(id string) { _ = rb.Leave(ctx, id, behind) },
		})
	} else {
		e.skipCase("no Expirer: skipping the case of a heartbeat that finds the lease ended")
	}
	for _, sc := range scenarios {
		id := e.id()
		holder := e.token("holder")
		if g := e.grant(ra, backend.AcquireRequest{ID: id, Token: holder, TTL: longTTL}); !g.Acquired {
			e.fatalf("backend Acquire of a free id: %+v", g)
		}
		if sc.ahead != nil {
			sc.ahead(id)
		}
		opts := lock.Options{WaiterTimeout: slowHeartbeats}
		bound := prompt
		if sc.headChange && lim.HeadChangeUnwoken {
			// A documented exception: the heartbeat finds it.
			opts.WaiterTimeout = waiterTimeout
			bound = waiterTimeout + waiterTimeout/3 + slack
		}
		lw, sw := e.locker(opts)
		p := e.acquireAsync(ctx, lw, id, longTTL)
		e.waitFor(prompt, sc.name+": W queued", func() bool { return sw.queued(id) })
		tok, _ := sw.queuedToken(id)
		if sc.behind != nil {
			sc.behind(id)
		}
		sc.step(id, holder)
		le := p.granted(e, bound, fmt.Sprintf("after %s, W (now the head of a free lock, heartbeats every %v) must be woken", sc.name, opts.WaiterTimeout/3))
		if bound == prompt && sw.wakesFor(id, tok, true) == 0 {
			e.errorf("after %s, W acquired but no wake-up for it reached its process", sc.name)
		}
		e.mustRelease(le)
		if sc.after != nil {
			sc.after(id)
		}
	}
}

// subscribe-live (checklist item 8): a wake-up sent right after Subscribe
// returned (and the waiting step that follows it, as in the core) reaches
// the subscriber, also when the store confirms subscriptions slowly
// (SubscribeDelayer).
func subscribeLive(e *env) {
	const delay = 300 * time.Millisecond
	d, canDelay := e.h.(SubscribeDelayer)
	if !canDelay {
		e.skipCase("no SubscribeDelayer: a Subscribe that returns early is caught only if the store is slow on its own")
	}
	ra, x := e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	for round := 1; round <= 3; round++ {
		id := e.id()
		holder, tok := e.token("holder"), e.token("waiter")
		if g := e.grant(ra, backend.AcquireRequest{ID: id, Token: holder, TTL: longTTL}); !g.Acquired {
			e.fatalf("backend Acquire of a free id: %+v", g)
		}
		wreq := backend.AcquireRequest{ID: id, Token: tok, TTL: longTTL, Wait: true, WaiterTTL: longTTL}
		e.grant(x, wreq)
		if canDelay {
			d.DelaySubscribe(e.t, x.inner, delay)
		}
		woken := make(chan backend.Wake, 16)
		start := time.Now()
		cancel, err := x.Subscribe(ctx, id, func(w backend.Wake) {
			select {
			case woken <- w:
			default:
			}
		})
		e.mustStep("Subscribe", err)
		took := time.Since(start)
		if canDelay {
			d.DelaySubscribe(e.t, x.inner, 0)
		}
		e.grant(x, wreq) // the core's step after Subscribe
		e.mustStep("Release", ra.Release(ctx, id, holder))
		timer := time.NewTimer(prompt)
		got := false
		for !got {
			select {
			case w := <-woken:
				got = w.All || w.Token == "" || w.Token == tok
			case <-timer.C:
				e.errorf("round %d: the holder released right after Subscribe returned (in %v, subscriptions delayed %v: %v), and no wake-up for the queued head arrived within %v: Subscribe returned before the subscription was live",
					round, took.Round(time.Millisecond), delay, canDelay, prompt)
				got = true
			}
		}
		timer.Stop()
		cancel()
		_ = x.Leave(ctx, id, tok)
	}
}

// reconnect-wakes-all (checklist item 8): when the notifier's connection
// is broken and re-established, every subscribed id gets Wake{All}, and
// wake-ups flow again afterwards.
func reconnectWakesAll(e *env) {
	dr, ok := e.h.(NotifierDropper)
	if !ok {
		e.skipf("the harness has no NotifierDropper: cannot break a notifier's connection")
	}
	la, _ := e.defaultLocker()
	lw, sw := e.locker(lock.Options{WaiterTimeout: slowHeartbeats})
	ctx := e.ctx(time.Minute)
	ids := []string{e.id(), e.id()}
	var held []*lock.Lease
	var waits []*pending
	for _, id := range ids {
		held = append(held, e.mustAcquire(la, id, longTTL))
		waits = append(waits, e.acquireAsync(ctx, lw, id, longTTL))
		e.waitFor(prompt, "the waiter queued", func() bool { return sw.queued(id) })
	}
	mark := sw.wakeMark()
	dr.DropNotifier(e.t, sw.inner)
	for _, id := range ids {
		e.waitFor(prompt, fmt.Sprintf("Wake{ID: %q, All: true} after the notifier's connection was broken", id), func() bool {
			for _, w := range sw.wakesSince(id, mark) {
				if w.All {
					return true
				}
			}
			return false
		})
	}
	for i, le := range held {
		e.mustRelease(le)
		e.mustRelease(waits[i].granted(e, prompt, fmt.Sprintf("the waiter after a release, once the notifier reconnected (heartbeats every %v)", slowHeartbeats/3)))
	}
}

// one-delivery-per-wake (checklist item 7): eight processes wait on one
// id, one waiter each; the holder releases, and each waiter releases once
// granted. A wake-up reaches the process of the waiter it names, and no
// other: across all eight, the core is handed at most two wake-ups per
// hand-off (the new holder's, and the next head's notice of the holder's
// TTL). A wake-up sent to every process that waits on the id is handed up
// to eight times.
func oneDeliveryPerWake(e *env) {
	if e.limits().WakesEveryProcess {
		e.skipf("the harness states Limits.WakesEveryProcess: a wake-up reaches every process that waits on the id")
	}
	const n = 8
	la, _ := e.defaultLocker()
	ctx := e.ctx(time.Minute)
	id := e.id()
	held := e.mustAcquire(la, id, longTTL)
	spies := make([]*spy, n)
	marks := make([]int, n)
	ps := make([]*pending, n)
	for i := range n {
		l, s := e.locker(lock.Options{WaiterTimeout: slowHeartbeats})
		spies[i], marks[i] = s, s.wakeMark()
		ps[i] = e.acquireAsync(ctx, l, id, longTTL)
		e.waitFor(prompt, fmt.Sprintf("W%d queued", i+1), func() bool { return s.queued(id) })
	}
	e.mustRelease(held)
	for i, p := range ps {
		e.mustRelease(p.granted(e, prompt, fmt.Sprintf("W%d, in queue order", i+1)))
	}
	total := 0
	per := make([]int, n)
	for i, s := range spies {
		for _, wk := range s.wakesSince(id, marks[i]) {
			if !wk.All {
				per[i]++
			}
		}
		total += per[i]
	}
	if total > 2*n {
		e.errorf("%d hand-offs among %d waiting processes handed %d wake-ups to the core (per process %v); want at most %d: each wake-up only to the process of the waiter it names", n, n, total, per, 2*n)
	}
}

// subscribe-scoped (checklist item 8): process P subscribes to id twice,
// process Q once, and P cancels its first subscription. A release then
// wakes P's waiter, the head, through P's second subscription, and once P's
// waiter releases, Q's waiter is woken through Q's: a cancel removes that
// one subscription, not every subscription of the id in its process or in
// the store.
func subscribeScoped(e *env) {
	ra, rp, rq := e.backend(), e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	id := e.id()
	h, wp, wq := e.token("holder"), e.token("wp"), e.token("wq")
	e.grant(ra, backend.AcquireRequest{ID: id, Token: h, TTL: longTTL})
	_, cancel1 := e.wakeChan(rp, id)
	p2, _ := e.wakeChan(rp, id)
	q3, _ := e.wakeChan(rq, id)
	for _, w := range []struct {
		b   *spy
		tok string
	}{{rp, wp}, {rq, wq}} {
		if g := e.grant(w.b, backend.AcquireRequest{ID: id, Token: w.tok, TTL: longTTL, Wait: true, WaiterTTL: longTTL}); !g.Queued {
			e.fatalf("Acquire with Wait on a held id: %+v; want queued", g)
		}
	}
	cancel1()
	woken := func(ch <-chan backend.Wake, tok, what string) {
		e.t.Helper()
		if _, ok := awaitWake(ch, prompt, func(w backend.Wake) bool {
			return w.ID == id && (w.All || w.Token == "" || w.Token == tok)
		}); !ok {
			e.errorf("%s: no wake-up within %v: cancelling another subscription of the id cancelled this one too", what, prompt)
		}
	}
	e.mustStep("Release", ra.Release(ctx, id, h))
	woken(p2, wp, "P's head waiter, through P's second subscription, after P cancelled its first")
	if g := e.grant(rp, backend.AcquireRequest{ID: id, Token: wp, TTL: longTTL, Wait: true, WaiterTTL: longTTL}); !g.Acquired {
		e.fatalf("P's waiter, the head, after the release: %+v; want granted", g)
	}
	e.mustStep("Release", rp.Release(ctx, id, wp))
	woken(q3, wq, "Q's waiter, the new head, through Q's subscription, after P cancelled one of its own")
	if g := e.grant(rq, backend.AcquireRequest{ID: id, Token: wq, TTL: longTTL, Wait: true, WaiterTTL: longTTL}); !g.Acquired {
		e.fatalf("Q's waiter, the head, after P's waiter released: %+v; want granted", g)
	}
	e.mustStep("Release", rq.Release(ctx, id, wq))
}

// wakeChan subscribes b to id and returns the channel its wake-ups arrive
// on (up to 64 unread; more are dropped) and the subscription's cancel,
// which also runs at the end of the subtest.
func (e *env) wakeChan(b *spy, id string) (<-chan backend.Wake, func()) {
	e.t.Helper()
	ch := make(chan backend.Wake, 64)
	cancel, err := b.Subscribe(e.ctx(prompt), id, func(w backend.Wake) {
		select {
		case ch <- w:
		default:
		}
	})
	e.mustStep("Subscribe", err)
	e.t.Cleanup(cancel)
	return ch, cancel
}

// awaitWake returns the first wake-up from ch that match accepts, or false
// when none came within timeout (the others are dropped).
func awaitWake(ch <-chan backend.Wake, timeout time.Duration, match func(backend.Wake) bool) (backend.Wake, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case w := <-ch:
			if match(w) {
				return w, true
			}
		case <-timer.C:
			return backend.Wake{}, false
		}
	}
}

// queueDead queues n waiters on id through b, in batches of 100, each
// with waiterTTL, failing the subtest unless each is queued. It returns
// their tokens, in queue order, and the time the last batch returned:
// every deadline is at most waiterTTL after it.
func (e *env) queueDead(b *spy, id string, n int, waiterTTL time.Duration) ([]string, time.Time) {
	e.t.Helper()
	tokens := make([]string, n)
	var reqs []backend.AcquireRequest
	for i := range tokens {
		tokens[i] = fmt.Sprintf("dead-%s-%d", nonce, i)
		reqs = append(reqs, backend.AcquireRequest{ID: id, Token: tokens[i], TTL: longTTL, Wait: true, WaiterTTL: waiterTTL})
	}
	for len(reqs) > 0 {
		k := min(len(reqs), 100)
		res, err := fallback.AcquireBatch(e.ctx(prompt), b, reqs[:k])
		if err != nil {
			e.fatalf("AcquireBatch of dead-to-be waiters: %v", err)
		}
		for _, r := range res {
			if r.Err != nil || !r.Queued {
				e.fatalf("a dead-to-be waiter: %+v, %v; want queued", r.Grant, r.Err)
			}
		}
		reqs = reqs[k:]
	}
	return tokens, time.Now()
}
