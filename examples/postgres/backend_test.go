package postgres

import (
	"context"
	"errors"
	"fmt"
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

// A release wakes the head, and only the head: Wake names its token.
func TestWakeNamesOnlyTheHead(t *testing.T) {
	h := newSchema(t, "locktest_head", Options{})
	b := backendOn(t, h)
	w := subscribe(t, backendOn(t, h), "id")
	acquire(t, b, "id", "holder", false)
	for _, tok := range []string{"w1", "w2", "w3"} {
		if g := acquire(t, b, "id", tok, true); !g.Queued || g.Head != (tok == "w1") {
			t.Fatalf("enqueue %s: %+v", tok, g)
		}
	}
	if err := b.Release(ctxT(t), "id", "holder"); err != nil {
		t.Fatal(err)
	}
	w.await(t, "after the release", func(wk backend.Wake) bool { return wk.Token == "w1" })
	if err := b.Leave(ctxT(t), "id", "w1"); err != nil {
		t.Fatal(err)
	}
	w.await(t, "after the head left", func(wk backend.Wake) bool { return wk.Token == "w2" })
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wk := range w.got {
		if wk.ID != "id" || wk.All || (wk.Token != "w1" && wk.Token != "w2") {
			t.Errorf("wake-up %+v: want only the heads w1, then w2", wk)
		}
	}
}

// Subscribe returns only once LISTEN is active: a notification sent right
// after it returns, on a backend just made, is heard.
func TestSubscribeReturnsWhenListening(t *testing.T) {
	h := newSchema(t, "locktest_subscribe", Options{})
	steps := backendOn(t, h)
	for i := 0; i < 5; i++ {
		id := fmt.Sprint("id", i)
		acquire(t, steps, id, "holder", false)
		acquire(t, steps, id, "waiter", true)
		w := subscribe(t, backendOn(t, h), id) // a new listening connection
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
}
