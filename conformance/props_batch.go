package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/redislocker/lock/backend"
)

// extend-batch (S4, backend.ExtendBatcher or the core's fallback): one
// ExtendBatch of six requests, each checked as Extend would be:
//   - the holders of x and v extend their leases;
//   - an intruder's request on y, which another token holds with a short
//     lease, gets ErrNotHeld and leaves that lease as it was;
//   - a request on a free id and one on a lease that ended get ErrNotHeld,
//     and neither id is taken (Extend never re-creates a lock);
//   - every result is in its request's place, and the failing requests
//     neither fail the call nor skip the requests after them.
func extendBatch(e *env) {
	const short = 3 * time.Second
	const ended = 200 * time.Millisecond
	ra, rb := e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	x, y, z, w, v := e.id(), e.id(), e.id(), e.id(), e.id()
	tx, ty, tw, tv := e.token("x"), e.token("y"), e.token("w"), e.token("v")
	for _, r := range []backend.AcquireRequest{{ID: x, Token: tx, TTL: short}, {ID: y, Token: ty, TTL: short}, {ID: v, Token: tv, TTL: short}} {
		if g := e.grant(ra, r); !g.Acquired {
			e.fatalf("Acquire of a free id: %+v", g)
		}
	}
	if g := e.grant(ra, backend.AcquireRequest{ID: w, Token: tw, TTL: ended}); !g.Acquired {
		e.fatalf("Acquire of a free id: %+v", g)
	}
	e.endLease("expired at its TTL", w, ended, time.Now())
	reqs := []backend.ExtendRequest{
		{ID: x, Token: tx, TTL: longTTL},
		{ID: y, Token: e.token("intruder"), TTL: longTTL},
		{ID: z, Token: e.token("nobody"), TTL: longTTL},
		{ID: w, Token: tw, TTL: longTTL},
		{ID: v, Token: tv, TTL: longTTL},
		{ID: x, Token: e.token("intruder"), TTL: longTTL},
	}
	want := []string{
		"nil: x's holder extends",
		"ErrNotHeld: an intruder on y, which another token holds",
		"ErrNotHeld: a token on a free id",
		"ErrNotHeld: the token of a lease that ended",
		"nil: v's holder extends, after three failed requests",
		"ErrNotHeld: an intruder on x",
	}
	res, err := rb.ExtendBatch(ctx, reqs)
	if err != nil || len(res) != len(reqs) {
		e.fatalf("ExtendBatch of %d requests, some of them failing: %d results, %v; want one per request and no error for the call", len(reqs), len(res), err)
	}
	for i, r := range res {
		holds := i == 0 || i == 4
		if holds && r != nil || !holds && !errors.Is(r, backend.ErrNotHeld) {
			e.errorf("ExtendBatch result %d: %v; want %s (each result in its request's place)", i, r, want[i])
		}
	}
	remaining := func(id, tok string) time.Duration {
		g := e.grant(ra, backend.AcquireRequest{ID: id, Token: tok, TTL: longTTL})
		if !g.Acquired {
			e.fatalf("the holder's retried Acquire of %s after ExtendBatch: %+v; want its lease", id, g)
		}
		return g.TTL
	}
	for _, h := range []struct{ id, tok, what string }{{x, tx, "x"}, {v, tv, "v"}} {
		if left := remaining(h.id, h.tok); left <= short {
			e.errorf("%s's lease after its holder's request in ExtendBatch: %v left; want extended to about %v", h.what, left, longTTL)
		}
	}
	if left := remaining(y, ty); left > short {
		e.errorf("y's lease after an intruder's request on y in ExtendBatch: %v left, more than the %v it was granted: the intruder's request extended another token's lease", left, short)
	}
	for _, id := range []string{z, w} {
		tok := e.token("after")
		g := e.grant(rb, backend.AcquireRequest{ID: id, Token: tok, TTL: longTTL})
		if !g.Acquired {
			e.errorf("another client's Acquire after ExtendBatch asked to extend a lease that does not exist: %+v; want granted (Extend never re-creates a lock)", g)
			continue
		}
		e.mustStep("Release", rb.Release(ctx, id, tok))
	}
	for _, h := range []struct{ id, tok string }{{x, tx}, {y, ty}, {v, tv}} {
		e.mustStep("Release", ra.Release(ctx, h.id, h.tok))
	}
}

// heartbeat-order (checklist item 6): one Heartbeat of waiters of two
// held ids, some queued and some not, refreshes and reports each in its
// request's place: queued ones as queued (not ready, the locks are held),
// the others as not queued.
func heartbeatOrder(e *env) {
	ra, rb := e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	ids := []string{e.id(), e.id()}
	var ws []backend.Waiter
	var queued []bool
	for i, id := range ids {
		h := e.token("holder")
		if g := e.grant(ra, backend.AcquireRequest{ID: id, Token: h, TTL: longTTL}); !g.Acquired {
			e.fatalf("Acquire of a free id: %+v", g)
		}
		defer func() { _ = ra.Release(ctx, id, h) }()
		for j := range 3 {
			tok := e.token(fmt.Sprintf("w%d-%d", i, j))
			in := j != 1
			if in {
				if g := e.grant(rb, backend.AcquireRequest{ID: id, Token: tok, TTL: longTTL, Wait: true, WaiterTTL: longTTL}); !g.Queued {
					e.fatalf("Acquire with Wait on a held id: %+v; want queued", g)
				}
				defer func() { _ = rb.Leave(ctx, id, tok) }()
			}
			ws = append(ws, backend.Waiter{ID: id, Token: tok})
			queued = append(queued, in)
		}
	}
	// Interleave the two ids: a batch is not grouped by id.
	order := []int{0, 1, 3, 4, 5, 2}
	var batch []backend.Waiter
	var want []bool
	for _, i := range order {
		batch = append(batch, ws[i])
		want = append(want, queued[i])
	}
	res, err := rb.Heartbeat(ctx, batch, longTTL)
	if err != nil || len(res) != len(batch) {
		e.fatalf("Heartbeat of %d waiters: %d results, %v; want one per waiter", len(batch), len(res), err)
	}
	for i, r := range res {
		if r.Queued != want[i] || r.Ready {
			e.errorf("Heartbeat result %d (%s, queued: %v): %+v; want Queued=%v, not Ready (each result in its waiter's place)", i, batch[i].Token, want[i], r, want[i])
		}
	}
}
