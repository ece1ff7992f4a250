package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
)

// sharedReq is a request of tok for permits of id's capacity, with TTLs of
// a minute.
func sharedReq(id, tok string, capacity, permits int, wait bool) backend.AcquireRequest {
	r := request(id, tok, wait)
	r.Capacity, r.Permits = capacity, permits
	return r
}

func acquireShared(t *testing.T, b *Backend, id, tok string, capacity, permits int, wait bool) backend.Grant {
	t.Helper()
	g, err := b.Acquire(ctxT(t), sharedReq(id, tok, capacity, permits, wait))
	if err != nil {
		t.Fatalf("Acquire(%s, %s, %d of %d): %v", id, tok, permits, capacity, err)
	}
	return g
}

func inspect(t *testing.T, b *Backend, id string) backend.Inspection {
	t.Helper()
	in, err := b.Inspect(ctxT(t), id, backend.MaxInspectWaiters)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// holders returns the fingerprints of in's holders, in the order listed.
func holders(in backend.Inspection) []string {
	var out []string
	for _, h := range in.Holders {
		out = append(out, h.Holder)
	}
	return out
}

func fingerprints(toks ...string) []string {
	var out []string
	for _, tok := range toks {
		out = append(out, backend.Fingerprint(tok))
	}
	return out
}

// grants returns the tokens granted by wake-ups in ws, in order, and
// their fences.
func grants(ws []backend.Wake) (toks []string, fences []uint64) {
	for _, w := range ws {
		if w.Grant != nil {
			toks, fences = append(toks, w.Token), append(fences, w.Grant.Fence)
		}
	}
	return toks, fences
}

// Concurrent acquirers in two processes, through the lock package, never
// hold more permits than the capacity together, and every grant has a
// fence of its own; an observer's Inspect never sees more either.
func TestSharedCapacityNeverExceeded(t *testing.T) {
	h := newSchema(t, "locktest_shared_cap", Options{})
	const capacity, workers, rounds = 3, 8, 15
	var lockers []*lock.Locker
	for range 2 {
		l, err := lock.New(h.newBackend(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		lockers = append(lockers, l)
	}
	var used, peak atomic.Int64
	var mu sync.Mutex
	fences := map[uint64]bool{}
	stop := make(chan struct{})
	observed := make(chan error, 1)
	obs := backendOn(t, h)
	go func() { // an observer: the holders Inspect lists fit in the capacity
		defer close(observed)
		for {
			select {
			case <-stop:
				return
			default:
			}
			in, err := obs.Inspect(context.Background(), "sem", 0)
			if err != nil {
				observed <- err
				return
			}
			sum := 0
			for _, hi := range in.Holders {
				sum += hi.Permits
			}
			if sum > capacity || (in.Capacity != 0 && in.Capacity != capacity) {
				observed <- fmt.Errorf("Inspect: holders %+v (capacity %d) take %d permits", in.Holders, in.Capacity, sum)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, workers) // a worker's first error ends it
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[w%2]
			for i := range rounds {
				permits := 1 + (w+i)%capacity
				res, err := l.Acquire(ctxT(t), "sem", time.Minute, &lock.AcquireOptions{Capacity: capacity, Permits: permits})
				if err != nil || !res.Acquired {
					errs <- fmt.Errorf("worker %d round %d: %+v, %v", w, i, res, err)
					return
				}
				n := used.Add(int64(permits))
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				mu.Lock()
				dup := fences[res.Lease.Fence()]
				fences[res.Lease.Fence()] = true
				mu.Unlock()
				var bad error
				switch {
				case dup:
					bad = fmt.Errorf("worker %d round %d: fence %d granted twice", w, i, res.Lease.Fence())
				case n > capacity:
					bad = fmt.Errorf("worker %d round %d: %d permits held together, capacity %d", w, i, n, capacity)
				case rand.IntN(2) == 0: // hold for a round trip, so that others queue
					_, bad = obs.Inspect(ctxT(t), "other", 0)
				}
				used.Add(-int64(permits))
				if err := res.Lease.Release(ctxT(t)); err != nil && bad == nil {
					bad = fmt.Errorf("worker %d round %d: Release: %v", w, i, err)
				}
				if bad != nil {
					errs <- bad
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := <-observed; err != nil {
		t.Error(err)
	}
	t.Logf("peak: %d permits held together", peak.Load())
	if peak.Load() < 2 {
		t.Errorf("at most %d permits were ever held together: the leases never shared the id", peak.Load())
	}
	if in := inspect(t, obs, "sem"); in.Capacity != 0 || in.Held || in.QueueLen != 0 {
		t.Errorf("after every release: %+v, want an idle id, its capacity forgotten", in)
	}
}

// A writer (every permit) waits for every reader that holds the id, and
// holds back the readers that come after it, also a try-acquire that
// would fit; it is granted by the release of the last reader, and the
// reader behind it is told the writer's TTL, then granted by its release.
func TestSharedExclusiveWaitsForReaders(t *testing.T) {
	h := newSchema(t, "locktest_shared_rw", Options{})
	steps, pw, pr := backendOn(t, h), backendOn(t, h), backendOn(t, h)
	ww, wr := subscribe(t, pw, "rw"), subscribe(t, pr, "rw")
	f1 := acquireShared(t, steps, "rw", "r1", 2, 1, false).Fence
	f2 := acquireShared(t, steps, "rw", "r2", 2, 1, false).Fence
	if f2 <= f1 {
		t.Errorf("fences %d then %d, want increasing", f1, f2)
	}
	if g := acquireShared(t, pw, "rw", "writer", 2, 2, true); g.Acquired || !g.Queued || !g.Head || g.HolderTTL <= 0 || g.HolderTTL > time.Minute {
		t.Fatalf("the writer while two readers hold: %+v, want queued head, told a reader's TTL", g)
	}
	if err := steps.Release(ctxT(t), "rw", "r1"); err != nil {
		t.Fatal(err)
	}
	if g := acquireShared(t, pr, "rw", "r3", 2, 1, true); g.Acquired || !g.Queued || g.Head {
		t.Errorf("a reader behind the waiting writer, one permit free: %+v, want queued behind it", g)
	}
	if g := acquireShared(t, steps, "rw", "r4", 2, 1, false); g.Acquired || g.Queued || g.HolderTTL <= 0 {
		t.Errorf("a try-acquire of a reader behind the waiting writer: %+v, want refused", g)
	}
	if got := ww.settled(t, h, pw, "rw"); len(got) != 0 {
		t.Errorf("the writer was woken while a reader holds: %+v", got)
	}
	if err := steps.Release(ctxT(t), "rw", "r2"); err != nil {
		t.Fatal(err)
	}
	gotW := ww.settled(t, h, pw, "rw")
	if len(gotW) != 1 || gotW[0].Token != "writer" || gotW[0].Grant == nil || gotW[0].Grant.Fence <= f2 {
		t.Fatalf("after the last reader's release: %+v, want the grant to the writer", gotW)
	}
	gotR := wr.settled(t, h, pr, "rw")
	if len(gotR) != 1 || gotR[0].Token != "r3" || gotR[0].Grant != nil || gotR[0].HolderTTL <= 0 || gotR[0].HolderTTL > time.Minute {
		t.Errorf("the reader behind the writer: %+v, want told the writer's TTL", gotR)
	}
	in := inspect(t, steps, "rw")
	if !slices.Equal(holders(in), fingerprints("writer")) || in.Holders[0].Permits != 2 || in.Capacity != 2 ||
		in.Fence != gotW[0].Grant.Fence || in.QueueLen != 1 || in.Waiters[0].Permits != 1 {
		t.Errorf("Inspect with the writer holding and r3 waiting: %+v", in)
	}
	if err := pw.Release(ctxT(t), "rw", "writer"); err != nil {
		t.Fatal(err)
	}
	if gotR = wr.settled(t, h, pr, "rw")[1:]; len(gotR) != 1 || gotR[0].Token != "r3" || gotR[0].Grant == nil || gotR[0].Grant.Fence <= gotW[0].Grant.Fence {
		t.Errorf("after the writer's release: %+v, want the grant to r3", gotR)
	}
}

// One release grants every head that fits, in ticket order, each with its
// own fence and wake-up, and stops at the first that does not fit: it is
// told the TTL of the lease that ends first, and holds back a later one
// that would fit. Inspect lists the holders in fence order.
func TestSharedBatchedGrant(t *testing.T) {
	h := newSchema(t, "locktest_shared_batch", Options{})
	steps, pw := backendOn(t, h), backendOn(t, h)
	w := subscribe(t, pw, "sem")
	x := acquireShared(t, steps, "sem", "x", 3, 3, false)
	want := []struct {
		tok     string
		permits int
	}{{"a", 1}, {"b", 1}, {"c", 1}, {"d", 2}, {"e", 1}}
	for _, r := range want {
		if g := acquireShared(t, pw, "sem", r.tok, 3, r.permits, true); g.Acquired || !g.Queued {
			t.Fatalf("%s behind an exclusive holder: %+v", r.tok, g)
		}
	}
	if in := inspect(t, steps, "sem"); in.QueueLen != 5 || !slices.EqualFunc(in.Waiters, want, func(wi backend.WaiterInfo, r struct {
		tok     string
		permits int
	}) bool {
		return wi.Token == backend.Fingerprint(r.tok) && wi.Permits == r.permits
	}) {
		t.Errorf("Inspect of the queue: %+v, want a b c d e with their permits", in.Waiters)
	}
	if err := steps.Release(ctxT(t), "sem", "x"); err != nil {
		t.Fatal(err)
	}
	got := w.settled(t, h, pw, "sem")
	toks, fences := grants(got)
	if !slices.Equal(toks, []string{"a", "b", "c"}) || fences[0] <= x.Fence || fences[1] <= fences[0] || fences[2] <= fences[1] {
		t.Fatalf("one release's grants: %v (fences %v), want a, b, c with increasing fences above %d; wake-ups %+v", toks, fences, x.Fence, got)
	}
	var told []backend.Wake
	for _, wk := range got {
		if wk.Grant == nil {
			told = append(told, wk)
		}
	}
	if len(told) != 1 || told[0].Token != "d" || told[0].HolderTTL <= 0 || told[0].HolderTTL > time.Minute {
		t.Errorf("the head that does not fit: %+v, want only d told the first lease's end", told)
	}
	in := inspect(t, steps, "sem")
	if !slices.Equal(holders(in), fingerprints("a", "b", "c")) || in.Capacity != 3 || !in.Held ||
		in.Fence != fences[2] || in.Holder != backend.Fingerprint("c") || in.TTL <= 0 || in.QueueLen != 2 {
		t.Errorf("Inspect after the batched grant: %+v, want a, b, c in fence order, the last one as Holder", in)
	}
	for i, hi := range in.Holders {
		if hi.Fence != fences[i] || hi.Permits != 1 || hi.TTL <= 0 || hi.TTL > time.Minute {
			t.Errorf("holder %d: %+v, want fence %d, 1 permit", i, hi, fences[i])
		}
	}
	// a's release frees one permit: d (2) does not fit yet, nor does e
	// (behind it); b's release makes room for d, and e does not fit.
	if err := pw.Release(ctxT(t), "sem", "a"); err != nil {
		t.Fatal(err)
	}
	if got = w.settled(t, h, pw, "sem")[len(got):]; len(got) != 0 {
		t.Errorf("after a's release: %+v, want no wake-up (d does not fit, e is behind it)", got)
	}
	if err := pw.Release(ctxT(t), "sem", "b"); err != nil {
		t.Fatal(err)
	}
	all := w.settled(t, h, pw, "sem")
	got = all[len(all)-2:]
	if toks, _ := grants(got); !slices.Equal(toks, []string{"d"}) || got[1].Token != "e" || got[1].HolderTTL <= 0 {
		t.Errorf("after b's release: %+v, want the grant to d and e told", got)
	}
	if in := inspect(t, steps, "sem"); !slices.Equal(holders(in), fingerprints("c", "d")) || in.QueueLen != 1 {
		t.Errorf("Inspect: %+v, want c and d holding, e waiting", in)
	}
}

// A request with another capacity (a mutex's, or another shared one) is
// refused with ErrCapacity while the id has a holder or a waiter, and
// changes nothing; once the id is idle (released, or its leases ended
// with no step since), its capacity is forgotten.
func TestSharedCapacityMismatch(t *testing.T) {
	h := newSchema(t, "locktest_shared_mismatch", Options{})
	b := backendOn(t, h)
	held := acquireShared(t, b, "s", "h1", 3, 2, false)
	if !held.Acquired || held.TTL != time.Minute {
		t.Fatalf("a shared grant: %+v", held)
	}
	if g := acquireShared(t, b, "s", "h1", 3, 2, true); !g.Acquired || g.Fence != held.Fence || g.TTL > time.Minute || g.Queued {
		t.Errorf("a retried acquire by the holder: %+v, want its lease as it is (fence %d)", g, held.Fence)
	}
	// Held only: refused.
	for _, r := range []backend.AcquireRequest{request("s", "m", false), sharedReq("s", "o", 4, 1, false)} {
		if g, err := b.Acquire(ctxT(t), r); !errors.Is(err, backend.ErrCapacity) || g.Acquired {
			t.Errorf("%+v on an id of capacity 3 with a holder and no waiter: %+v, %v; want ErrCapacity", r, g, err)
		}
	}
	acquireShared(t, b, "s", "w1", 3, 3, true)
	before := slices.Sorted(slices.Values(h.StateLeft(t, "s")))
	for _, r := range []backend.AcquireRequest{
		request("s", "m", true), request("s", "m", false), request("s", "h1", true),
		sharedReq("s", "o", 4, 1, true), sharedReq("s", "o", 2, 1, false), sharedReq("s", "w1", 4, 1, true),
	} {
		if g, err := b.Acquire(ctxT(t), r); !errors.Is(err, backend.ErrCapacity) || g.Acquired || g.Queued {
			t.Errorf("%+v on an id of capacity 3: %+v, %v; want ErrCapacity", r, g, err)
		}
		res, err := b.AcquireBatch(ctxT(t), []backend.AcquireRequest{r, sharedReq("s", "t", 3, 1, false)})
		if err != nil || !errors.Is(res[0].Err, backend.ErrCapacity) || res[1].Err != nil {
			t.Errorf("%+v in a batch: %+v, %v; want ErrCapacity in its Err only", r, res, err)
		}
	}
	if after := slices.Sorted(slices.Values(h.StateLeft(t, "s"))); !slices.Equal(after, before) {
		t.Errorf("the refused requests changed the state: %v, then %v", before, after)
	}
	// Only a waiter left: still in use.
	if err := b.Release(ctxT(t), "s", "h1"); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctxT(t), "s", "w1"); err != nil { // w1 was granted by h1's release
		t.Fatal(err)
	}
	if in := inspect(t, b, "s"); in.Capacity != 0 || in.Held || in.Holders != nil {
		t.Errorf("an idle shared id: %+v, want no capacity", in)
	}
	// Forgotten: a mutex takes the id, then, once it is released, capacity 5.
	m := acquire(t, b, "s", "m", false)
	if !m.Acquired || m.Fence <= held.Fence {
		t.Fatalf("a mutex on the idle shared id: %+v, want a grant with a fence above %d", m, held.Fence)
	}
	if _, err := b.Acquire(ctxT(t), sharedReq("s", "o", 3, 1, true)); !errors.Is(err, backend.ErrCapacity) {
		t.Errorf("a shared request on a held mutex: %v, want ErrCapacity", err)
	}
	acquire(t, b, "s", "mw", true) // a mutex waiter: the id stays a mutex after the release
	if err := b.Release(ctxT(t), "s", "m"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctxT(t), sharedReq("s", "o", 3, 1, false)); !errors.Is(err, backend.ErrCapacity) {
		t.Errorf("a shared request on a mutex held by its hand-off: %v, want ErrCapacity", err)
	}
	if err := b.Release(ctxT(t), "s", "mw"); err != nil {
		t.Fatal(err)
	}
	if g := acquireShared(t, b, "s", "o", 5, 4, false); !g.Acquired || g.Fence <= m.Fence {
		t.Errorf("capacity 5 on the idle id: %+v", g)
	}
	// A waiter only (the lease it waits for ended, and no step ran since):
	// in use, as the waiter's own request with another capacity finds it.
	acquireShared(t, b, "s", "w2", 5, 5, true)
	h.ExpireNow(t, "s")
	for _, r := range []backend.AcquireRequest{request("s", "w2", true), sharedReq("s", "w2", 2, 1, true)} {
		if g, err := b.Acquire(ctxT(t), r); !errors.Is(err, backend.ErrCapacity) || g.Acquired {
			t.Errorf("%+v with only a waiter of capacity 5 left: %+v, %v; want ErrCapacity", r, g, err)
		}
	}
	if in := inspect(t, b, "s"); in.Capacity != 5 || in.Held || in.QueueLen != 1 || in.Waiters[0].Permits != 5 {
		t.Errorf("Inspect with only a waiter left: %+v", in)
	}
	if g := acquireShared(t, b, "s", "w2", 5, 5, true); !g.Acquired {
		t.Errorf("the waiter's retry, the id free: %+v, want granted", g)
	}
	// Leases that ended with no step since: the id is idle.
	h.ExpireNow(t, "s")
	if g := acquireShared(t, b, "s", "p", 2, 2, false); !g.Acquired {
		t.Errorf("capacity 2 once the capacity-5 lease ended: %+v", g)
	}
	h.ExpireNow(t, "s")
	if g := acquire(t, b, "s", "q", false); !g.Acquired {
		t.Errorf("a mutex once the shared lease ended: %+v", g)
	}
	if in := inspect(t, b, "s"); in.Capacity != 0 || in.Holders != nil || in.Holder != backend.Fingerprint("q") {
		t.Errorf("Inspect of the mutex: %+v", in)
	}
}

// Extend, Release and Leave find the token's lease among the holders and
// change no other; the holder's TTL a refused request is told is that of
// the lease that ends first; a resent Release is answered nil until the
// next grant.
func TestSharedByToken(t *testing.T) {
	h := newSchema(t, "locktest_shared_token", Options{})
	b := backendOn(t, h)
	ga, err := b.Acquire(ctxT(t), backend.AcquireRequest{ID: "s", Token: "a", TTL: 30 * time.Second, Capacity: 2, Permits: 1})
	if err != nil || !ga.Acquired {
		t.Fatal(ga, err)
	}
	gb, err := b.Acquire(ctxT(t), backend.AcquireRequest{ID: "s", Token: "b", TTL: 90 * time.Second, Capacity: 2, Permits: 1})
	if err != nil || !gb.Acquired {
		t.Fatal(gb, err)
	}
	g := acquireShared(t, b, "s", "c", 2, 1, true)
	if g.Acquired || g.HolderTTL > 30*time.Second || g.HolderTTL < 30*time.Second-prompt {
		t.Errorf("a refused request: %+v, want told a's TTL (30s), the first to end", g)
	}
	if err := b.Extend(ctxT(t), "s", "a", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	in := inspect(t, b, "s")
	if len(in.Holders) != 2 || in.Holders[0].TTL <= 90*time.Second || in.Holders[1].TTL > 90*time.Second || in.Holders[0].Fence != ga.Fence {
		t.Errorf("after a's extend: %+v, want a's TTL 2m (fence kept), b's unchanged", in.Holders)
	}
	if g := acquireShared(t, b, "s", "c", 2, 1, true); g.HolderTTL > 90*time.Second || g.HolderTTL < 90*time.Second-prompt {
		t.Errorf("after a's extend: %+v, want told b's TTL (90s), now the first to end", g)
	}
	for _, tok := range []string{"c", "z"} {
		if err := b.Extend(ctxT(t), "s", tok, time.Minute); !errors.Is(err, backend.ErrNotHeld) {
			t.Errorf("Extend by %s, which holds no lease: %v, want ErrNotHeld", tok, err)
		}
		if err := b.Release(ctxT(t), "s", tok); !errors.Is(err, backend.ErrNotHeld) {
			t.Errorf("Release by %s, which holds no lease: %v, want ErrNotHeld", tok, err)
		}
	}
	if res, err := b.Heartbeat(ctxT(t), []backend.Waiter{{ID: "s", Token: "c"}, {ID: "s", Token: "a"}}, time.Minute); err != nil || !res[0].Queued || res[1].Queued {
		t.Errorf("Heartbeat of the waiter c and the holder a: %+v, %v", res, err)
	}
	// b's Leave ends its lease, which grants c.
	if err := b.Leave(ctxT(t), "s", "b"); err != nil {
		t.Fatal(err)
	}
	in = inspect(t, b, "s")
	if !slices.Equal(holders(in), fingerprints("a", "c")) || in.QueueLen != 0 {
		t.Errorf("after b's Leave: %+v, want a and c holding (c granted)", in)
	}
	if err := b.Release(ctxT(t), "s", "c"); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctxT(t), "s", "c"); err != nil {
		t.Errorf("a resent release: %v, want nil", err)
	}
	if err := b.Extend(ctxT(t), "s", "c", time.Minute); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("Extend after the release: %v, want ErrNotHeld", err)
	}
	if in := inspect(t, b, "s"); !slices.Equal(holders(in), fingerprints("a")) || in.Holders[0].TTL <= 90*time.Second {
		t.Errorf("after c's release: %+v, want a alone, its TTL untouched", in)
	}
	if err := b.Leave(ctxT(t), "s", "a"); err != nil {
		t.Fatal(err)
	}
	if left := h.StateLeft(t, "s"); len(left) != 0 {
		t.Errorf("after every lease ended: %v", left)
	}
	var n int
	if err := h.admin.QueryRow(ctxT(t), "SELECT count(*) FROM locktest_shared_token.holders").Scan(&n); err != nil || n != 0 {
		t.Errorf("holder rows left: %d (%v), want none", n, err)
	}
	if g := acquire(t, b, "s", "m", false); !g.Acquired {
		t.Errorf("a mutex once every shared lease ended: %+v", g)
	}
}

// A shared request whose Permits are not 1 to Capacity is refused before
// any I/O, naming the field.
func TestSharedBadPermits(t *testing.T) {
	h := newSchema(t, "locktest_shared_args", Options{})
	b := backendOn(t, h)
	var ae *backend.ArgumentError
	for _, p := range []int{0, -1, 4} {
		if _, err := b.Acquire(ctxT(t), sharedReq("s", "t", 3, p, false)); !errors.As(err, &ae) || ae.Arg != "req.Permits" {
			t.Errorf("Permits %d of 3: %v, want an *ArgumentError for req.Permits", p, err)
		}
		if _, err := b.AcquireBatch(ctxT(t), []backend.AcquireRequest{request("s", "u", false), sharedReq("s", "t", 3, p, false)}); !errors.As(err, &ae) || ae.Arg != "reqs[1].Permits" {
			t.Errorf("Permits %d of 3 in a batch: %v, want an *ArgumentError for reqs[1].Permits", p, err)
		}
	}
	if left := h.StateLeft(t, "s"); len(left) != 0 {
		t.Errorf("refused requests left %v", left)
	}
}

// New migrates a schema made by the version before shared ids
// (testdata/schema_v1.sql) with its leases and queues in place: a lease
// and a waiter made by that version's steps stay, that version's acquire
// keeps working (for a rolling upgrade), and shared ids work. A second
// New drops nothing, so steps running meanwhile never meet a function
// that was dropped.
func TestMigrateFromV1(t *testing.T) {
	h := newSchema(t, "locktest_migrate", Options{})
	v1, err := os.ReadFile("testdata/schema_v1.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.admin.Exec(ctxT(t), strings.ReplaceAll(string(v1), "{{s}}", h.opts.Schema)); err != nil {
		t.Fatalf("the v1 schema: %v", err)
	}
	// v1's acquire: id, token, ttl, wait, waiter ttl (µs), max waiters, purge limit, idle, channel.
	v1Acquire := "SELECT o_acquired, o_fence, o_queued FROM locktest_migrate.acquire($1, $2, 60000000, true, 60000000, 100, 100, 3600000000, 'locktest_migrate_x')"
	var acquired, queued bool
	var fence int64
	if err := h.admin.QueryRow(ctxT(t), v1Acquire, []byte("id"), []byte("holder")).Scan(&acquired, &fence, &queued); err != nil || !acquired {
		t.Fatalf("v1 acquire: %v, %v", acquired, err)
	}
	if err := h.admin.QueryRow(ctxT(t), v1Acquire, []byte("id"), []byte("w")).Scan(&acquired, new(int64), &queued); err != nil || acquired || !queued {
		t.Fatalf("v1 enqueue: %v, %v, %v", acquired, queued, err)
	}
	b := backendOn(t, h) // migrates
	in := inspect(t, b, "id")
	if !in.Held || in.Holder != backend.Fingerprint("holder") || in.Fence != uint64(fence) || in.QueueLen != 1 || in.Waiters[0].Permits != 0 {
		t.Errorf("Inspect after the migration: %+v, want v1's lease (fence %d) and waiter", in, fence)
	}
	var again int64
	if err := h.admin.QueryRow(ctxT(t), v1Acquire, []byte("id"), []byte("holder")).Scan(&acquired, &again, &queued); err != nil || !acquired || again != fence {
		t.Errorf("v1's acquire after the migration, retried by the holder: %v, fence %d, %v; want fence %d", acquired, again, err, fence)
	}
	if err := b.Release(ctxT(t), "id", "holder"); err != nil {
		t.Fatal(err)
	}
	if left := h.StateLeft(t, "id"); !slices.Equal(left, []string{"lease of w"}) {
		t.Errorf("after the release: %v, want v1's waiter granted", left)
	}
	if g := acquireShared(t, b, "sem", "a", 2, 1, false); !g.Acquired {
		t.Errorf("a shared grant after the migration: %+v", g)
	}
	if err := h.admin.QueryRow(ctxT(t), v1Acquire, []byte("sem"), []byte("old")).Scan(&acquired, new(int64), &queued); err == nil || !strings.Contains(err.Error(), "another capacity") {
		t.Errorf("v1's acquire of a shared id: %v, want an error", err)
	}
	oids := func() string {
		var s string
		err := h.admin.QueryRow(ctxT(t), `SELECT string_agg(oid::text, ',' ORDER BY oid) FROM pg_proc
			WHERE pronamespace = 'locktest_migrate'::regnamespace`).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := oids()
	backendOn(t, h)
	if after := oids(); after != before {
		t.Errorf("a second New dropped functions: oids %s, then %s", before, after)
	}
}
