package adaptertest

import (
	"context"
	"errors"
	"github.com/redislocker/lock/internal/testenv/testkit"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

var ctx = context.Background()

// Adapter is one Redis adapter, in one mode, under the shared tests.
type Adapter struct {
	// Backend returns a new backend with a client of its own (a separate
	// process) on the test's key prefix, and the log of its client's
	// commands (the pub/sub connection apart).
	Backend func(t *testing.T) (backend.Backend, *Log)
	// Keys is the keyspace of the backends Backend returns.
	Keys keys.Keyspace
	// Int runs one command with an integer reply (ZCARD, EXISTS, PTTL) on
	// the test's server.
	Int func(t *testing.T, args ...string) int64
	// Tracking is set for rueidisbackend's Tracking mode: a wake-up is an
	// invalidation of the process's inbox key, and the process drains the
	// key (one LPOP) before it acts on what it read.
	Tracking bool
	// Replicated returns a new backend like Backend's, made with
	// WaitReplicas n and WaitTimeout d.
	Replicated func(t *testing.T, n int, d time.Duration) backend.Backend
	// Subscribes, when set, returns the SUBSCRIBE and UNSUBSCRIBE commands
	// that the backend of l sent on its pub/sub connection since the last
	// call.
	Subscribes func(l *Log) []string
}

// queued returns how many waiters are queued on id.
func (a Adapter) queued(t *testing.T, id string) int64 {
	return a.Int(t, "ZCARD", a.Keys.For(id).Queue)
}

// expectSubscribes fails unless the backend of l sent want on its pub/sub
// connection since the last check; nothing is checked when the adapter
// does not see that connection.
func (a Adapter) expectSubscribes(t *testing.T, l *Log, what string, want []string) {
	t.Helper()
	if a.Subscribes == nil {
		return
	}
	if got := a.Subscribes(l); !slices.Equal(got, want) {
		t.Fatalf("%s sent %v on the pub/sub connection, want %v", what, got, want)
	}
}

// Req is an AcquireRequest with TTLs of 10 s.
func Req(id, token string, wait bool) backend.AcquireRequest {
	return backend.AcquireRequest{ID: id, Token: token, TTL: 10 * time.Second, Wait: wait, WaiterTTL: 10 * time.Second}
}

// Wt is the Waiter of token on id.
func Wt(id, token string) backend.Waiter { return backend.Waiter{ID: id, Token: token} }

// MustAcquire runs b.Acquire(r), failing the test on error.
func MustAcquire(t testing.TB, b backend.Backend, r backend.AcquireRequest) backend.Grant {
	t.Helper()
	g, err := b.Acquire(ctx, r)
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", r.ID, r.Token, err)
	}
	return g
}

// CommandCounts asserts, by counting client commands (a script call is
// one), what each backend step costs once the scripts are loaded.
func CommandCounts(t *testing.T, a Adapter) {
	holder, hc := a.Backend(t)
	waiter, wc := a.Backend(t)
	// Load the scripts (the server may be fresh) and dial.
	MustAcquire(t, holder, Req("warm", "A", true))
	MustAcquire(t, holder, Req("warm", "B", true))
	_ = holder.Extend(ctx, "warm", "A", time.Second)
	_, _ = holder.Heartbeat(ctx, []backend.Waiter{Wt("warm", "B")}, time.Second)
	_ = holder.Leave(ctx, "warm", "B")
	_ = holder.Release(ctx, "warm", "A")
	_ = waiter.Release(ctx, "warm", "A")
	if _, err := holder.(backend.Batcher).AcquireBatch(ctx, []backend.AcquireRequest{Req("warm2", "A", false)}); err != nil {
		t.Fatal(err)
	}
	_ = holder.Release(ctx, "warm2", "A")
	hc.Take()
	wc.Take()

	// Uncontended Acquire (no wait) + Release = 2 commands.
	MustAcquire(t, holder, Req("u", "A", false))
	if err := holder.Release(ctx, "u", "A"); err != nil {
		t.Fatal(err)
	}
	ExpectCost(t, hc, "uncontended Acquire+Release", 2, 2)

	// Subscribe: nothing on the client's connections. On the pub/sub
	// connection, when the adapter sees it: one SUBSCRIBE for an id's first
	// Subscribe with pub/sub, nothing with tracking or for an id already
	// subscribed.
	w := NewWakes()
	cancel, err := waiter.Subscribe(ctx, "c", w.Fn)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	ExpectCost(t, wc, "Subscribe", 0, 0)
	first := []string{"subscribe"}
	if a.Tracking {
		first = nil
	}
	a.expectSubscribes(t, wc, "first Subscribe of an id", first)
	again, err := waiter.Subscribe(ctx, "c", func(backend.Wake) {})
	if err != nil {
		t.Fatal(err)
	}
	ExpectCost(t, wc, "Subscribe of an id already subscribed", 0, 0)
	a.expectSubscribes(t, wc, "Subscribe of an id already subscribed", nil)
	again()

	// Contended hand-off in steady state (the waiter's process already
	// subscribes to the id): enqueue and the holder's release, which grants
	// the waiter = 2.
	MustAcquire(t, holder, Req("c", "A", false))
	hc.Take()
	if g := MustAcquire(t, waiter, Req("c", "B", true)); g.Acquired || !g.Queued || !g.Head {
		t.Fatalf("waiter = %+v, want queued at the head", g)
	}
	if err := holder.Release(ctx, "c", "A"); err != nil {
		t.Fatal(err)
	}
	if x := w.Next(t); !IsGrant(x, "c", "B") { // the scripts' message names the head
		t.Fatalf("wake = %+v, want B's grant by hand-off", x)
	}
	wCmds, _, wNames := wc.Take()
	hCmds, _, hNames := hc.Take()
	cmds := 2 // enqueue, release (a hand-off)
	if a.Tracking {
		cmds = 3 // and the drain of the waiter's inbox key
	}
	if wCmds+hCmds != cmds {
		t.Fatalf("contended hand-off cost %d commands (waiter: %s; holder: %s), want %d", wCmds+hCmds, wNames, hNames, cmds)
	}

	// Extend and Leave: 1 each.
	if err := waiter.Extend(ctx, "c", "B", time.Minute); err != nil {
		t.Fatal(err)
	}
	ExpectCost(t, wc, "Extend", 1, 1)
	if err := waiter.Leave(ctx, "c", "B"); err != nil {
		t.Fatal(err)
	}
	ExpectCost(t, wc, "Leave", 1, 1)

	// Heartbeat: one command per id, one round trip for all.
	MustAcquire(t, holder, Req("h1", "A", false))
	MustAcquire(t, holder, Req("h2", "A", false))
	for _, r := range []backend.AcquireRequest{Req("h1", "1", true), Req("h1", "2", true), Req("h2", "3", true), Req("h1", "4", true), Req("h2", "5", true)} {
		MustAcquire(t, waiter, r)
	}
	wc.Take()
	ws := []backend.Waiter{Wt("h1", "1"), Wt("h1", "2"), Wt("h2", "3"), Wt("h1", "4"), Wt("h2", "5")}
	res, err := waiter.Heartbeat(ctx, ws, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !r.Queued || r.Ready {
			t.Fatalf("heartbeat result %d = %+v, want queued, not ready", i, r)
		}
	}
	ExpectCost(t, wc, "Heartbeat of 5 waiters on 2 ids", 2, 1)
	if _, err := waiter.Heartbeat(ctx, ws[:2], time.Minute); err != nil {
		t.Fatal(err)
	}
	ExpectCost(t, wc, "Heartbeat of 2 waiters on 1 id", 1, 1)
	batchCosts(t, a, waiter, wc)
}

// batchCosts is CommandCounts' part on batches. AcquireBatch: one
// acquire_many call on one server, in every mode; ExtendBatch and LeaveBatch:
// one command per request. One round trip each.
func batchCosts(t *testing.T, a Adapter, waiter backend.Backend, wc *Log) {
	bw := waiter.(interface {
		backend.Batcher
		backend.ExtendBatcher
	})
	reqs := []backend.AcquireRequest{Req("b1", "X", true), Req("b2", "X", true), Req("h1", "X", true), Req("b3", "X", false)}
	gs, err := bw.AcquireBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if !gs[0].Acquired || !gs[1].Acquired || gs[2].Acquired || !gs[2].Queued || !gs[3].Acquired {
		t.Fatalf("AcquireBatch = %+v", gs)
	}
	ExpectCost(t, wc, "AcquireBatch of 4", 1, 1)
	// ExtendBatch: results in request order, the store's answer per request.
	errs, err := bw.ExtendBatch(ctx, []backend.ExtendRequest{
		{ID: "b1", Token: "X", TTL: time.Hour}, {ID: "h1", Token: "X", TTL: time.Hour}, {ID: "b3", Token: "X", TTL: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != 3 || errs[0] != nil || !errors.Is(errs[1], backend.ErrNotHeld) || errs[2] != nil {
		t.Fatalf("ExtendBatch = %v, want [nil ErrNotHeld nil] (h1 is only queued)", errs)
	}
	if ms := a.Int(t, "PTTL", a.Keys.For("b3").Lock); ms < (59 * time.Minute).Milliseconds() {
		t.Fatalf("PTTL after ExtendBatch(1h) = %d ms", ms)
	}
	ExpectCost(t, wc, "ExtendBatch of 3", 3, 1)
	if err := bw.LeaveBatch(ctx, []backend.Waiter{Wt("b1", "X"), Wt("b2", "X"), Wt("h1", "X"), Wt("b3", "X")}); err != nil {
		t.Fatal(err)
	}
	ExpectCost(t, wc, "LeaveBatch of 4", 4, 1)
	if n := a.Int(t, "EXISTS", a.Keys.For("b1").Lock, a.Keys.For("b3").Lock); n != 0 {
		t.Fatalf("LeaveBatch left %d locks held", n)
	}
}

// lockers are two processes on one server: a Locker each over a backend
// of its own, and the logs of their clients' commands.
type lockers struct {
	a, b   *lock.Locker
	ba, bb backend.Backend
	ca, cb *Log
}

// twoLockers returns two processes whose Lockers have a WaiterTimeout of
// a minute (no heartbeat within a test), closed at the test's end.
func twoLockers(t *testing.T, a Adapter) lockers {
	var p lockers
	p.ba, p.ca = a.Backend(t)
	p.bb, p.cb = a.Backend(t)
	var err error
	if p.a, err = lock.New(p.ba, &lock.Options{WaiterTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.a.Close() })
	if p.b, err = lock.New(p.bb, &lock.Options{WaiterTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.b.Close() })
	return p
}

// result is what an Acquire in a goroutine returns.
type result struct {
	r   lock.Result
	err error
}

// acquireAsync runs l.Acquire(id) in a goroutine and returns its result's
// channel.
func acquireAsync(l *lock.Locker, id string, ttl time.Duration) <-chan result {
	ch := make(chan result, 1)
	go func() { r, err := l.Acquire(ctx, id, ttl, nil); ch <- result{r, err} }()
	return ch
}

// CoreCommandCounts counts, through the lock package over the adapter,
// what a user's calls cost in client commands (the pub/sub connection
// apart): uncontended Acquire + Release = 2, and a contended acquisition
// in steady state (the process already waits on the id, so it is
// subscribed) = its enqueue + the holder's release, which hands the lock
// off = 2. In Tracking mode each drain of the inbox key (LPOP) adds one,
// its own process's scripts' wake-ups included.
func CoreCommandCounts(t *testing.T, a Adapter) {
	p := twoLockers(t, a)
	ttl := 30 * time.Second
	// Load the scripts and open the connections.
	if r, err := p.a.Acquire(ctx, "warm", ttl, nil); err != nil || !r.Acquired {
		t.Fatal(r, err)
	} else {
		_ = r.Lease.Release(ctx)
	}
	_ = p.bb.Release(ctx, "warm", "nobody")
	p.ca.Take()
	p.cb.Take()

	r, err := p.a.Acquire(ctx, "u", ttl, nil)
	if err != nil || !r.Acquired || r.WasInUse {
		t.Fatalf("uncontended Acquire = %+v, %v", r, err)
	}
	if err := r.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ExpectCost(t, p.ca, "lock: uncontended Acquire + Release", 2, 2)

	// A holds; B1 (process B) queues, so B is subscribed to the id.
	held, err := p.a.Acquire(ctx, "c", ttl, nil)
	if err != nil || !held.Acquired {
		t.Fatal(held, err)
	}
	b1 := acquireAsync(p.b, "c", ttl)
	testkit.Eventually(t, Deadline, "B1 queues", func() bool { return a.queued(t, "c") == 1 })
	p.ca.Take()
	p.cb.Take()
	// B2, in the same process: no fast-path try, one enqueue.
	b2 := acquireAsync(p.b, "c", ttl)
	testkit.Eventually(t, Deadline, "B2 queues", func() bool { return a.queued(t, "c") == 2 })
	ExpectCost(t, p.cb, "B2's enqueue while its process already waits on the id", 1, 1)
	// A releases: B1 is granted by hand-off (B2 told); B1 releases: B2 is
	// granted by hand-off.
	if err := held.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got1 := <-b1
	if got1.err != nil || !got1.r.Acquired || !got1.r.WasInUse {
		t.Fatalf("B1 = %+v, %v", got1.r, got1.err)
	}
	ExpectCost(t, p.ca, "A's release", 1, 1)
	if a.Tracking {
		// The drain of the inbox key: B1's grant and B2's notice, pushed by
		// one script, in one LPOP.
		ExpectCost(t, p.cb, "B1's drain", 1, 1)
	} else {
		ExpectCost(t, p.cb, "B1's grant by hand-off", 0, 0)
	}
	if err := got1.r.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got2 := <-b2
	if got2.err != nil || !got2.r.Acquired {
		t.Fatalf("B2 = %+v, %v", got2.r, got2.err)
	}
	// B1's release (the holder's), a hand-off to B2; with B2's enqueue
	// above, B2's acquisition cost 2 commands (and a drain of the inbox
	// key in Tracking mode).
	if a.Tracking {
		ExpectCost(t, p.cb, "B1's release + B2's drain", 2, 2)
	} else {
		ExpectCost(t, p.cb, "B1's release, a hand-off to B2", 1, 1)
	}
	_ = got2.r.Lease.Release(ctx)
}

// IdleWaitersOnlyHeartbeat: waiters queued on held ids send no polling
// commands. Their process sends one batched heartbeat round trip every
// WaiterTimeout/3 (one heartbeat script per id in it), and nothing else;
// the holder's process sends nothing.
func IdleWaitersOnlyHeartbeat(t *testing.T, a Adapter) {
	ha, hc := a.Backend(t)
	holder, err := lock.New(ha, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	bb, wc := a.Backend(t)
	// A heartbeat every 500 ms: a waiter's entry is purged only if its
	// heartbeats stall for 1.5 s (300 ms was seen under a loaded go test
	// ./..., and the re-queue that followed is an acquire).
	const waiterTimeout = 1500 * time.Millisecond
	waiters, err := lock.New(bb, &lock.Options{WaiterTimeout: waiterTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer waiters.Close()

	ids := []string{"idle-1", "idle-2"}
	for _, id := range ids {
		r, err := holder.Acquire(ctx, id, time.Minute, nil) // no holder timer fires within the window
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
			_, _ = waiters.Acquire(wctx, ids[i%2], time.Minute, nil)
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	for _, id := range ids {
		testkit.Eventually(t, Deadline, "three waiters queue on "+id, func() bool { return a.queued(t, id) == 3 })
	}
	wc.TakeTrips()
	hc.TakeTrips()

	// Measure a fixed window (this is counting, not waiting for an event).
	const window = 2 * time.Second
	time.Sleep(window)
	trips := wc.TakeTrips()

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
			// eval:heartbeat is the first heartbeat on a server that has
			// not loaded the script yet (NOSCRIPT, then EVAL).
			if name != "heartbeat" && name != "eval:heartbeat" {
				t.Fatalf("an idle waiter's process sent %q (round trips: %v), want heartbeats only", name, trips)
			}
		}
	}
	if h := hc.TakeTrips(); len(h) != 0 {
		t.Fatalf("the holder's process sent %v while idle, want nothing", h)
	}
	t.Logf("6 idle waiters on 2 ids: %d heartbeat round trips of %d scripts in %v: %.2f commands/s per waiter (WaiterTimeout %v)",
		len(trips), len(ids), window, float64(len(trips)*len(ids))/window.Seconds()/6, waiterTimeout)
}

// ExtendNoLoop: a holder that extends its lease periodically (lock.Do
// with a short ttl: an extend every ttl/3) while waiters of the same id
// wait, one in another process (the head) and one in its own, never wakes
// itself: its process sends the extends and nothing else (no loop of
// invalidation, re-read, invalidation; its own waiter is not told of its
// own extends). No wake-up tells of an extend, in any mode: the head in
// the other process re-checks only when its holder timer fires, at most
// once per extend, not a loop either.
func ExtendNoLoop(t *testing.T, a Adapter) {
	p := twoLockers(t, a)
	const id = "noloop"
	const ttl = 900 * time.Millisecond // Do extends every 300ms: room for a loaded machine
	const extends = 8

	inFn := make(chan struct{})
	measured := make(chan struct{})
	doErr := make(chan error, 1)
	go func() {
		_, err := lock.Do(ctx, p.a, id, ttl, func(ctx context.Context, _ *lock.Lease) (int, error) {
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
	// The remote waiter queues first: it is the head, whose core re-checks
	// at the holder's TTL (a timer, not a wake-up); the local one is second
	// and waits for wake-ups only.
	remote := acquireAsync(p.b, id, time.Minute)
	testkit.Eventually(t, Deadline, "the remote waiter queues", func() bool { return a.queued(t, id) == 1 })
	local := acquireAsync(p.a, id, time.Minute)
	testkit.Eventually(t, Deadline, "the local waiter queues", func() bool { return a.queued(t, id) == 2 })
	p.ca.Take()
	p.cb.Take()

	// Count until the holder has extended `extends` times (a condition,
	// not a speed).
	var names []string
	testkit.Eventually(t, Deadline, "the holder extends several times", func() bool {
		for _, trip := range p.ca.TakeTrips() {
			names = append(names, trip...)
		}
		n := 0
		for _, name := range names {
			if name == "extend" {
				n++
			}
		}
		return n >= extends
	})
	close(measured)
	remoteCmds, _, remoteNames := p.cb.Take()
	for _, n := range names {
		if n != "extend" {
			t.Fatalf("the holder's process sent %q while it held the lease (all: %v), want extends only", n, names)
		}
	}
	// Counted while the extends ran: the remote head re-checks when its
	// holder timer fires (at most once per extend, since each extend pushes
	// the expiry out).
	nExt := len(names)
	limit := nExt + 1
	if remoteCmds > limit {
		t.Fatalf("the remote waiter's process sent %d commands during %d extends (%s), want at most %d", remoteCmds, nExt, remoteNames, limit)
	}
	t.Logf("%d extends by the holder; its process sent %d commands, the remote waiter's process %d (%s)",
		nExt, len(names), remoteCmds, strings.TrimSpace(remoteNames))

	if err := <-doErr; err != nil {
		t.Fatal(err)
	}
	// Do released: the remote head is granted, then the local waiter.
	for _, w := range []struct {
		name string
		ch   <-chan result
	}{{"remote", remote}, {"local", local}} {
		got := <-w.ch
		if got.err != nil || !got.r.Acquired {
			t.Fatalf("%s waiter = %+v, %v", w.name, got.r, got.err)
		}
		_ = got.r.Lease.Release(ctx)
	}
}
