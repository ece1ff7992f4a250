package conformance

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"time"

	"pgregory.net/rapid"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// lockModel is the plain model of one id: who holds it, the last fence,
// and the queue of tokens in ticket order. TTLs are long, so nothing
// expires while rapid runs its steps.
type lockModel struct {
	holder    string
	fence     uint64 // the current (or last) holder's fence
	lastFence uint64 // the highest fence granted on the id
	// released holds the tokens that released the id; a backend may answer
	// nil to a Release by one of them again (a resent release), or
	// ErrNotHeld.
	released   map[string]bool
	queue      []string
	tickets    map[string]uint64
	lastTicket uint64
	// handsOff: the backend grants a freed lock to the head (HandOffer).
	handsOff bool
}

// settle applies a direct hand-off, when the backend hands off: a free
// lock with a queue goes to its head, with a fence the model does not see
// (0 until a retry by the holder reports it).
func (m *lockModel) settle() {
	if m.handsOff && m.holder == "" && len(m.queue) > 0 {
		m.holder, m.fence = m.queue[0], 0
		m.dequeue(m.holder)
	}
}

func (m *lockModel) queued(tok string) bool { return slices.Contains(m.queue, tok) }

func (m *lockModel) dequeue(tok string) {
	if i := slices.Index(m.queue, tok); i >= 0 {
		m.queue = slices.Delete(m.queue, i, i+1)
		delete(m.tickets, tok)
	}
}

// leave applies a Leave of tok: out of the queue, and no longer the
// holder.
func (m *lockModel) leave(tok string) {
	m.dequeue(tok)
	if m.holder == tok {
		m.holder = ""
	}
}

func (m *lockModel) String() string {
	return fmt.Sprintf("{holder %q fence %d queue %q}", m.holder, m.fence, m.queue)
}

// acquire applies one Acquire step to the model and checks the backend's
// grant against it; it returns a description of the mismatch, or "".
func (m *lockModel) acquire(req backend.AcquireRequest, g backend.Grant, err error) string {
	if err != nil {
		return fmt.Sprintf("Acquire(%s, wait=%v) failed: %v", req.Token, req.Wait, err)
	}
	tok := req.Token
	switch {
	case m.holder == tok && m.fence == 0:
		// The holder by hand-off: its first step reports the fence.
		if !g.Acquired || g.Fence <= m.lastFence {
			return fmt.Sprintf("Acquire(%s) by the head granted by hand-off: %+v, want Acquired with a fence above the last one, %d", tok, g, m.lastFence)
		}
		m.fence, m.lastFence = g.Fence, g.Fence
		return ""
	case m.holder == tok:
		// A retry by the holder: a no-op.
		if !g.Acquired || g.Fence != m.fence {
			return fmt.Sprintf("Acquire(%s) by the holder: %+v, want Acquired with the same fence %d (a retry is a no-op)", tok, g, m.fence)
		}
		if g.TTL <= 0 || g.TTL > req.TTL {
			return fmt.Sprintf("Acquire(%s) by the holder: TTL %v, want the remaining TTL in (0, %v]", tok, g.TTL, req.TTL)
		}
		return ""
	case m.holder == "" && (len(m.queue) == 0 || m.queue[0] == tok):
		if !g.Acquired {
			return fmt.Sprintf("Acquire(%s, wait=%v) with the lock free and the requester first: %+v, want a grant", tok, req.Wait, g)
		}
		if g.Fence <= m.lastFence {
			return fmt.Sprintf("Acquire(%s): new grant with fence %d, want more than the last fence %d", tok, g.Fence, m.lastFence)
		}
		if g.TTL <= 0 || g.TTL > req.TTL {
			return fmt.Sprintf("Acquire(%s): new grant with TTL %v, want %v", tok, g.TTL, req.TTL)
		}
		m.holder, m.fence, m.lastFence = tok, g.Fence, g.Fence
		m.dequeue(tok)
		return ""
	}
	if g.Acquired {
		return fmt.Sprintf("Acquire(%s, wait=%v) granted (fence %d), but the lock is held or others are queued ahead", tok, req.Wait, g.Fence)
	}
	switch {
	case m.holder != "" && g.HolderTTL <= 0:
		return fmt.Sprintf("Acquire(%s) refused on a held lock with HolderTTL %v, want the holder's remaining TTL", tok, g.HolderTTL)
	case m.holder == "" && g.HolderTTL != 0:
		return fmt.Sprintf("Acquire(%s) refused on a free lock (waiters ahead) with HolderTTL %v, want 0", tok, g.HolderTTL)
	}
	switch {
	case m.queued(tok):
		if !g.Queued || g.Ticket != m.tickets[tok] {
			return fmt.Sprintf("Acquire(%s, wait=%v) by a queued requester: %+v, want Queued with its ticket %d", tok, req.Wait, g, m.tickets[tok])
		}
	case req.Wait:
		if !g.Queued {
			return fmt.Sprintf("Acquire(%s, wait) refused but not queued: %+v", tok, g)
		}
		if g.Ticket <= m.lastTicket {
			return fmt.Sprintf("Acquire(%s, wait) enqueued with ticket %d, want more than the last ticket %d", tok, g.Ticket, m.lastTicket)
		}
		m.queue = append(m.queue, tok)
		m.tickets[tok] = g.Ticket
		m.lastTicket = g.Ticket
	default:
		if g.Queued {
			return fmt.Sprintf("Acquire(%s) without wait by a requester that is not queued: reported Queued", tok)
		}
		return ""
	}
	if head := m.queue[0] == tok; g.Head != head {
		return fmt.Sprintf("Acquire(%s): Head=%v, want %v", tok, g.Head, head)
	}
	return ""
}

// model: a rapid state machine straight against backend steps of three
// backends (processes) on the harness's store, compared with lockModel.
func model(e *env) {
	const nb = 3
	bs := make([]*spy, nb)
	for i := range bs {
		bs[i] = e.backend()
	}
	limit := modelTimeLimit()
	ctx := e.ctx(limit)
	sc, _ := e.h.(StateChecker)
	const ttl = time.Minute

	rapid.Check(e.t, func(rt *rapid.T) {
		id := e.id()
		toks := make([]string, 4)
		for i := range toks {
			toks[i] = fmt.Sprintf("model-%s-%d", nonce, i)
		}
		m := &lockModel{tickets: map[string]uint64{}, released: map[string]bool{}, handsOff: fallback.HandsOff(bs[0])}
		fail := func(format string, args ...any) {
			msg := fmt.Sprintf(format, args...)
			if ctx.Err() != nil {
				msg += fmt.Sprintf(" (the model's time limit of %v ran out: it is 5 min per 100 checks x 30 steps, scaled with -rapid.checks and -rapid.steps; a slow store needs fewer checks)", limit)
			}
			rt.Fatalf("%s: %s; model %v", e.contract, msg, m)
		}
		defer func() {
			// Clean up (the store may be shared) and, if the harness can
			// tell, check that nothing is left.
			for _, tok := range toks {
				if err := bs[0].Leave(ctx, id, tok); err != nil {
					rt.Errorf("%s: Leave(%s) at the end: %v", e.contract, tok, err)
				}
			}
			if sc != nil {
				if left := sc.StateLeft(e.t, id); len(left) > 0 {
					rt.Errorf("%s: after every token left, the store still keeps %v", e.contract, left)
				}
			}
		}()
		drawB := func(rt *rapid.T) *spy { return bs[rapid.IntRange(0, nb-1).Draw(rt, "backend")] }
		drawTok := func(rt *rapid.T) string { return rapid.SampledFrom(toks).Draw(rt, "token") }
		drawWaiters := func(rt *rapid.T) []backend.Waiter {
			ws := make([]backend.Waiter, rapid.IntRange(1, 3).Draw(rt, "n"))
			for i := range ws {
				ws[i] = backend.Waiter{ID: id, Token: drawTok(rt)}
			}
			return ws
		}
		drawReq := func(rt *rapid.T) backend.AcquireRequest {
			return backend.AcquireRequest{ID: id, Token: drawTok(rt), TTL: ttl, Wait: rapid.Bool().Draw(rt, "wait"), WaiterTTL: ttl}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"Acquire": func(rt *rapid.T) {
				req := drawReq(rt)
				g, err := drawB(rt).Acquire(ctx, req)
				if msg := m.acquire(req, g, err); msg != "" {
					fail("%s", msg)
				}
			},
			"AcquireBatch": func(rt *rapid.T) {
				n := rapid.IntRange(1, 3).Draw(rt, "n")
				reqs := make([]backend.AcquireRequest, n)
				for i := range reqs {
					reqs[i] = drawReq(rt)
				}
				res, err := fallback.AcquireBatch(ctx, drawB(rt), reqs)
				if err != nil || len(res) != n {
					fail("AcquireBatch of %d: %d results, %v", n, len(res), err)
				}
				for i, r := range res {
					if msg := m.acquire(reqs[i], r.Grant, r.Err); msg != "" {
						fail("AcquireBatch request %d: %s", i, msg)
					}
				}
			},
			"Release": func(rt *rapid.T) {
				tok := drawTok(rt)
				err := drawB(rt).Release(ctx, id, tok)
				switch {
				case m.holder == tok:
					if err != nil {
						fail("Release(%s) by the holder: %v", tok, err)
					}
					m.holder = ""
					m.released[tok] = true
					m.settle()
				case m.released[tok] && err == nil:
					// Allowed: the same release again (checklist item 3).
				case !errors.Is(err, backend.ErrNotHeld):
					fail("Release(%s) by a non-holder: %v, want ErrNotHeld", tok, err)
				}
			},
			"Extend": func(rt *rapid.T) {
				tok := drawTok(rt)
				err := drawB(rt).Extend(ctx, id, tok, ttl)
				if m.holder == tok {
					if err != nil {
						fail("Extend(%s) by the holder: %v", tok, err)
					}
				} else if !errors.Is(err, backend.ErrNotHeld) {
					fail("Extend(%s) by a non-holder: %v, want ErrNotHeld", tok, err)
				}
			},
			"Leave": func(rt *rapid.T) {
				tok := drawTok(rt)
				if err := drawB(rt).Leave(ctx, id, tok); err != nil {
					fail("Leave(%s): %v", tok, err)
				}
				m.leave(tok)
				m.settle()
			},
			"LeaveBatch": func(rt *rapid.T) {
				ws := drawWaiters(rt)
				if err := fallback.LeaveBatch(ctx, drawB(rt), ws); err != nil {
					fail("LeaveBatch: %v", err)
				}
				for _, w := range ws {
					m.leave(w.Token)
					m.settle()
				}
			},
			"Heartbeat": func(rt *rapid.T) {
				ws := drawWaiters(rt)
				res, err := drawB(rt).Heartbeat(ctx, ws, ttl)
				if err != nil || len(res) != len(ws) {
					fail("Heartbeat of %d waiters: %d results, %v", len(ws), len(res), err)
				}
				for i, r := range res {
					tok := ws[i].Token
					want := backend.HeartbeatResult{Queued: m.queued(tok)}
					want.Ready = want.Queued && m.holder == "" && m.queue[0] == tok
					if r != want {
						fail("Heartbeat(%s): %+v, want %+v", tok, r, want)
					}
				}
			},
		})
	})
}

// modelTimeLimit is the time model may take: 5 minutes for rapid's default
// 100 checks of 30 steps, scaled with -rapid.checks and -rapid.steps.
func modelTimeLimit() time.Duration {
	const base = 5 * time.Minute
	checks, steps := flagInt("rapid.checks", 100), flagInt("rapid.steps", 30)
	scale := float64(checks*steps) / (100 * 30)
	return time.Duration(float64(base) * max(scale, 1))
}

// flagInt returns the value of the integer flag name, or def.
func flagInt(name string, def int) int {
	f := flag.Lookup(name)
	if f == nil {
		return def
	}
	n, err := strconv.Atoi(f.Value.String())
	if err != nil || n <= 0 {
		return def
	}
	return n
}
