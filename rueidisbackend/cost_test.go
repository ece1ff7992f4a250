package rueidisbackend

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redistest"
)

// expectCost fails unless the counter saw exactly cmds commands in trips
// round trips since the last check.
func expectCost(t *testing.T, c *counter, what string, cmds, trips int) {
	t.Helper()
	gotCmds, gotTrips, names := c.take()
	t.Logf("%s: %d commands in %d round trips (%s)", what, gotCmds, gotTrips, names)
	if gotCmds != cmds || gotTrips != trips {
		t.Fatalf("%s cost %d commands in %d round trips (%s), want %d in %d", what, gotCmds, gotTrips, names, cmds, trips)
	}
}

// zcard returns the size of a sorted set.
func (e *env) zcard(key string) int64 {
	e.t.Helper()
	n, err := e.raw.Do(ctx, e.raw.B().Zcard().Key(key).Build()).AsInt64()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// TestCommandCounts asserts, by counting client commands with a rueidis
// hook (a script call is one command), what each backend step costs once
// the scripts are loaded, in both modes.
func TestCommandCounts(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			holder, hc := e.backend(mode, nil)
			waiter, wc := e.backend(mode, nil)
			// Load the scripts (the server may be fresh) and dial.
			mustAcquire(t, holder, req("warm", "A", true))
			mustAcquire(t, holder, req("warm", "B", true))
			_ = holder.Extend(ctx, "warm", "A", time.Second)
			_, _ = holder.Heartbeat(ctx, []backend.Waiter{wt("warm", "B")}, time.Second)
			_ = holder.Leave(ctx, "warm", "B")
			_ = holder.Release(ctx, "warm", "A")
			_ = waiter.Release(ctx, "warm", "A")
			if _, err := holder.AcquireBatch(ctx, []backend.AcquireRequest{req("warm2", "A", false)}); err != nil {
				t.Fatal(err)
			}
			_ = holder.Release(ctx, "warm2", "A")
			hc.take()
			wc.take()

			// Uncontended Acquire (no wait) + Release = 2 commands.
			mustAcquire(t, holder, req("u", "A", false))
			if err := holder.Release(ctx, "u", "A"); err != nil {
				t.Fatal(err)
			}
			expectCost(t, hc, "uncontended Acquire+Release", 2, 2)

			// Subscribe: free with tracking; one SUBSCRIBE on the shared
			// connection with pub/sub, none for an id already subscribed.
			w := newWakes()
			cancel, err := waiter.Subscribe(ctx, "c", w.fn)
			if err != nil {
				t.Fatal(err)
			}
			defer cancel()
			expectCost(t, wc, "Subscribe", 0, 0)
			if subs := wc.takeSubs(); (mode == Tracking && len(subs) != 0) || (mode == PubSub && !slices.Equal(subs, []string{"subscribe"})) {
				t.Fatalf("first Subscribe of an id sent %v on the pub/sub connection, want one SUBSCRIBE (pub/sub) or nothing (tracking)", subs)
			}
			again, err := waiter.Subscribe(ctx, "c", func(backend.Wake) {})
			if err != nil {
				t.Fatal(err)
			}
			expectCost(t, wc, "Subscribe of an id already subscribed", 0, 0)
			if subs := wc.takeSubs(); len(subs) != 0 {
				t.Fatalf("Subscribe of an id already subscribed sent %v", subs)
			}
			again()

			// Contended hand-off in steady state: enqueue, the holder's
			// release, the grant = 3.
			mustAcquire(t, holder, req("c", "A", false))
			hc.take()
			if g := mustAcquire(t, waiter, req("c", "B", true)); g.Acquired || !g.Queued || !g.Head {
				t.Fatalf("waiter = %+v, want queued at the head", g)
			}
			if err := holder.Release(ctx, "c", "A"); err != nil {
				t.Fatal(err)
			}
			x := w.next(t)
			want := backend.Wake{ID: "c", Token: "B"} // the scripts' message names the head
			if x != want {
				t.Fatalf("wake = %+v, want %+v", x, want)
			}
			if g := mustAcquire(t, waiter, req("c", "B", true)); !g.Acquired {
				t.Fatalf("woken waiter = %+v, want acquired", g)
			}
			wCmds, _, wNames := wc.take()
			hCmds, _, hNames := hc.take()
			cmds := 3 // enqueue, release, grant
			if mode == Tracking {
				cmds = 4 // and the drain of the waiter's inbox key
			}
			if wCmds+hCmds != cmds {
				t.Fatalf("contended hand-off cost %d commands (waiter: %s; holder: %s), want %d", wCmds+hCmds, wNames, hNames, cmds)
			}

			// Extend and Leave: 1 each.
			if err := waiter.Extend(ctx, "c", "B", time.Minute); err != nil {
				t.Fatal(err)
			}
			expectCost(t, wc, "Extend", 1, 1)
			if err := waiter.Leave(ctx, "c", "B"); err != nil {
				t.Fatal(err)
			}
			expectCost(t, wc, "Leave", 1, 1)

			// Heartbeat: one command per id, one round trip for all.
			mustAcquire(t, holder, req("h1", "A", false))
			mustAcquire(t, holder, req("h2", "A", false))
			for _, r := range []backend.AcquireRequest{req("h1", "1", true), req("h1", "2", true), req("h2", "3", true), req("h1", "4", true), req("h2", "5", true)} {
				mustAcquire(t, waiter, r)
			}
			wc.take()
			ws := []backend.Waiter{wt("h1", "1"), wt("h1", "2"), wt("h2", "3"), wt("h1", "4"), wt("h2", "5")}
			res, err := waiter.Heartbeat(ctx, ws, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if !r.Queued || r.Ready {
					t.Fatalf("heartbeat result %d = %+v, want queued, not ready", i, r)
				}
			}
			expectCost(t, wc, "Heartbeat of 5 waiters on 2 ids", 2, 1)
			if _, err := waiter.Heartbeat(ctx, ws[:2], time.Minute); err != nil {
				t.Fatal(err)
			}
			expectCost(t, wc, "Heartbeat of 2 waiters on 1 id", 1, 1)

			// AcquireBatch: one acquire_many call on one server, one acquire
			// per request in Tracking mode (see redisstep.Config.WithTracking);
			// LeaveBatch: one command per request. One round trip each.
			reqs := []backend.AcquireRequest{req("b1", "X", true), req("b2", "X", true), req("h1", "X", true), req("b3", "X", false)}
			gs, err := waiter.AcquireBatch(ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			if !gs[0].Acquired || !gs[1].Acquired || gs[2].Acquired || !gs[2].Queued || !gs[3].Acquired {
				t.Fatalf("AcquireBatch = %+v", gs)
			}
			expectCost(t, wc, "AcquireBatch of 4", 1, 1)
			if err := waiter.LeaveBatch(ctx, []backend.Waiter{wt("b1", "X"), wt("b2", "X"), wt("h1", "X"), wt("b3", "X")}); err != nil {
				t.Fatal(err)
			}
			expectCost(t, wc, "LeaveBatch of 4", 4, 1)
			k := waiter.keyNames
			if n, _ := e.raw.Do(ctx, e.raw.B().Exists().Key(k("b1").Lock, k("b3").Lock).Build()).AsInt64(); n != 0 {
				t.Fatalf("LeaveBatch left %d locks held", n)
			}
		})
	}
}

// TestNoScriptFallback: on a server that lost its scripts (SCRIPT FLUSH,
// a restart), a step costs EVALSHA + EVAL once, alone or batched, and then
// EVALSHA only.
func TestNoScriptFallback(t *testing.T) {
	e := newEnvAt(t, redistest.Start(t).Addr)
	b, c := e.backend(Tracking, nil)
	_ = b.Release(ctx, "n", "nobody") // dials
	e.do("SCRIPT", "FLUSH")
	c.take()
	mustAcquire(t, b, req("n", "A", false))
	expectCost(t, c, "first acquire on a flushed server (EVALSHA, then EVAL)", 2, 2)
	mustAcquire(t, b, req("n", "A", false))
	expectCost(t, c, "second acquire", 1, 1)
	e.do("SCRIPT", "FLUSH")
	gs, err := b.AcquireBatch(ctx, []backend.AcquireRequest{req("n", "A", false), req("n2", "A", false), req("n", "B", true)})
	if err != nil {
		t.Fatal(err)
	}
	if !gs[0].Acquired || gs[0].Fence == 0 || !gs[1].Acquired || !gs[2].Queued {
		t.Fatalf("AcquireBatch after SCRIPT FLUSH = %+v", gs)
	}
	expectCost(t, c, "a batch of 3 on a flushed server, Tracking mode (an acquire_many EVALSHA, then EVAL)", 2, 2)
	e.do("SCRIPT", "FLUSH")
	res, err := b.Heartbeat(ctx, []backend.Waiter{wt("n", "B"), wt("n2", "B")}, time.Minute)
	if err != nil || !res[0].Queued || res[1].Queued {
		t.Fatalf("Heartbeat after SCRIPT FLUSH = %+v, %v", res, err)
	}
}

// TestCoreCommandCounts counts, through the lock package over this
// backend, what a user's calls cost in client commands: uncontended
// Acquire + Release = 2, and a contended acquisition in steady state (the
// process already waits on the id, so it is subscribed) = its enqueue +
// the holder's release + its grant = 3. In Tracking mode the first hand-off
// is told by an invalidation (another process released), the second by
// the backend itself (its own release, which NOLOOP keeps it from hearing).
func TestCoreCommandCounts(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			ba, ca := e.backend(mode, nil)
			bb, cb := e.backend(mode, nil)
			la, err := lock.New(ba, &lock.Options{WaiterTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			lb, err := lock.New(bb, &lock.Options{WaiterTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer la.Close()
			defer lb.Close()
			ttl := 30 * time.Second
			if r, err := la.Acquire(ctx, "warm", ttl); err != nil || !r.Acquired {
				t.Fatal(r, err)
			} else {
				_ = r.Lease.Release(ctx)
			}
			_ = bb.Release(ctx, "warm", "nobody")
			ca.take()
			cb.take()

			r, err := la.Acquire(ctx, "u", ttl)
			if err != nil || !r.Acquired || r.WasInUse {
				t.Fatalf("uncontended Acquire = %+v, %v", r, err)
			}
			if err := r.Lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			expectCost(t, ca, "lock: uncontended Acquire + Release", 2, 2)

			// A holds; B1 (process B) queues, so B is subscribed to the id.
			held, err := la.Acquire(ctx, "c", ttl)
			if err != nil || !held.Acquired {
				t.Fatal(held, err)
			}
			type res struct {
				r   lock.Result
				err error
			}
			b1, b2 := make(chan res, 1), make(chan res, 1)
			go func() { r, err := lb.Acquire(ctx, "c", ttl); b1 <- res{r, err} }()
			queue := bb.keyNames("c").Queue
			eventually(t, "B1 queues", func() bool { return e.zcard(queue) == 1 })
			ca.take()
			cb.take()
			// B2, in the same process: no fast-path try, one enqueue.
			go func() { r, err := lb.Acquire(ctx, "c", ttl); b2 <- res{r, err} }()
			eventually(t, "B2 queues", func() bool { return e.zcard(queue) == 2 })
			expectCost(t, cb, "B2's enqueue while its process already waits on the id", 1, 1)
			// A releases: B1 is woken and granted; B1 releases: B2 is granted.
			if err := held.Lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			got1 := <-b1
			if got1.err != nil || !got1.r.Acquired || !got1.r.WasInUse {
				t.Fatalf("B1 = %+v, %v", got1.r, got1.err)
			}
			expectCost(t, ca, "A's release", 1, 1)
			if mode == Tracking {
				// The drain of the inbox key (LPOP), the grant, and the
				// drain of the grant's notice to B2 (same process).
				expectCost(t, cb, "B1's drain and grant", 3, 3)
			} else {
				expectCost(t, cb, "B1's grant", 1, 1)
			}
			if err := got1.r.Lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			got2 := <-b2
			if got2.err != nil || !got2.r.Acquired {
				t.Fatalf("B2 = %+v, %v", got2.r, got2.err)
			}
			// B1's release (the holder's) + B2's grant; with B2's enqueue
			// above, B2's acquisition cost 3 commands (and a drain of the
			// inbox key in Tracking mode).
			if mode == Tracking {
				expectCost(t, cb, "B1's release + B2's drain and grant", 3, 3)
			} else {
				expectCost(t, cb, "B1's release + B2's grant", 2, 2)
			}
			_ = got2.r.Lease.Release(ctx)
		})
	}
}

// TestIdleWaitersOnlyHeartbeat: waiters queued on held ids send no polling
// commands. Their process sends one batched heartbeat round trip every
// WaiterTimeout/3 (one heartbeat script per id in it), and nothing else;
// the holder's process sends nothing.
func TestIdleWaitersOnlyHeartbeat(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			ha, hc := e.backend(mode, nil)
			holder, err := lock.New(ha, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			bb, wc := e.backend(mode, nil)
			const waiterTimeout = 300 * time.Millisecond // heartbeat every 100ms
			waiters, err := lock.New(bb, &lock.Options{WaiterTimeout: waiterTimeout})
			if err != nil {
				t.Fatal(err)
			}
			defer waiters.Close()

			ids := []string{"idle-1", "idle-2"}
			for _, id := range ids {
				r, err := holder.Acquire(ctx, id, time.Minute) // no holder timer fires within the window
				if err != nil || !r.Acquired {
					t.Fatal(r, err)
				}
				defer r.Lease.Release(ctx)
			}
			wctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for i := 0; i < 6; i++ { // three waiters per id
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _ = waiters.Acquire(wctx, ids[i%2], time.Minute)
				}()
			}
			defer func() { cancel(); wg.Wait() }()
			for _, id := range ids {
				q := bb.keyNames(id).Queue
				eventually(t, "three waiters queue on "+id, func() bool { return e.zcard(q) == 3 })
			}
			wc.takeTrips()
			hc.takeTrips()

			// Measure a fixed window (this is counting, not waiting for an event).
			const window = time.Second
			time.Sleep(window)
			trips := wc.takeTrips()

			perInterval := int(window / (waiterTimeout / 3))
			if len(trips) == 0 || len(trips) > perInterval+2 {
				t.Fatalf("%d round trips in %v, want 1..%d (one heartbeat round trip per %v): %v",
					len(trips), window, perInterval+2, waiterTimeout/3, trips)
			}
			for _, trip := range trips {
				if len(trip) != len(ids) {
					t.Fatalf("a round trip with %v, want one heartbeat per id (%d)", trip, len(ids))
				}
				for _, name := range trip {
					if name != "heartbeat" {
						t.Fatalf("an idle waiter's process sent %q (round trips: %v), want heartbeats only", name, trips)
					}
				}
			}
			if h := hc.takeTrips(); len(h) != 0 {
				t.Fatalf("the holder's process sent %v while idle, want nothing", h)
			}
			t.Logf("%s: %d heartbeat round trips of %d scripts in %v (WaiterTimeout %v)", mode, len(trips), len(ids), window, waiterTimeout)
		})
	}
}

// TestExtendNoLoop: a holder that extends its lease periodically (lock.Do
// with a short ttl: an extend every ttl/3) while waiters of the same id
// wait, one in another process (the head) and one in its own, never wakes
// itself: its process sends the extends and nothing else (no loop of
// invalidation, re-read, invalidation; its own waiter is not told of its
// own extends). The head in the other process is told of each extend in
// Tracking mode (a change of the lock key it tracks) and re-checks once per
// extend, besides its holder timer: a bounded number of commands per
// extend, not a loop either.
func TestExtendNoLoop(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			ba, ca := e.backend(mode, nil)
			bb, cb := e.backend(mode, nil)
			la, err := lock.New(ba, &lock.Options{WaiterTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			lb, err := lock.New(bb, &lock.Options{WaiterTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer la.Close()
			defer lb.Close()
			const id = "noloop"
			const ttl = 900 * time.Millisecond // Do extends every 300ms: room for a loaded machine
			const extends = 8

			inFn := make(chan struct{})
			measured := make(chan struct{})
			doErr := make(chan error, 1)
			go func() {
				_, err := lock.Do(ctx, la, id, ttl, func(ctx context.Context, _ *lock.Lease) (int, error) {
					close(inFn)
					select {
					case <-measured:
					case <-ctx.Done():
						return 0, ctx.Err()
					}
					return 0, nil
				}, nil)
				doErr <- err
			}()
			<-inFn
			type res struct {
				r   lock.Result
				err error
			}
			// The remote waiter queues first: it is the head, whose core
			// re-checks at the holder's TTL (a timer, not a wake-up); the
			// local one is second and waits for wake-ups only.
			local, remote := make(chan res, 1), make(chan res, 1)
			go func() { r, err := lb.Acquire(ctx, id, time.Minute); remote <- res{r, err} }()
			queue := ba.keyNames(id).Queue
			eventually(t, "the remote waiter queues", func() bool { return e.zcard(queue) == 1 })
			go func() { r, err := la.Acquire(ctx, id, time.Minute); local <- res{r, err} }()
			eventually(t, "the local waiter queues", func() bool { return e.zcard(queue) == 2 })
			ca.take()
			cb.take()

			// Count until the holder has extended `extends` times (a
			// condition, not a speed).
			var holderTrips [][]string
			eventually(t, "the holder extends several times", func() bool {
				holderTrips = append(holderTrips, ca.takeTrips()...)
				n := 0
				for _, trip := range holderTrips {
					for _, name := range trip {
						if name == "extend" {
							n++
						}
					}
				}
				return n >= extends
			})
			close(measured)
			remoteCmds, _, remoteNames := cb.take()
			var names []string
			for _, trip := range holderTrips {
				names = append(names, trip...)
			}
			for _, n := range names {
				if n != "extend" {
					t.Fatalf("the holder's process sent %q while it held the lease (all: %v), want extends only", n, names)
				}
			}
			// Counted while the extends ran: the remote head re-checks when
			// its holder timer fires (at most once per extend, since each
			// extend pushes the expiry out) and, in Tracking mode, once per
			// extend it is told of.
			nExt := len(names)
			max := nExt + 1
			if mode == Tracking {
				max = 2*nExt + 1
			}
			if remoteCmds > max {
				t.Fatalf("the remote waiter's process sent %d commands during %d extends (%s), want at most %d", remoteCmds, nExt, remoteNames, max)
			}
			t.Logf("%s: %d extends by the holder; its process sent %d commands, the remote waiter's process %d (%s)",
				mode, nExt, len(names), remoteCmds, strings.TrimSpace(remoteNames))

			if err := <-doErr; err != nil {
				t.Fatal(err)
			}
			// Do released: the remote head is granted, then the local waiter.
			got := <-remote
			if got.err != nil || !got.r.Acquired {
				t.Fatalf("remote waiter = %+v, %v", got.r, got.err)
			}
			_ = got.r.Lease.Release(ctx)
			got = <-local
			if got.err != nil || !got.r.Acquired {
				t.Fatalf("local waiter = %+v, %v", got.r, got.err)
			}
			_ = got.r.Lease.Release(ctx)
		})
	}
}

// TestTrackingReadsOnlyInTrackingMode: a grant and an extend read the lock
// key again (one PTTL each on the server) in Tracking mode only, where
// NOLOOP would otherwise stop the connection from tracking the key it
// TestNoTrackingReads: the scripts read no key again after writing it, in
// either mode: the Tracking mode tracks its inbox keys only (broadcasting
// mode), never a key a step reads.
func TestNoTrackingReads(t *testing.T) {
	e := newEnvAt(t, redistest.Start(t).Addr)
	for _, mode := range modes {
		b, _ := e.backend(mode, nil)
		id := "t-" + mode.String()
		_ = b.Release(ctx, id, "nobody") // dials, loads nothing
		before := e.calls("pttl")
		mustAcquire(t, b, req(id, "A", false))
		afterAcquire := e.calls("pttl")
		if err := b.Extend(ctx, id, "A", time.Minute); err != nil {
			t.Fatal(err)
		}
		if a, x := afterAcquire-before, e.calls("pttl")-afterAcquire; a != 0 || x != 1 {
			t.Fatalf("%v: PTTL calls by Acquire %d, by Extend %d; want 0 and 1 (extend's own)", mode, a, x)
		}
		if err := b.Release(ctx, id, "A"); err != nil {
			t.Fatal(err)
		}
	}
}

// calls returns the server's count of calls of the command name (INFO
// commandstats), scripts' calls included.
func (e *env) calls(name string) int64 {
	e.t.Helper()
	info, err := e.raw.Do(ctx, e.raw.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
		if err != nil {
			e.t.Fatalf("commandstats %q: %v", line, err)
		}
		return n
	}
	return 0
}
