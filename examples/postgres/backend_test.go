package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

const prompt = 10 * time.Second // bound for what should happen at once, with slack for a loaded machine

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// backendOn returns a Backend of h, closed at the end of t.
func backendOn(t *testing.T, h *harness) *Backend {
	b := h.newBackend(t)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// wakes collects the wake-ups of one subscription.
type wakes struct {
	mu  sync.Mutex
	got []backend.Wake
	ch  chan struct{}
}

func subscribe(t *testing.T, b *Backend, id string) *wakes {
	t.Helper()
	w := &wakes{ch: make(chan struct{}, 100)}
	cancel, err := b.Subscribe(ctxT(t), id, func(wk backend.Wake) {
		w.mu.Lock()
		w.got = append(w.got, wk)
		w.mu.Unlock()
		select {
		case w.ch <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(cancel)
	return w
}

// await waits up to prompt for a wake-up that ok accepts.
func (w *wakes) await(t *testing.T, what string, ok func(backend.Wake) bool) {
	t.Helper()
	deadline := time.NewTimer(prompt)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		for _, wk := range w.got {
			if ok(wk) {
				w.mu.Unlock()
				return
			}
		}
		got := append([]backend.Wake(nil), w.got...)
		w.mu.Unlock()
		select {
		case <-w.ch:
		case <-deadline.C:
			t.Fatalf("%s: no such wake-up within %v; got %+v", what, prompt, got)
		}
	}
}

func acquire(t *testing.T, b *Backend, id, tok string, wait bool) backend.Grant {
	t.Helper()
	g, err := b.Acquire(ctxT(t), backend.AcquireRequest{ID: id, Token: tok, TTL: time.Minute, Wait: wait, WaiterTTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", id, tok, err)
	}
	return g
}

// Two processes batching the same ids in opposite orders must not
// deadlock: each step of a batch is its own transaction.
func TestBatchOppositeOrders(t *testing.T) {
	h := newSchema(t, "locktest_batch", Options{})
	ids := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for p := 0; p < 2; p++ {
		b := backendOn(t, h)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				reqs := make([]backend.AcquireRequest, len(ids))
				ws := make([]backend.Waiter, len(ids))
				for j := range ids {
					id := ids[j]
					if p == 1 {
						id = ids[len(ids)-1-j]
					}
					tok := fmt.Sprintf("p%d-%d", p, i)
					reqs[j] = backend.AcquireRequest{ID: id, Token: tok, TTL: time.Minute, Wait: true, WaiterTTL: time.Minute}
					ws[j] = backend.Waiter{ID: id, Token: tok}
				}
				if _, err := b.AcquireBatch(ctxT(t), reqs); err != nil {
					errs <- fmt.Errorf("AcquireBatch %d of process %d: %w", i, p, err)
					return
				}
				if _, err := b.Heartbeat(ctxT(t), ws, time.Minute); err != nil {
					errs <- fmt.Errorf("Heartbeat %d of process %d: %w", i, p, err)
					return
				}
				if err := b.LeaveBatch(ctxT(t), ws); err != nil {
					errs <- fmt.Errorf("LeaveBatch %d of process %d: %w", i, p, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, id := range ids {
		if left := h.StateLeft(t, id); len(left) > 0 {
			t.Errorf("after every batch left, %s keeps %v", id, left)
		}
	}
}

// list returns the wake-ups so far.
func (w *wakes) list() []backend.Wake {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]backend.Wake(nil), w.got...)
}

// settled waits until every wake-up committed so far for b has reached w:
// PostgreSQL delivers notifications in commit order, so once a marker
// notified after them arrives, so have they. It returns w's wake-ups but
// the markers.
func (w *wakes) settled(t *testing.T, h *harness, b *Backend, id string) []backend.Wake {
	t.Helper()
	marker := fmt.Sprint("marker-", time.Now().UnixNano())
	payload := fmt.Sprintf("%x %x 0 0 0 0", id, marker)
	if _, err := h.admin.Exec(ctxT(t), "SELECT pg_notify($1, $2)", b.l.channel, payload); err != nil {
		t.Fatal(err)
	}
	w.await(t, "the marker", func(wk backend.Wake) bool { return wk.Token == marker })
	var out []backend.Wake
	for _, wk := range w.list() {
		if !strings.HasPrefix(wk.Token, "marker-") {
			out = append(out, wk)
		}
	}
	return out
}

// request is an Acquire request of tok on id with TTLs of a minute.
func request(id, tok string, wait bool) backend.AcquireRequest {
	return backend.AcquireRequest{ID: id, Token: tok, TTL: time.Minute, Wait: wait, WaiterTTL: time.Minute}
}

// A release hands the lock off to the head, and the wake-ups go only to
// the processes of the waiters they name: the grant to the head's, the
// holder's TTL to the next head's. A waiter re-queued through another
// process is woken there.
func TestWakeOnlyToItsProcess(t *testing.T) {
	h := newSchema(t, "locktest_head", Options{})
	steps, pa, pb := backendOn(t, h), backendOn(t, h), backendOn(t, h)
	wa, wb := subscribe(t, pa, "id"), subscribe(t, pb, "id")
	held := acquire(t, steps, "id", "holder", false)
	acquire(t, pa, "id", "w1", true)
	acquire(t, pb, "id", "w2", true)
	acquire(t, pb, "id", "w3", true)
	if err := steps.Release(ctxT(t), "id", "holder"); err != nil {
		t.Fatal(err)
	}
	gotA, gotB := wa.settled(t, h, pa, "id"), wb.settled(t, h, pb, "id")
	if len(gotA) != 1 || gotA[0].Token != "w1" || gotA[0].Grant == nil || gotA[0].Grant.Fence <= held.Fence ||
		gotA[0].Grant.TTL != time.Minute || gotA[0].HolderTTL != 0 {
		t.Errorf("w1's process after the release: %+v, want one grant to w1 (fence above %d, TTL 1m)", gotA, held.Fence)
	}
	if len(gotB) != 1 || gotB[0].Token != "w2" || gotB[0].Grant != nil || gotB[0].HolderTTL <= 0 || gotB[0].HolderTTL > time.Minute {
		t.Errorf("w2's process after the release: %+v, want only w2 told the new holder's TTL", gotB)
	}

	// w2 re-queues through pa: the grant by w1's Leave goes there now.
	acquire(t, pa, "id", "w2", true)
	if err := pa.Leave(ctxT(t), "id", "w1"); err != nil {
		t.Fatal(err)
	}
	gotA, gotB = wa.settled(t, h, pa, "id")[1:], wb.settled(t, h, pb, "id")[1:]
	if len(gotA) != 1 || gotA[0].Token != "w2" || gotA[0].Grant == nil {
		t.Errorf("pa after w1 left: %+v, want the grant to w2, which last queued through pa", gotA)
	}
	if len(gotB) != 1 || gotB[0].Token != "w3" || gotB[0].HolderTTL <= 0 {
		t.Errorf("pb after w1 left: %+v, want only w3 told the new holder's TTL", gotB)
	}
}

// A hand-off grants the head the TTL it asked for, to the microsecond,
// with a fence above every earlier one and the server's clock; a heartbeat
// that finds the lease expired hands off and reports the head it granted
// as queued; no row of the granted waiter is left.
func TestHandOff(t *testing.T) {
	h := newSchema(t, "locktest_handoff", Options{})
	steps, pw := backendOn(t, h), backendOn(t, h)
	w := subscribe(t, pw, "id")
	const ttl, wttl, wttl2 = 1234567 * time.Microsecond, 2345678 * time.Microsecond, 3456789 * time.Microsecond
	g, err := steps.Acquire(ctxT(t), backend.AcquireRequest{ID: "id", Token: "holder", TTL: ttl})
	if err != nil || !g.Acquired || g.TTL != ttl {
		t.Fatalf("Acquire of a free id: %+v, %v", g, err)
	}
	var d int64 // a new id's first fence is the clock: its expiry is TTL later
	if err := h.admin.QueryRow(ctxT(t), "SELECT locktest_handoff.us(expiry - 'epoch') - fence FROM locktest_handoff.ids WHERE id = 'id'").Scan(&d); err != nil || dur(d) != ttl {
		t.Errorf("expiry - grant time: %v (%v), want the TTL %v exactly", dur(d), err, ttl)
	}
	before := time.Now()
	g, err = pw.Acquire(ctxT(t), backend.AcquireRequest{ID: "id", Token: "w", TTL: wttl, Wait: true, WaiterTTL: wttl2})
	if err != nil || !g.Queued || !g.Head || g.StoreTime.IsZero() || g.StoreTime.Sub(before).Abs() > prompt {
		t.Fatalf("enqueue: %+v, %v; want queued, head, with the server's clock", g, err)
	}
	if err := h.admin.QueryRow(ctxT(t), "SELECT locktest_handoff.us(deadline - since) FROM locktest_handoff.waiters WHERE id = 'id'").Scan(&d); err != nil || dur(d) != wttl2 {
		t.Errorf("the waiter's deadline - its enqueue: %v (%v), want the WaiterTTL %v exactly", dur(d), err, wttl2)
	}
	h.ExpireNow(t, "id")
	res, err := pw.Heartbeat(ctxT(t), []backend.Waiter{{ID: "id", Token: "w"}}, time.Minute)
	if err != nil || len(res) != 1 || !res[0].Queued || res[0].Ready {
		t.Errorf("the heartbeat that granted w: %+v, %v; want Queued, not Ready", res, err)
	}
	w.await(t, "the grant to w", func(wk backend.Wake) bool { return wk.Token == "w" && wk.Grant != nil })
	grant := w.list()[0].Grant
	if grant.Fence <= g.Fence || grant.TTL != wttl {
		t.Errorf("grant %+v, want a fence above %d and the TTL w asked for, %v", grant, g.Fence, wttl)
	}
	if err := h.admin.QueryRow(ctxT(t), "SELECT locktest_handoff.us(expiry - 'epoch') FROM locktest_handoff.ids WHERE id = 'id' AND token = 'w'").Scan(&d); err != nil || time.UnixMicro(d).Sub(grant.StoreTime) != wttl {
		t.Errorf("w's expiry - the grant's StoreTime: %v (%v), want %v exactly", time.UnixMicro(d).Sub(grant.StoreTime), err, wttl)
	}
	if left := h.StateLeft(t, "id"); len(left) != 1 || left[0] != "lease of w" {
		t.Errorf("after the hand-off: %v, want w's lease and no waiter row", left)
	}
	if res, err = pw.Heartbeat(ctxT(t), []backend.Waiter{{ID: "id", Token: "w"}}, time.Minute); err != nil || res[0].Queued {
		t.Errorf("a later heartbeat of w: %+v, %v; want not queued", res, err)
	}
	if g := acquire(t, pw, "id", "w", true); !g.Acquired || g.Fence != grant.Fence || g.TTL > wttl {
		t.Errorf("w's Acquire after the hand-off: %+v, want the granted lease (fence %d)", g, grant.Fence)
	}
}

// Inspect shows the live lease and live waiters only, bounded, and writes
// nothing: no expired lease freed, no dead waiter purged, no hand-off, no
// wake-up, not even a row rewritten with the same values.
func TestInspect(t *testing.T) {
	h := newSchema(t, "locktest_inspect", Options{})
	b := backendOn(t, h)
	w := subscribe(t, b, "id")
	g := acquire(t, b, "id", "holder", false)
	for _, tok := range []string{"dead1", "live1", "dead2", "live2", "live3"} {
		acquire(t, b, "id", tok, true)
	}
	in, err := b.Inspect(ctxT(t), "id", 10)
	if err != nil || !in.Held || in.Fence != g.Fence || in.Holder != backend.Fingerprint("holder") || in.TTL <= 0 || in.TTL > time.Minute || in.QueueLen != 5 {
		t.Errorf("a held id with 5 waiters: %+v, %v", in, err)
	}
	_, err = h.admin.Exec(ctxT(t), "UPDATE locktest_inspect.waiters SET deadline = clock_timestamp() WHERE token IN ('dead1', 'dead2')")
	if err != nil {
		t.Fatal(err)
	}
	h.ExpireNow(t, "id")
	state := func() string {
		var s string
		err := h.admin.QueryRow(ctxT(t), `SELECT coalesce(string_agg(r, ';' ORDER BY r), '') FROM (
			SELECT (ctid, xmin, i.*)::text AS r FROM locktest_inspect.ids i WHERE id = 'id' UNION ALL
			SELECT (ctid, xmin, w.*)::text FROM locktest_inspect.waiters w WHERE id = 'id') x`).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := state()
	for _, n := range []int{10, 2, 0, -1} {
		in, err := b.Inspect(ctxT(t), "id", n)
		if err != nil || in.ID != "id" || in.Held || in.TTL != 0 || in.QueueLen != 3 || len(in.Waiters) != max(0, min(n, 3)) {
			t.Errorf("Inspect(%d) of an expired lease, 3 live and 2 dead waiters: %+v, %v", n, in, err)
			continue
		}
		for i, wi := range in.Waiters {
			if wi.Token != backend.Fingerprint(fmt.Sprint("live", i+1)) || (i > 0 && wi.Ticket <= in.Waiters[i-1].Ticket) ||
				wi.Deadline <= 0 || wi.Deadline > time.Minute || wi.QueuedFor < 0 || wi.QueuedFor > prompt {
				t.Errorf("Inspect(%d): waiter %d is %+v, want live%d, in ticket order", n, i, wi, i+1)
			}
		}
	}
	if after := state(); after != before {
		t.Errorf("Inspect wrote:\nbefore %s\nafter  %s", before, after)
	}
	if got := w.settled(t, h, b, "id"); len(got) != 0 {
		t.Errorf("Inspect woke %+v", got)
	}

	// At most backend.MaxInspectWaiters are listed.
	reqs := make([]backend.AcquireRequest, backend.MaxInspectWaiters+1)
	for i := range reqs {
		reqs[i] = request("many", fmt.Sprint("w", i), true)
	}
	acquire(t, b, "many", "holder", false)
	if _, err := b.AcquireBatch(ctxT(t), reqs); err != nil {
		t.Fatal(err)
	}
	if in, err := b.Inspect(ctxT(t), "many", 1000); err != nil || in.QueueLen != len(reqs) || len(in.Waiters) != backend.MaxInspectWaiters {
		t.Errorf("Inspect(1000) of %d waiters: QueueLen %d, %d listed, %v; want %d listed", len(reqs), in.QueueLen, len(in.Waiters), err, backend.MaxInspectWaiters)
	}
}

// ExtendBatch runs one Extend step per request, each with its own result:
// a token that does not hold its id gets ErrNotHeld and extends nothing,
// also while another token holds the id, and the others go on.
func TestExtendBatch(t *testing.T) {
	h := newSchema(t, "locktest_extend", Options{})
	b := backendOn(t, h)
	acquire(t, b, "a", "t1", false)
	acquire(t, b, "b", "t2", false)
	res, err := b.ExtendBatch(ctxT(t), []backend.ExtendRequest{
		{ID: "a", Token: "t9", TTL: time.Hour},
		{ID: "a", Token: "t1", TTL: 2 * time.Second},
		{ID: "c", Token: "t1", TTL: time.Hour},
		{ID: "b", Token: "t1", TTL: time.Hour},
		{ID: "b", Token: "t2", TTL: 3 * time.Second},
	})
	want := []error{backend.ErrNotHeld, nil, backend.ErrNotHeld, backend.ErrNotHeld, nil}
	if err != nil || len(res) != len(want) {
		t.Fatalf("ExtendBatch: %v, %v", res, err)
	}
	for i := range want {
		if !errors.Is(res[i], want[i]) || (want[i] == nil) != (res[i] == nil) {
			t.Errorf("request %d: %v, want %v", i, res[i], want[i])
		}
	}
	for id, ttl := range map[string]time.Duration{"a": 2 * time.Second, "b": 3 * time.Second} {
		if in, err := b.Inspect(ctxT(t), id, 0); err != nil || in.TTL > ttl || in.TTL < ttl-prompt {
			t.Errorf("%s after the batch: TTL %v (%v), want its holder's extend to %v and no other", id, in.TTL, err, ttl)
		}
	}
	if left := h.StateLeft(t, "c"); len(left) != 0 {
		t.Errorf("an Extend of a free id created %v", left)
	}
	if res, err := b.ExtendBatch(ctxT(t), nil); err != nil || len(res) != 0 {
		t.Errorf("ExtendBatch of nothing: %v, %v", res, err)
	}
}

// Subscribe returns only once wake-ups can be delivered: on a backend just
// made, once LISTEN is active, and, with the test hook that delays
// subscriptions, only after the delay.
func TestSubscribeReturnsWhenListening(t *testing.T) {
	h := newSchema(t, "locktest_subscribe", Options{})
	steps := backendOn(t, h)
	for i := 0; i < 5; i++ {
		id := fmt.Sprint("id", i)
		b := backendOn(t, h) // a new listening connection
		const delay = 100 * time.Millisecond
		if i > 2 {
			h.DelaySubscribe(t, b, delay)
		}
		start := time.Now()
		w := subscribe(t, b, id)
		if took := time.Since(start); i > 2 && took < delay {
			t.Errorf("Subscribe with subscriptions delayed %v returned after %v", delay, took)
		}
		acquire(t, steps, id, "holder", false)
		acquire(t, b, id, "waiter", true)
		if err := steps.Release(ctxT(t), id, "holder"); err != nil {
			t.Fatal(err)
		}
		w.await(t, "the release right after Subscribe returned", func(wk backend.Wake) bool { return wk.Token == "waiter" })
	}
}

// When the listening connection is cut, every subscription gets
// Wake{All} once it listens again, and wake-ups flow again.
func TestWakeAllAfterReconnect(t *testing.T) {
	h := newSchema(t, "locktest_reconnect", Options{})
	b := backendOn(t, h)
	w := subscribe(t, b, "id")
	other := subscribe(t, b, "other")
	h.DropNotifier(t, b)
	w.await(t, "after the connection was cut", func(wk backend.Wake) bool { return wk.All && wk.ID == "id" })
	other.await(t, "after the connection was cut", func(wk backend.Wake) bool { return wk.All && wk.ID == "other" })
	acquire(t, b, "id", "holder", false)
	acquire(t, b, "id", "waiter", true)
	if err := b.Release(ctxT(t), "id", "holder"); err != nil {
		t.Fatal(err)
	}
	w.await(t, "a release after the reconnect", func(wk backend.Wake) bool { return wk.Token == "waiter" })
}

// Fences keep increasing after the id's counter row was swept away.
func TestFenceAfterSweep(t *testing.T) {
	h := newSchema(t, "locktest_sweep", Options{CounterIdle: time.Microsecond})
	b := backendOn(t, h)
	f1 := acquire(t, b, "id", "t1", false).Fence
	if err := b.Release(ctxT(t), "id", "t1"); err != nil {
		t.Fatal(err)
	}
	acquire(t, b, "new-id", "t2", false) // a grant on a new id sweeps idle rows
	var n int
	if err := h.admin.QueryRow(ctxT(t), "SELECT count(*) FROM locktest_sweep.ids WHERE id = 'id'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the idle id's counter row: %d rows (%v), want it swept", n, err)
	}
	if f2 := acquire(t, b, "id", "t3", false).Fence; f2 <= f1 {
		t.Errorf("fence after the counter row was swept: %d, want above the previous %d", f2, f1)
	}
}

// The waiter cap: beyond MaxWaiters an enqueue gets ErrQueueFull, alone
// and in a batch, and enqueues nothing.
func TestQueueFull(t *testing.T) {
	h := newSchema(t, "locktest_full", Options{MaxWaiters: 2})
	b := backendOn(t, h)
	acquire(t, b, "id", "holder", false)
	acquire(t, b, "id", "w1", true)
	acquire(t, b, "id", "w2", true)
	req := backend.AcquireRequest{ID: "id", Token: "w3", TTL: time.Minute, Wait: true, WaiterTTL: time.Minute}
	if g, err := b.Acquire(ctxT(t), req); !errors.Is(err, backend.ErrQueueFull) || g.Queued {
		t.Errorf("third waiter: %+v, %v; want ErrQueueFull, not queued", g, err)
	}
	res, err := b.AcquireBatch(ctxT(t), []backend.AcquireRequest{req})
	if err != nil || len(res) != 1 || !errors.Is(res[0].Err, backend.ErrQueueFull) {
		t.Errorf("third waiter in a batch: %+v, %v; want ErrQueueFull in Err", res, err)
	}
	if n := len(h.StateLeft(t, "id")); n != 3 {
		t.Errorf("rows left: %d, want the lease and two waiters", n)
	}
}

// Retried and refused acquires report remaining TTLs; Release, Extend
// after an expiry report ErrNotHeld and revive nothing; a resent Release
// is answered nil.
func TestStepContracts(t *testing.T) {
	h := newSchema(t, "locktest_steps", Options{})
	b := backendOn(t, h)
	acquire(t, b, "id", "t1", false)
	if g := acquire(t, b, "id", "t1", false); !g.Acquired || g.TTL >= time.Minute || g.TTL < time.Minute-prompt {
		t.Errorf("retried acquire: %+v, want Acquired with the remaining TTL", g)
	}
	if g := acquire(t, b, "id", "t2", false); g.Acquired || g.HolderTTL <= 0 || g.HolderTTL >= time.Minute {
		t.Errorf("acquire of a held id: %+v, want the holder's remaining TTL", g)
	}
	if err := b.Release(ctxT(t), "id", "t1"); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctxT(t), "id", "t1"); err != nil {
		t.Errorf("a resent release: %v, want nil", err)
	}
	acquire(t, b, "id", "t2", false)
	h.ExpireNow(t, "id")
	if err := b.Extend(ctxT(t), "id", "t2", time.Minute); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("Extend after expiry: %v, want ErrNotHeld", err)
	}
	if err := b.Release(ctxT(t), "id", "t2"); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("Release after expiry: %v, want ErrNotHeld", err)
	}
	if err := b.Release(ctxT(t), "id", "t3"); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("Release by a token that never held: %v, want ErrNotHeld", err)
	}
	if left := h.StateLeft(t, "id"); len(left) > 0 {
		t.Errorf("after the expiry: %v, want nothing (Extend must not revive)", left)
	}
	if res, err := b.AcquireBatch(ctxT(t), nil); err != nil || len(res) != 0 {
		t.Errorf("AcquireBatch of nothing: %v, %v", res, err)
	}
	if res, err := b.Heartbeat(ctxT(t), nil, time.Minute); err != nil || len(res) != 0 {
		t.Errorf("Heartbeat of nothing: %v, %v", res, err)
	}
	if err := b.LeaveBatch(ctxT(t), nil); err != nil {
		t.Errorf("LeaveBatch of nothing: %v", err)
	}
}

// Bad options fail before any I/O; concurrent New calls on a new schema
// all succeed; a closed Backend refuses every call.
func TestNewAndClose(t *testing.T) {
	pool := newPool(t)
	var ae *backend.ArgumentError
	if _, err := New(ctxT(t), pool, &Options{Schema: "Bad-Name"}); !errors.As(err, &ae) || ae.Arg != "opts.Schema" {
		t.Errorf("New with a bad schema name: %v, want an *ArgumentError for opts.Schema", err)
	}
	if _, err := New(ctxT(t), nil, nil); !errors.As(err, &ae) || ae.Arg != "pool" {
		t.Errorf("New with a nil pool: %v, want an *ArgumentError for pool", err)
	}
	h := newSchema(t, "locktest_new", Options{})
	var wg sync.WaitGroup
	bs := make([]*Backend, 4)
	errs := make([]error, len(bs))
	for i := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bs[i], errs[i] = New(ctxT(t), pool, &h.opts)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent New %d: %v", i, err)
		}
		if err := bs[i].Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	b := bs[0]
	if err := b.Close(); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if _, err := b.Acquire(ctxT(t), backend.AcquireRequest{ID: "x", Token: "t", TTL: time.Second}); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Acquire after Close: %v", err)
	}
	if _, err := b.Subscribe(ctxT(t), "x", func(backend.Wake) {}); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Subscribe after Close: %v", err)
	}
	if _, err := b.ExtendBatch(ctxT(t), []backend.ExtendRequest{{ID: "x", Token: "t", TTL: time.Second}}); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("ExtendBatch after Close: %v", err)
	}
	if _, err := b.Inspect(ctxT(t), "x", 1); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Inspect after Close: %v", err)
	}
}
