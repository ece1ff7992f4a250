package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"pgregory.net/rapid"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// The properties of shared ids (backend.Sharer, checklist item 15), run
// straight against backend steps. Each is skipped for a backend that does
// not offer shared ids.

// shares reports whether the harness's backends offer shared ids.
func (e *env) shares() bool { return e.backend().Shares() }

// skipNoShare skips the property for a backend that does not offer shared
// ids. It is no failure under Limits.Strict: shared ids have no fallback
// to hold a backend to (the core refuses a shared request with
// ErrUnsupported), so a backend that is not a backend.Sharer conforms
// without them.
func (e *env) skipNoShare() {
	e.t.Helper()
	if e.shares() {
		return
	}
	reason := "the backend does not offer shared ids (no backend.Sharer, or Shares() is false)"
	if e.skips != nil {
		e.skips.add(e.t.Name(), reason+" (not a failure under Strict)", false)
	}
	e.t.Skip(reason)
}

// sreq is a shared request of tok on id for permits of capacity, with
// long TTLs.
func sreq(id, tok string, capacity, permits int, wait bool) backend.AcquireRequest {
	return backend.AcquireRequest{ID: id, Token: tok, TTL: longTTL, Wait: wait, WaiterTTL: longTTL, Capacity: capacity, Permits: permits}
}

// sharedWaiter is one waiter of a shared id in a process of its own, with
// a subscription to the id made before it queued.
type sharedWaiter struct {
	name string
	b    *spy
	ch   <-chan backend.Wake
	req  backend.AcquireRequest
}

// queueShared queues r in a new process, subscribed first, and fails the
// property unless r is queued and not granted.
func (e *env) queueShared(name string, r backend.AcquireRequest) *sharedWaiter {
	e.t.Helper()
	b := e.backend()
	ch, _ := e.wakeChan(b, r.ID)
	g := e.grant(b, r)
	if g.Acquired || !g.Queued {
		e.fatalf("%s (%d of %d permits) with Wait: %+v, want queued and not granted", name, r.Permits, r.Capacity, g)
	}
	return &sharedWaiter{name: name, b: b, ch: ch, req: r}
}

// forMe reports whether wk is addressed to w's waiter.
func (e *env) forMe(w *sharedWaiter, wk backend.Wake) bool {
	if wk.ID != w.req.ID || wk.HolderTTL > 0 {
		return false
	}
	return wk.Token == w.req.Token || (e.limits().UnnamedWakes && (wk.Token == "" || wk.All))
}

// awaitLetIn waits for the wake-up that lets w in after a step (a grant,
// with hand-off; a plain wake-up, without), and reports it. It runs no
// step of w.
func (e *env) awaitLetIn(w *sharedWaiter, after string) (backend.Wake, bool) {
	e.t.Helper()
	wk, ok := awaitWake(w.ch, prompt, func(wk backend.Wake) bool { return e.forMe(w, wk) })
	switch {
	case !ok:
		e.errorf("after %s, %s (%d of %d permits), a head that fits, got no wake-up within %v", after, w.name, w.req.Permits, w.req.Capacity, prompt)
	case e.handsOff() && wk.Grant == nil:
		e.errorf("after %s, %s's wake-up carries no grant: a HandOffer grants every head that fits in the step, each with its own grant", after, w.name)
		return wk, false
	}
	return wk, ok
}

// takeLease runs w's retried Acquire, which must report its lease (granted
// by hand-off, with the wake-up's fence, or granted now), and returns its
// fence.
func (e *env) takeLease(w *sharedWaiter, wk backend.Wake, after string) uint64 {
	e.t.Helper()
	g := e.grant(w.b, w.req)
	switch {
	case !g.Acquired:
		e.errorf("after %s, %s's Acquire, woken: %+v, want granted", after, w.name, g)
	case wk.Grant != nil && g.Fence != wk.Grant.Fence:
		e.errorf("after %s, %s's retried Acquire reports fence %d, its hand-off %d", after, w.name, g.Fence, wk.Grant.Fence)
	}
	return g.Fence
}

// letIn checks that a step let in every one of ws: each got its wake-up
// (before any of them ran a step: one step lets them all in), and each
// then holds its lease. It returns their fences.
func (e *env) letIn(after string, ws ...*sharedWaiter) []uint64 {
	e.t.Helper()
	wakes := make([]backend.Wake, len(ws))
	ok := true
	for i, w := range ws {
		var got bool
		wakes[i], got = e.awaitLetIn(w, after)
		ok = ok && got
	}
	if !ok {
		e.t.FailNow()
	}
	fences := make([]uint64, len(ws))
	for i, w := range ws {
		fences[i] = e.takeLease(w, wakes[i], after)
	}
	return fences
}

// notLetIn checks that w, queued, is not granted: its retried Acquire
// reports it queued. A grant ends the property (what follows builds on
// it).
func (e *env) notLetIn(w *sharedWaiter, why string) {
	e.t.Helper()
	if g := e.grant(w.b, w.req); g.Acquired || !g.Queued {
		_ = w.b.Release(e.ctx(prompt), w.req.ID, w.req.Token)
		e.fatalf("%s (%d of %d permits): %+v, want still queued: %s", w.name, w.req.Permits, w.req.Capacity, g, why)
	}
}

// ---- shared-capacity ----

// sharedCapacity: concurrent shared acquires and releases by many
// processes never hold more than Capacity permits at once (a real-time
// ledger of grants, and Inspect where there is one), and the fences of
// live leases are distinct. Then a rapid state machine drives the steps
// of three processes on one shared id and compares each result, and the
// Inspection, with the model of checklist item 15.
func sharedCapacity(e *env) {
	e.skipNoShare()
	const (
		capacity   = 3
		procs      = 4
		perProc    = 2
		perRoutine = 12
	)
	id := e.id()
	ctx, stop := context.WithCancel(e.ctx(2 * time.Minute))
	defer stop()
	var (
		failures atomic.Int32
		inside   atomic.Int32
		mu       sync.Mutex
		live     = map[uint64]string{}
		done     sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		if ctx.Err() != nil {
			return
		}
		if failures.Add(1) <= 5 {
			e.errorf(format, args...)
		}
		stop()
	}
	for p := 0; p < procs; p++ {
		b := e.backend()
		for g := 0; g < perProc; g++ {
			done.Add(1)
			e.goFn(func() {
				defer done.Done()
				for n := 0; n < perRoutine && ctx.Err() == nil; n++ {
					permits := (p+g+n)%capacity + 1
					tok := fmt.Sprintf("cap-%s-%d-%d-%d", nonce, p, g, n)
					r := backend.AcquireRequest{ID: id, Token: tok, TTL: longTTL, Wait: true, WaiterTTL: waiterTimeout, Capacity: capacity, Permits: permits}
					var gr backend.Grant
					// Poll: a retried Acquire keeps the place, refreshes
					// the entry, and reports a grant made by hand-off.
					if !eventually(e.t, time.Minute, func() bool {
						var err error
						gr, err = b.Acquire(ctx, r)
						if err != nil {
							fail("Acquire(%d of %d permits): %v", permits, capacity, err)
							return true
						}
						return gr.Acquired
					}) || !gr.Acquired {
						fail("Acquire(%d of %d permits) not granted within a minute", permits, capacity)
						return
					}
					if c := inside.Add(int32(permits)); c > capacity {
						fail("%d permits held at once on an id of capacity %d (entering with %d, fence %d)", c, capacity, permits, gr.Fence)
					}
					mu.Lock()
					if other, dup := live[gr.Fence]; dup {
						fail("fence %d granted to %s while %s holds it: every grant takes a new fence", gr.Fence, tok, other)
					}
					live[gr.Fence] = tok
					mu.Unlock()
					runtime.Gosched()
					mu.Lock()
					delete(live, gr.Fence)
					mu.Unlock()
					inside.Add(-int32(permits))
					if err := b.Release(ctx, id, tok); err != nil {
						fail("Release (fence %d): %v", gr.Fence, err)
						return
					}
				}
			})
		}
	}
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	// Inspect, where there is one, must agree while they run.
	in := e.backend()
	if in.inspects() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
	sample:
		for {
			select {
			case <-finished:
				break sample
			case <-ctx.Done():
				break sample
			case <-tick.C:
			}
			got, err := in.Inspect(ctx, id, 0)
			if err != nil {
				if ctx.Err() == nil {
					fail("Inspect: %v", err)
				}
				break
			}
			sum := 0
			for _, h := range got.Holders {
				sum += h.Permits
			}
			if sum > capacity || (got.Held && got.Capacity != capacity) {
				fail("Inspect: holders %+v (%d permits), capacity %d; want at most %d permits of capacity %d", got.Holders, sum, got.Capacity, capacity, capacity)
			}
		}
	}
	select {
	case <-finished:
	case <-ctx.Done():
	}
	<-finished
	if failures.Load() > 0 {
		return
	}
	sharedModelCheck(e)
}

// sharedModel is the model of one shared id: its leases (token and
// permits, in grant order) and the queue (token and permits, in ticket
// order). TTLs are long: nothing expires while rapid runs.
type sharedModel struct {
	capacity int
	leases   []shareEntry
	queue    []shareEntry
	grants   []uint64       // every grant's fence, in grant order; 0 until a step reports it (a hand-off)
	at       map[string]int // a lease's index in grants
	tickets  map[string]uint64
	released map[string]bool // tokens that released: a resent Release may answer nil (item 3)
	handsOff bool
}

type shareEntry struct {
	tok     string
	permits int
}

func (m *sharedModel) used() int {
	n := 0
	for _, l := range m.leases {
		n += l.permits
	}
	return n
}

func (m *sharedModel) holds(tok string) bool {
	return slices.ContainsFunc(m.leases, func(l shareEntry) bool { return l.tok == tok })
}

func (m *sharedModel) pos(tok string) int {
	return slices.IndexFunc(m.queue, func(q shareEntry) bool { return q.tok == tok })
}

// settle grants the heads that fit, when the backend hands off.
func (m *sharedModel) settle() {
	for m.handsOff && len(m.queue) > 0 && m.used()+m.queue[0].permits <= m.capacity {
		h := m.queue[0]
		m.queue = m.queue[1:]
		delete(m.tickets, h.tok)
		m.leases = append(m.leases, h)
		m.at[h.tok] = len(m.grants)
		m.grants = append(m.grants, 0)
	}
}

// granted records tok's lease's fence f, and returns what is wrong with
// it: fences strictly increase in grant order.
func (m *sharedModel) granted(tok string, f uint64, fresh bool) string {
	if fresh {
		m.at[tok] = len(m.grants)
		m.grants = append(m.grants, f)
	} else {
		m.grants[m.at[tok]] = f
	}
	var last uint64
	for _, g := range m.grants {
		if g == 0 {
			continue
		}
		if g <= last {
			return fmt.Sprintf("%s's lease has fence %d: the fences of the grants, in grant order (0: not seen yet), are %v, not strictly increasing", tok, f, m.grants)
		}
		last = g
	}
	return ""
}

func (m *sharedModel) drop(tok string) bool {
	if i := slices.IndexFunc(m.leases, func(l shareEntry) bool { return l.tok == tok }); i >= 0 {
		m.leases = slices.Delete(m.leases, i, i+1)
		delete(m.at, tok)
		return true
	}
	return false
}

func (m *sharedModel) String() string {
	return fmt.Sprintf("capacity %d, leases %v, queue %v", m.capacity, m.leases, m.queue)
}

// acquire checks an Acquire's outcome against the model and applies it;
// it returns what is wrong, or "".
func (m *sharedModel) acquire(r backend.AcquireRequest, g backend.Grant, err error) string {
	if err != nil {
		return fmt.Sprintf("Acquire(%s, %d permits, wait=%v): %v", r.Token, r.Permits, r.Wait, err)
	}
	if m.holds(r.Token) {
		switch f := m.grants[m.at[r.Token]]; {
		case !g.Acquired:
			return fmt.Sprintf("a retried Acquire by %s, which holds a lease: %+v, want the lease", r.Token, g)
		case f != 0 && g.Fence != f:
			return fmt.Sprintf("a retried Acquire by %s: fence %d, want its lease's %d", r.Token, g.Fence, f)
		case f == 0:
			return m.granted(r.Token, g.Fence, false)
		}
		return ""
	}
	i := m.pos(r.Token)
	ahead := len(m.queue) > 0 && i != 0
	fits := m.used()+r.Permits <= m.capacity
	if fits && !ahead {
		if !g.Acquired {
			return fmt.Sprintf("Acquire(%s, %d permits) fits (%d of %d used) with no waiter ahead: %+v, want granted", r.Token, r.Permits, m.used(), m.capacity, g)
		}
		if i == 0 {
			m.queue = m.queue[1:]
			delete(m.tickets, r.Token)
		}
		m.leases = append(m.leases, shareEntry{r.Token, r.Permits})
		msg := m.granted(r.Token, g.Fence, true)
		m.settle()
		return msg
	}
	if g.Acquired {
		why := "a waiter is ahead"
		if !fits {
			why = fmt.Sprintf("%d of %d permits are taken", m.used(), m.capacity)
		}
		return fmt.Sprintf("Acquire(%s, %d permits) granted (fence %d), but %s", r.Token, r.Permits, g.Fence, why)
	}
	if i < 0 && r.Wait {
		m.queue = append(m.queue, shareEntry{r.Token, r.Permits})
		i = len(m.queue) - 1
	}
	queued := i >= 0
	if g.Queued != queued || (queued && g.Head != (i == 0)) {
		return fmt.Sprintf("Acquire(%s, wait=%v): %+v, want queued=%v at %d", r.Token, r.Wait, g, queued, i)
	}
	if queued {
		if t, ok := m.tickets[r.Token]; ok && t != g.Ticket {
			return fmt.Sprintf("Acquire(%s): ticket %d, want its ticket %d", r.Token, g.Ticket, t)
		}
		m.tickets[r.Token] = g.Ticket
	}
	return ""
}

// check compares an Inspection with the model.
func (m *sharedModel) check(in backend.Inspection) string {
	var hs []shareEntry
	for _, h := range in.Holders {
		hs = append(hs, shareEntry{h.Holder, h.Permits})
	}
	var want []shareEntry
	for _, l := range m.leases {
		want = append(want, shareEntry{backend.Fingerprint(l.tok), l.permits})
	}
	if !slices.Equal(hs, want) {
		return fmt.Sprintf("Inspect lists holders %v, want (fingerprint, permits) %v", hs, want)
	}
	var ws, wq []shareEntry
	for _, w := range in.Waiters {
		ws = append(ws, shareEntry{w.Token, w.Permits})
	}
	for _, q := range m.queue {
		wq = append(wq, shareEntry{backend.Fingerprint(q.tok), q.permits})
	}
	if !slices.Equal(ws, wq) {
		return fmt.Sprintf("Inspect lists waiters %v, want (fingerprint, permits) %v", ws, wq)
	}
	if len(m.leases) > 0 && in.Capacity != m.capacity {
		return fmt.Sprintf("Inspect: capacity %d, want %d", in.Capacity, m.capacity)
	}
	return ""
}

// sharedModelCheck: the rapid state machine of shared-capacity.
func sharedModelCheck(e *env) {
	const nb = 3
	bs := make([]*spy, nb)
	for i := range bs {
		bs[i] = e.backend()
	}
	ctx := e.ctx(modelTimeLimit())
	inspects := bs[0].inspects()
	rapid.Check(e.t, func(rt *rapid.T) {
		id := e.id()
		capacity := rapid.IntRange(2, 4).Draw(rt, "capacity")
		toks := make([]string, 5)
		permits := map[string]int{}
		for i := range toks {
			toks[i] = fmt.Sprintf("smodel-%s-%d", nonce, i)
			permits[toks[i]] = rapid.IntRange(1, capacity).Draw(rt, "permits")
		}
		m := &sharedModel{capacity: capacity, at: map[string]int{}, tickets: map[string]uint64{}, released: map[string]bool{}, handsOff: fallback.HandsOff(bs[0])}
		fail := func(format string, args ...any) {
			rt.Fatalf("%s: %s; model %v", e.contract, fmt.Sprintf(format, args...), m)
		}
		defer func() {
			for _, tok := range toks {
				_ = bs[0].Leave(ctx, id, tok)
			}
		}()
		drawB := func(rt *rapid.T) *spy { return bs[rapid.IntRange(0, nb-1).Draw(rt, "backend")] }
		drawTok := func(rt *rapid.T) string { return rapid.SampledFrom(toks).Draw(rt, "token") }
		after := func() {
			if !inspects {
				return
			}
			in, err := bs[0].Inspect(ctx, id, backend.MaxInspectWaiters)
			if err != nil {
				fail("Inspect: %v", err)
			}
			if msg := m.check(in); msg != "" {
				fail("%s", msg)
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"Acquire": func(rt *rapid.T) {
				tok := drawTok(rt)
				r := backend.AcquireRequest{ID: id, Token: tok, TTL: longTTL, Wait: rapid.Bool().Draw(rt, "wait"), WaiterTTL: longTTL, Capacity: capacity, Permits: permits[tok]}
				g, err := drawB(rt).Acquire(ctx, r)
				if msg := m.acquire(r, g, err); msg != "" {
					fail("%s", msg)
				}
				after()
			},
			"Release": func(rt *rapid.T) {
				tok := drawTok(rt)
				err := drawB(rt).Release(ctx, id, tok)
				if held := m.drop(tok); held && err != nil {
					fail("Release(%s), a holder: %v", tok, err)
				} else if !held && !errors.Is(err, backend.ErrNotHeld) && (err != nil || !m.released[tok]) {
					fail("Release(%s), no holder: %v, want ErrNotHeld", tok, err)
				} else if held {
					m.released[tok] = true
				}
				m.settle()
				after()
			},
			"Leave": func(rt *rapid.T) {
				tok := drawTok(rt)
				if err := drawB(rt).Leave(ctx, id, tok); err != nil {
					fail("Leave(%s): %v", tok, err)
				}
				m.drop(tok)
				if i := m.pos(tok); i >= 0 {
					m.queue = slices.Delete(m.queue, i, i+1)
					delete(m.tickets, tok)
				}
				m.settle()
				after()
			},
			"Heartbeat": func(rt *rapid.T) {
				tok := drawTok(rt)
				queued := m.pos(tok) >= 0
				hb, err := drawB(rt).Heartbeat(ctx, []backend.Waiter{{ID: id, Token: tok}}, longTTL)
				if err != nil || len(hb) != 1 {
					fail("Heartbeat(%s): %+v, %v", tok, hb, err)
				}
				if !queued && hb[0].Queued {
					fail("Heartbeat(%s), not queued: reported queued", tok)
				}
				if queued && !hb[0].Queued {
					fail("Heartbeat(%s), queued: reported not queued", tok)
				}
				after()
			},
		})
	})
}

// ---- shared-exclusive ----

// sharedExclusive: two shared holders; an exclusive request waits for
// both to go (one release is not enough), and while it holds, no shared
// or exclusive request is granted.
func sharedExclusive(e *env) {
	e.skipNoShare()
	const capacity = 3
	ra, rb := e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	id := e.id()
	s1, s2 := e.token("s1"), e.token("s2")
	for _, t := range []string{s1, s2} {
		if g := e.grant(ra, sreq(id, t, capacity, 1, false)); !g.Acquired {
			e.fatalf("a shared request (1 of %d permits), beside another or alone: %+v, want granted", capacity, g)
		}
	}
	x := e.queueShared("X (exclusive)", sreq(id, e.token("x"), capacity, capacity, true))
	if g := e.grant(rb, sreq(id, e.token("x2"), capacity, capacity, false)); g.Acquired {
		e.errorf("an exclusive request beside two shared holders: granted (fence %d)", g.Fence)
	}
	e.mustStep("Release", ra.Release(ctx, id, s1))
	e.notLetIn(x, "one shared holder is left; an exclusive lease waits for every one")
	e.mustStep("Release", ra.Release(ctx, id, s2))
	e.letIn("the last shared holder's release", x)
	for _, p := range []int{1, capacity - 1, capacity} {
		tok := e.token("other")
		if g := e.grant(rb, sreq(id, tok, capacity, p, false)); g.Acquired {
			e.errorf("a request of %d of %d permits while an exclusive lease is held: granted (fence %d)", p, capacity, g.Fence)
			_ = rb.Release(ctx, id, tok)
		} else if g.HolderTTL <= 0 {
			e.errorf("a request refused while an exclusive lease is held: HolderTTL %v, want the lease's remaining TTL", g.HolderTTL)
		}
	}
	e.mustStep("Release", x.b.Release(ctx, id, x.req.Token))
}

// ---- shared-fifo-batch ----

// sharedFIFOBatch: X holds exclusively; S1 and S2 (shared) queue, then X2
// (exclusive), then S3 (shared). X's release lets S1 and S2 in, in that
// one step (each its grant, with hand-off; each its wake-up before either
// runs a step, without). S3 is not granted although its permits fit: X2
// is ahead. S1's and S2's releases let X2 in, and X2's lets S3 in.
func sharedFIFOBatch(e *env) {
	e.skipNoShare()
	const capacity = 3
	ra := e.backend()
	ctx := e.ctx(time.Minute)
	id := e.id()
	x := e.token("x")
	gx := e.grant(ra, sreq(id, x, capacity, capacity, false))
	if !gx.Acquired {
		e.fatalf("an exclusive request on a free id: %+v", gx)
	}
	s1 := e.queueShared("S1", sreq(id, e.token("s1"), capacity, 1, true))
	s2 := e.queueShared("S2", sreq(id, e.token("s2"), capacity, 1, true))
	x2 := e.queueShared("X2 (exclusive)", sreq(id, e.token("x2"), capacity, capacity, true))
	s3 := e.queueShared("S3", sreq(id, e.token("s3"), capacity, 1, true))
	e.mustStep("Release", ra.Release(ctx, id, x))
	wakes := make([]backend.Wake, 2)
	ok := true
	for i, w := range []*sharedWaiter{s1, s2} {
		var got bool
		wakes[i], got = e.awaitLetIn(w, "the exclusive holder's release (S1 and S2 queued behind it)")
		ok = ok && got
	}
	if !ok {
		e.t.FailNow()
	}
	f1 := e.takeLease(s1, wakes[0], "the release")
	f2 := e.takeLease(s2, wakes[1], "the release")
	if f1 <= gx.Fence || f2 <= f1 {
		e.errorf("fences: X %d, then S1 %d and S2 %d; want strictly increasing in ticket order", gx.Fence, f1, f2)
	}
	e.notLetIn(s3, "X2, an exclusive waiter, is ahead of it, even though its permits fit")
	newcomer := e.token("newcomer")
	if g := e.grant(ra, sreq(id, newcomer, capacity, 1, false)); g.Acquired {
		e.errorf("a newcomer's shared request, X2 waiting: granted (fence %d): no request passes a head that does not fit", g.Fence)
		_ = ra.Release(ctx, id, newcomer)
	}
	e.mustStep("Release", s1.b.Release(ctx, id, s1.req.Token))
	e.notLetIn(x2, "S2 still holds a permit")
	e.mustStep("Release", s2.b.Release(ctx, id, s2.req.Token))
	fx2 := e.letIn("the last shared holder's release", x2)
	e.notLetIn(s3, "X2 holds the id exclusively")
	e.mustStep("Release", x2.b.Release(ctx, id, x2.req.Token))
	fs3 := e.letIn("X2's release", s3)
	if fx2[0] <= f2 || fs3[0] <= fx2[0] {
		e.errorf("fences: S2 %d, X2 %d, S3 %d; want strictly increasing", f2, fx2[0], fs3[0])
	}
	e.mustStep("Release", s3.b.Release(ctx, id, s3.req.Token))
}

// ---- shared-fences ----

// sharedFences: leases granted beside each other take distinct, strictly
// increasing fences; a retry (in any process) and an Extend keep the
// fence; Inspect (where there is one) lists the same fences; a grant after
// releases is above every earlier one.
func sharedFences(e *env) {
	e.skipNoShare()
	const capacity = 4
	ra, rb := e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	id := e.id()
	var fences []uint64
	toks := []string{e.token("a"), e.token("b"), e.token("c")}
	byTok := map[string]uint64{}
	for i, t := range toks {
		g := e.grant(ra, sreq(id, t, capacity, 1+i%2, false))
		if !g.Acquired {
			e.fatalf("shared request %d beside the others (capacity %d): %+v, want granted", i+1, capacity, g)
		}
		if n := len(fences); n > 0 && g.Fence <= fences[n-1] {
			e.errorf("a lease granted beside live holders: fence %d after %v: every grant takes a new, greater fence", g.Fence, fences)
		}
		fences = append(fences, g.Fence)
		byTok[t] = g.Fence
	}
	e.mustStep("Extend", ra.Extend(ctx, id, toks[1], longTTL))
	for _, b := range []*spy{ra, rb} {
		for i, t := range toks {
			g := e.grant(b, sreq(id, t, capacity, 1+i%2, false))
			if !g.Acquired || g.Fence != byTok[t] {
				e.errorf("a retried Acquire by holder %d (after an Extend of holder 2): %+v, want its fence %d", i+1, g, byTok[t])
			}
		}
	}
	if ra.inspects() {
		in, err := ra.Inspect(ctx, id, 0)
		var got []uint64
		for _, h := range in.Holders {
			got = append(got, h.Fence)
		}
		if err != nil || !slices.Equal(got, fences) {
			e.errorf("Inspect lists fences %v (%v), want %v", got, err, fences)
		}
	}
	// Through the queue: an exclusive waiter, let in once all release.
	x := e.queueShared("X (exclusive)", sreq(id, e.token("x"), capacity, capacity, true))
	for _, t := range toks {
		e.mustStep("Release", ra.Release(ctx, id, t))
	}
	fx := e.letIn("the releases of every shared holder", x)[0]
	if fx <= fences[len(fences)-1] {
		e.errorf("the exclusive waiter's fence %d after %v: not above every earlier one", fx, fences)
	}
	e.mustStep("Release", x.b.Release(ctx, id, x.req.Token))
	d := e.token("d")
	if g := e.grant(rb, sreq(id, d, capacity, 1, false)); !g.Acquired || g.Fence <= fx {
		e.errorf("a grant after every lease went: %+v, want a fence above %d", g, fx)
	}
	e.mustStep("Release", rb.Release(ctx, id, d))
}

// ---- shared-waiter-release ----

// sharedWaiterRelease: A holds 1 of 3 permits; X (exclusive) waits, and
// S1 and S2 (1 each) behind it. Removing X lets S1 and S2 in, in the one
// step: X's Leave (a cancel, or a queue timeout), and the purge of X once
// it stopped heartbeating, by S2's Heartbeat or by a newcomer's Acquire.
func sharedWaiterRelease(e *env) {
	e.skipNoShare()
	const (
		capacity = 3
		deadTTL  = 300 * time.Millisecond
	)
	ctx := e.ctx(time.Minute)
	for _, how := range []string{"X's Leave", "X's purge by S2's Heartbeat", "X's purge by a newcomer's Acquire"} {
		ra := e.backend()
		id := e.id()
		a := e.token("a")
		if g := e.grant(ra, sreq(id, a, capacity, 1, false)); !g.Acquired {
			e.fatalf("a shared request on a free id: %+v", g)
		}
		xr := sreq(id, e.token("x"), capacity, capacity, true)
		if how != "X's Leave" {
			xr.WaiterTTL = deadTTL
		}
		x := e.queueShared("X (exclusive)", xr)
		queuedAt := time.Now()
		s1 := e.queueShared("S1", sreq(id, e.token("s1"), capacity, 1, true))
		s2 := e.queueShared("S2", sreq(id, e.token("s2"), capacity, 1, true))
		e.notLetIn(s1, "X, which does not fit, is ahead")
		switch how {
		case "X's Leave":
			e.mustStep("Leave", x.b.Leave(ctx, id, x.req.Token))
		case "X's purge by S2's Heartbeat":
			e.letPass(queuedAt, deadTTL+expiryMargin)
			hb, err := s2.b.Heartbeat(ctx, []backend.Waiter{{ID: id, Token: s2.req.Token}}, longTTL)
			if err != nil || len(hb) != 1 || !hb[0].Queued {
				e.fatalf("S2's Heartbeat: %+v, %v; want queued", hb, err)
			}
		default:
			e.letPass(queuedAt, deadTTL+expiryMargin)
			n := e.token("newcomer")
			if g := e.grant(ra, sreq(id, n, capacity, capacity, false)); g.Acquired {
				e.errorf("a newcomer's exclusive request, A holding: granted (fence %d)", g.Fence)
			}
		}
		e.letIn(how+" (X, the exclusive head, blocked S1 and S2)", s1, s2)
		for _, w := range []*sharedWaiter{s1, s2} {
			e.mustStep("Release", w.b.Release(ctx, id, w.req.Token))
		}
		e.mustStep("Release", ra.Release(ctx, id, a))
		e.mustStep("Leave", x.b.Leave(ctx, id, x.req.Token))
	}
}

// ---- shared-retry ----

// sharedRetry: a holder's retried Acquire, in its process, another one and
// a batch, reports its lease (fence, remaining TTL); a waiter's retry
// keeps its ticket; Leave by a holder releases its lease (the waiter
// behind is let in); a lease granted by hand-off to a waiter is released
// by the waiter's Leave.
func sharedRetry(e *env) {
	e.skipNoShare()
	const capacity = 2
	ra, rb := e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	id := e.id()
	a, b := e.token("a"), e.token("b")
	ga := e.grant(ra, sreq(id, a, capacity, 1, false))
	gb := e.grant(rb, sreq(id, b, capacity, 1, false))
	if !ga.Acquired || !gb.Acquired {
		e.fatalf("two shared requests of 1 of %d permits: %+v, %+v; want both granted", capacity, ga, gb)
	}
	check := func(what string, g backend.Grant, want backend.Grant) {
		e.t.Helper()
		if !g.Acquired || g.Fence != want.Fence || g.TTL <= 0 || g.TTL > longTTL {
			e.errorf("%s: %+v, want its lease: fence %d, the remaining TTL in (0, %v]", what, g, want.Fence, longTTL)
		}
	}
	check("A's retried Acquire", e.grant(ra, sreq(id, a, capacity, 1, true)), ga)
	check("A's retried Acquire in another process", e.grant(rb, sreq(id, a, capacity, 1, false)), ga)
	bg, err := fallback.AcquireBatch(ctx, rb, []backend.AcquireRequest{sreq(id, b, capacity, 1, false), sreq(id, a, capacity, 1, false)})
	if err != nil || len(bg) != 2 || bg[0].Err != nil || bg[1].Err != nil {
		e.fatalf("AcquireBatch of two retries: %+v, %v", bg, err)
	}
	check("B's retry in AcquireBatch", bg[0].Grant, gb)
	check("A's retry in AcquireBatch", bg[1].Grant, ga)
	w := e.queueShared("W (exclusive)", sreq(id, e.token("w"), capacity, capacity, true))
	t1 := w.b.tickets(id, w.req.Token)
	if g := e.grant(w.b, w.req); g.Acquired || !g.Queued || len(t1) == 0 || g.Ticket != t1[0] {
		e.errorf("W's retried enqueue: %+v, want queued with its ticket %v", g, t1)
	}
	e.mustStep("Leave", ra.Leave(ctx, id, a))
	if err := ra.Release(ctx, id, a); !errors.Is(err, backend.ErrNotHeld) {
		e.errorf("Release after A's Leave: %v, want ErrNotHeld (Leave releases the lease)", err)
	}
	e.notLetIn(w, "B still holds a permit")
	e.mustStep("Leave", rb.Leave(ctx, id, b))
	wk, ok := e.awaitLetIn(w, "the holders' Leave")
	if !ok {
		e.t.FailNow()
	}
	if wk.Grant != nil {
		// Granted by hand-off: W's Leave (a cancel that raced its grant)
		// releases the lease.
		e.mustStep("Leave", w.b.Leave(ctx, id, w.req.Token))
	} else {
		e.takeLease(w, wk, "the holders' Leave")
		e.mustStep("Leave", w.b.Leave(ctx, id, w.req.Token))
	}
	n := e.token("n")
	if g := e.grant(ra, sreq(id, n, capacity, capacity, false)); !g.Acquired {
		e.errorf("an exclusive request after every lease was left: %+v, want granted", g)
	} else {
		e.mustStep("Release", ra.Release(ctx, id, n))
	}
}

// ---- shared-capacity-conflict ----

// sharedCapacityConflict: requests of another capacity (a mutex's 0 and
// 1, other shared capacities) on a shared id that is held, or only has a
// waiter, and shared requests on a held mutex, get ErrCapacity (alone and
// in a batch, in their place) and change nothing; once the id is idle, it
// takes the capacity of the next request.
func sharedCapacityConflict(e *env) {
	e.skipNoShare()
	ra, rb := e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	id := e.id()
	a := e.token("a")
	ga := e.grant(ra, sreq(id, a, 3, 1, false))
	if !ga.Acquired {
		e.fatalf("a shared request on a free id: %+v", ga)
	}
	w := e.queueShared("W (exclusive)", sreq(id, e.token("w"), 3, 3, true))
	var before backend.Inspection
	if ra.inspects() {
		var err error
		if before, err = ra.Inspect(ctx, id, 10); err != nil {
			e.fatalf("Inspect: %v", err)
		}
	}
	conflict := func(what string, r backend.AcquireRequest) {
		e.t.Helper()
		g, err := rb.Acquire(ctx, r)
		if !errors.Is(err, backend.ErrCapacity) || g.Acquired || g.Queued {
			e.errorf("%s: %+v, %v; want ErrCapacity", what, g, err)
		}
		hb, herr := rb.Heartbeat(ctx, []backend.Waiter{{ID: r.ID, Token: r.Token}}, longTTL)
		if herr != nil || len(hb) != 1 || hb[0].Queued {
			e.errorf("%s, then its Heartbeat: %+v, %v; want not queued (nothing enqueued)", what, hb, herr)
		}
	}
	for _, c := range []struct{ capacity, permits int }{{0, 0}, {1, 0}, {2, 1}, {4, 1}} {
		r := sreq(id, e.token("other"), c.capacity, c.permits, true)
		conflict(fmt.Sprintf("a request of capacity %d on an id of capacity 3 held and waited for", c.capacity), r)
		bg, err := fallback.AcquireBatch(ctx, rb, []backend.AcquireRequest{r, sreq(id, a, 3, 1, false)})
		if err != nil || len(bg) != 2 || !errors.Is(bg[0].Err, backend.ErrCapacity) || bg[1].Err != nil || !bg[1].Acquired {
			e.errorf("AcquireBatch of a request of capacity %d and the holder's retry: %+v, %v; want ErrCapacity in place 0, the lease in place 1", c.capacity, bg, err)
		}
	}
	if ra.inspects() {
		after, err := ra.Inspect(ctx, id, 10)
		if err != nil || !equalInspection(before, after) {
			e.errorf("Inspect before the refused requests %+v, after %+v (%v): ErrCapacity changes nothing", before, after, err)
		}
	}
	if g := e.grant(ra, sreq(id, a, 3, 1, false)); !g.Acquired || g.Fence != ga.Fence {
		e.errorf("the holder's retry after the refused requests: %+v, want its lease (fence %d)", g, ga.Fence)
	}
	// W, let in by A's release, holds (with hand-off) or is a live
	// waiter (without): the capacity stays either way.
	e.mustStep("Release", ra.Release(ctx, id, a))
	conflict("a mutex request once W alone is left (holding, or queued and woken)", backend.AcquireRequest{ID: id, Token: e.token("m"), TTL: longTTL, Wait: true, WaiterTTL: longTTL})
	if wk, ok := e.awaitLetIn(w, "the holder's release"); ok {
		e.takeLease(w, wk, "the holder's release")
	}
	e.mustStep("Release", w.b.Release(ctx, id, w.req.Token))
	// Idle: the capacity is forgotten; a mutex now, then another capacity.
	m := e.token("m")
	if g := e.grant(ra, backend.AcquireRequest{ID: id, Token: m, TTL: longTTL}); !g.Acquired {
		e.errorf("a mutex request once the shared id is idle: %+v, want granted (the capacity goes with the id's state)", g)
	} else {
		conflict("a shared request on a held mutex", sreq(id, e.token("s"), 2, 1, true))
		e.mustStep("Release", ra.Release(ctx, id, m))
	}
	f := e.token("f")
	if g := e.grant(rb, sreq(id, f, 5, 2, false)); !g.Acquired {
		e.errorf("a request of capacity 5 once the id is idle: %+v, want granted", g)
	} else {
		e.mustStep("Release", rb.Release(ctx, id, f))
	}
}

// equalInspection compares two Inspections of the same state, but for
// the TTLs and deadlines, which run down.
func equalInspection(a, b backend.Inspection) bool {
	strip := func(in backend.Inspection) backend.Inspection {
		in.TTL = 0
		in.Holders = slices.Clone(in.Holders)
		for i := range in.Holders {
			in.Holders[i].TTL = 0
		}
		in.Waiters = slices.Clone(in.Waiters)
		for i := range in.Waiters {
			in.Waiters[i].Deadline, in.Waiters[i].QueuedFor = 0, 0
		}
		return in
	}
	a, b = strip(a), strip(b)
	return a.ID == b.ID && a.Held == b.Held && a.Fence == b.Fence && a.Holder == b.Holder && a.Capacity == b.Capacity &&
		slices.Equal(a.Holders, b.Holders) && a.QueueLen == b.QueueLen && slices.Equal(a.Waiters, b.Waiters)
}

// ---- shared-inspect ----

// sharedInspect: A (1 permit) and B (2) hold a shared id of capacity 4,
// W (4) waits: Inspect lists A and B in fence order with their permits,
// fingerprints and TTLs, the capacity, B as Held/Fence/Holder, and W with
// its permits. A mutex reports no capacity, no Holders, and waiters with
// 0 permits.
func sharedInspect(e *env) {
	e.skipNoShare()
	ra := e.backend()
	if !ra.inspects() {
		e.skipf("the backend is no backend.Inspector (an optional capability)")
	}
	ctx := e.ctx(time.Minute)
	id := e.id()
	a, b := e.token("a"), e.token("b")
	ga := e.grant(ra, sreq(id, a, 4, 1, false))
	gb := e.grant(ra, sreq(id, b, 4, 2, false))
	if !ga.Acquired || !gb.Acquired {
		e.fatalf("two shared requests (1 and 2 of 4 permits): %+v, %+v; want both granted", ga, gb)
	}
	w := e.queueShared("W (exclusive)", sreq(id, e.token("w"), 4, 4, true))
	in, err := ra.Inspect(ctx, id, 10)
	if err != nil {
		e.fatalf("Inspect: %v", err)
	}
	type h struct {
		fence   uint64
		holder  string
		permits int
	}
	var got []h
	for _, x := range in.Holders {
		got = append(got, h{x.Fence, x.Holder, x.Permits})
		if x.TTL <= 0 || x.TTL > longTTL {
			e.errorf("Inspect: holder %s's TTL %v, want in (0, %v]", x.Holder, x.TTL, longTTL)
		}
	}
	want := []h{{ga.Fence, backend.Fingerprint(a), 1}, {gb.Fence, backend.Fingerprint(b), 2}}
	if !slices.Equal(got, want) {
		e.errorf("Inspect lists holders %+v, want %+v (fence order, fingerprints, permits)", got, want)
	}
	if in.Capacity != 4 || !in.Held || in.Fence != gb.Fence || in.Holder != backend.Fingerprint(b) || in.TTL <= 0 {
		e.errorf("Inspect: capacity %d, held %v, fence %d, holder %s, TTL %v; want capacity 4 and the lease granted last (fence %d, %s)",
			in.Capacity, in.Held, in.Fence, in.Holder, in.TTL, gb.Fence, backend.Fingerprint(b))
	}
	if in.QueueLen != 1 || len(in.Waiters) != 1 || in.Waiters[0].Permits != 4 || in.Waiters[0].Token != backend.Fingerprint(w.req.Token) {
		e.errorf("Inspect: queue length %d, waiters %+v; want W alone, with 4 permits", in.QueueLen, in.Waiters)
	}
	e.mustStep("Leave", w.b.Leave(ctx, id, w.req.Token))
	e.mustStep("Release", ra.Release(ctx, id, a))
	e.mustStep("Release", ra.Release(ctx, id, b))
	// A mutex.
	mid, m, q := e.id(), e.token("m"), e.token("q")
	e.grant(ra, backend.AcquireRequest{ID: mid, Token: m, TTL: longTTL})
	e.grant(ra, backend.AcquireRequest{ID: mid, Token: q, TTL: longTTL, Wait: true, WaiterTTL: longTTL})
	in, err = ra.Inspect(ctx, mid, 10)
	if err != nil || in.Capacity != 0 || in.Holders != nil || !in.Held || len(in.Waiters) != 1 || in.Waiters[0].Permits != 0 {
		e.errorf("Inspect of a mutex: %+v, %v; want capacity 0, no Holders, the waiter with 0 permits", in, err)
	}
	e.mustStep("Leave", ra.Leave(ctx, mid, q))
	e.mustStep("Release", ra.Release(ctx, mid, m))
}
