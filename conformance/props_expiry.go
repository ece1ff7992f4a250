package conformance

import (
	"time"

	"github.com/redislocker/lock/backend"
)

// expiry-handoff (S3, L2, checklist items 1 and 14): a lease ends without
// a release while W and X wait, W first. Whatever step then gives W the
// lock (W's own Acquire, a newcomer's refused Acquire, W's Heartbeat), and
// however the lease ended (at its TTL, or by the harness's Expirer):
//   - W's fence is above every fence the id had before;
//   - W's retried Acquire and Inspect report that same fence, not one the
//     store kept from the lease that ended;
//   - no queue entry of W is left: its Heartbeat reports it not queued,
//     Inspect lists only X, and once W releases, X's next step is granted
//     at once (an entry of W left behind would stall the queue).
func expiryHandoff(e *env) {
	const ttl = 200 * time.Millisecond
	ra, rw, rx, rn := e.backend(), e.backend(), e.backend(), e.backend()
	ctx := e.ctx(time.Minute)
	triggers := []struct {
		name string
		run  func(id, w string)
	}{
		{"W's own Acquire", func(id, w string) {}},
		{"a newcomer's Acquire", func(id, w string) {
			n := e.token("newcomer")
			if g := e.grant(rn, backend.AcquireRequest{ID: id, Token: n, TTL: longTTL}); g.Acquired {
				e.errorf("a newcomer's Acquire after the lease ended, W and X queued: granted (fence %d); want refused (L2)", g.Fence)
				e.mustStep("Release", rn.Release(ctx, id, n))
			}
		}},
		{"W's Heartbeat", func(id, w string) {
			hb, err := rw.Heartbeat(ctx, []backend.Waiter{{ID: id, Token: w}}, longTTL)
			if err != nil || len(hb) != 1 || !hb[0].Queued {
				e.errorf("W's Heartbeat after the lease ended: %+v, %v; want W queued (or granted by this very step)", hb, err)
			}
		}},
	}
	for _, way := range e.expiries() {
		for _, tr := range triggers {
			what := "the lease " + way + ", then " + tr.name
			id := e.id()
			// An earlier holder, so that "every earlier fence" is more
			// than one.
			z := e.token("z")
			gz := e.grant(ra, backend.AcquireRequest{ID: id, Token: z, TTL: longTTL})
			e.mustStep("Release", ra.Release(ctx, id, z))
			a := e.token("a")
			ga := e.grant(ra, backend.AcquireRequest{ID: id, Token: a, TTL: ttl})
			returned := time.Now()
			if !gz.Acquired || !ga.Acquired || ga.Fence <= gz.Fence {
				e.fatalf("%s: two grants of a free id: %+v, %+v; want both, with increasing fences", what, gz, ga)
			}
			w, x := e.token("w"), e.token("x")
			wreq := backend.AcquireRequest{ID: id, Token: w, TTL: longTTL, Wait: true, WaiterTTL: longTTL}
			xreq := backend.AcquireRequest{ID: id, Token: x, TTL: longTTL, Wait: true, WaiterTTL: longTTL}
			if g := e.grant(rw, wreq); !g.Queued || !g.Head {
				e.fatalf("%s: W's Acquire with Wait on a held id: %+v; want queued, head", what, g)
			}
			if g := e.grant(rx, xreq); !g.Queued || g.Head {
				e.fatalf("%s: X's Acquire with Wait behind W: %+v; want queued, not head", what, g)
			}
			e.endLease(way, id, ttl, returned)
			tr.run(id, w)
			gw := e.grant(rw, wreq)
			if !gw.Acquired {
				e.fatalf("%s: W's Acquire, W the head of a lock whose lease ended: %+v; want granted", what, gw)
			}
			if gw.Fence <= ga.Fence {
				e.errorf("%s: W's fence %d is not above the fences before it (%d, %d): fences must strictly increase, also when a lease ends without a release",
					what, gw.Fence, gz.Fence, ga.Fence)
			}
			if g := e.grant(rw, backend.AcquireRequest{ID: id, Token: w, TTL: longTTL}); !g.Acquired || g.Fence != gw.Fence {
				e.errorf("%s: W's retried Acquire: %+v; want its lease with the fence of its grant, %d", what, g, gw.Fence)
			}
			if rw.inspects() {
				in, err := rw.Inspect(ctx, id, 10)
				switch {
				case err != nil:
					e.errorf("%s: Inspect: %v", what, err)
				case !in.Held || in.Fence != gw.Fence || in.Holder != backend.Fingerprint(w):
					e.errorf("%s: Inspect: Held=%v Fence=%d Holder=%s; want W (%s) holding with fence %d", what, in.Held, in.Fence, in.Holder, backend.Fingerprint(w), gw.Fence)
				case in.QueueLen != 1 || len(in.Waiters) != 1 || in.Waiters[0].Token != backend.Fingerprint(x):
					e.errorf("%s: Inspect: QueueLen %d, waiters %+v; want X alone (%s): W's entry must go with its grant", what, in.QueueLen, in.Waiters, backend.Fingerprint(x))
				}
			}
			if hb, err := rw.Heartbeat(ctx, []backend.Waiter{{ID: id, Token: w}}, longTTL); err != nil || len(hb) != 1 || hb[0].Queued || hb[0].Ready {
				e.errorf("%s: W's Heartbeat once W holds the lock: %+v, %v; want not queued: W's entry must go with its grant", what, hb, err)
			}
			if hb, err := rx.Heartbeat(ctx, []backend.Waiter{{ID: id, Token: x}}, longTTL); err != nil || len(hb) != 1 || !hb[0].Queued || hb[0].Ready {
				e.errorf("%s: X's Heartbeat while W holds the lock: %+v, %v; want queued, not ready", what, hb, err)
			}
			e.mustStep("W's Release", rw.Release(ctx, id, w))
			gx := e.grant(rx, xreq)
			if !gx.Acquired {
				e.errorf("%s: X's Acquire right after W released: %+v; want granted at once (an entry of W left in the queue stalls it)", what, gx)
				e.mustStep("Leave", rx.Leave(ctx, id, x))
				continue
			}
			if gx.Fence <= gw.Fence {
				e.errorf("%s: X's fence %d is not above W's %d", what, gx.Fence, gw.Fence)
			}
			e.mustStep("X's Release", rx.Release(ctx, id, x))
		}
	}
}
