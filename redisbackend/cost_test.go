package redisbackend

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redistest"
)

// expectCost fails unless the counter saw exactly cmds commands in trips
// round trips since the last check.
func expectCost(t *testing.T, c *counter, what string, cmds, trips int64) {
	t.Helper()
	gotCmds, gotTrips, names := c.take()
	t.Logf("%s: %d commands in %d round trips (%s)", what, gotCmds, gotTrips, names)
	if gotCmds != cmds || gotTrips != trips {
		t.Fatalf("%s cost %d commands in %d round trips (%s), want %d in %d", what, gotCmds, gotTrips, names, cmds, trips)
	}
}

// TestCommandCounts asserts, by counting client commands with a go-redis
// hook (a script call is one command), what each backend step costs once
// the scripts are loaded.
func TestCommandCounts(t *testing.T) {
	e := newEnv(t)
	holder, hc := e.backend(nil)
	waiter, wc := e.backend(nil)
	// Load the scripts (the server may be fresh).
	mustAcquire(t, holder, req("warm", "A", true))
	mustAcquire(t, holder, req("warm", "B", true))
	_ = holder.Extend(ctx, "warm", "A", time.Second)
	_, _ = holder.Heartbeat(ctx, []backend.Waiter{wt("warm", "B")}, time.Second)
	_ = holder.Leave(ctx, "warm", "B")
	_ = holder.Release(ctx, "warm", "A")
	_ = waiter.Release(ctx, "warm", "A") // dials the waiter's connection
	if _, err := holder.AcquireBatch(ctx, []backend.AcquireRequest{req("warm2", "A", false)}); err != nil {
		t.Fatal(err)
	}
	_ = holder.Release(ctx, "warm2", "A")
	hc.take()

	// Uncontended Acquire (no wait) + Release = 2 commands.
	mustAcquire(t, holder, req("u", "A", false))
	if err := holder.Release(ctx, "u", "A"); err != nil {
		t.Fatal(err)
	}
	expectCost(t, hc, "uncontended Acquire+Release", 2, 2)

	// Contended hand-off in steady state (the waiter's process already
	// subscribes to the id): enqueue, the holder's release, the grant = 3.
	w := newWakes()
	cancel, err := waiter.Subscribe(ctx, "c", w.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	mustAcquire(t, holder, req("c", "A", false))
	hc.take()
	wc.take()
	again, err := waiter.Subscribe(ctx, "c", func(backend.Wake) {})
	if err != nil {
		t.Fatal(err)
	}
	again()
	if g := mustAcquire(t, waiter, req("c", "B", true)); g.Acquired || !g.Queued {
		t.Fatalf("waiter = %+v, want queued", g)
	}
	if err := holder.Release(ctx, "c", "A"); err != nil {
		t.Fatal(err)
	}
	if x := w.next(t); x.Token != "B" {
		t.Fatalf("wake = %+v", x)
	}
	if g := mustAcquire(t, waiter, req("c", "B", true)); !g.Acquired {
		t.Fatalf("woken waiter = %+v, want acquired", g)
	}
	wCmds, _, wNames := wc.take()
	hCmds, _, hNames := hc.take()
	if wCmds+hCmds != 3 {
		t.Fatalf("contended hand-off cost %d commands (waiter: %s; holder: %s), want 3", wCmds+hCmds, wNames, hNames)
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
		if !r.Queued {
			t.Fatalf("heartbeat result %d = %+v, want queued", i, r)
		}
	}
	expectCost(t, wc, "Heartbeat of 5 waiters on 2 ids", 2, 1)
	if _, err := waiter.Heartbeat(ctx, ws[:2], time.Minute); err != nil {
		t.Fatal(err)
	}
	expectCost(t, wc, "Heartbeat of 2 waiters on 1 id", 1, 1)

	// AcquireBatch: one acquire_many call on one server; LeaveBatch: one
	// command per request. One round trip each.
	reqs := []backend.AcquireRequest{req("b1", "X", true), req("b2", "X", true), req("h1", "X", true), req("b3", "X", false)}
	gs, err := waiter.AcquireBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if !gs[0].Acquired || !gs[1].Acquired || gs[2].Acquired || !gs[2].Queued || !gs[3].Acquired {
		t.Fatalf("AcquireBatch = %+v", gs)
	}
	expectCost(t, wc, "AcquireBatch of 4", 1, 1)
	// ExtendBatch: results in request order, the store's answer per request.
	errs, err := waiter.ExtendBatch(ctx, []backend.ExtendRequest{
		{ID: "b1", Token: "X", TTL: time.Hour}, {ID: "h1", Token: "X", TTL: time.Hour}, {ID: "b3", Token: "X", TTL: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != 3 || errs[0] != nil || !errors.Is(errs[1], backend.ErrNotHeld) || errs[2] != nil {
		t.Fatalf("ExtendBatch = %v, want [nil ErrNotHeld nil] (h1 is only queued)", errs)
	}
	if d := e.raw.PTTL(ctx, waiter.keyNames("b3").Lock).Val(); d < 59*time.Minute {
		t.Fatalf("PTTL after ExtendBatch(1h) = %v", d)
	}
	expectCost(t, wc, "ExtendBatch of 3", 3, 1)
	if err := waiter.LeaveBatch(ctx, []backend.Waiter{wt("b1", "X"), wt("b2", "X"), wt("h1", "X"), wt("b3", "X")}); err != nil {
		t.Fatal(err)
	}
	expectCost(t, wc, "LeaveBatch of 4", 4, 1)
	if n := e.raw.Exists(ctx, waiter.keyNames("b1").Lock, waiter.keyNames("b3").Lock).Val(); n != 0 {
		t.Fatalf("LeaveBatch left %d locks held", n)
	}
}

// TestNoScriptFallback: on a server that lost its scripts (SCRIPT FLUSH,
// a restart), a step costs EVALSHA + EVAL once, alone or in a pipeline, and
// then EVALSHA only.
func TestNoScriptFallback(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnvAt(t, srv.Addr)
	b, c := e.backend(nil)
	_ = b.Release(ctx, "n", "nobody") // dials the client's connection
	if err := e.raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c.take()
	mustAcquire(t, b, req("n", "A", false))
	if _, _, names := c.take(); names != "evalsha eval" {
		t.Fatalf("first acquire on a flushed server sent %q, want evalsha then eval", names)
	}
	mustAcquire(t, b, req("n", "A", false))
	if _, _, names := c.take(); names != "evalsha" {
		t.Fatalf("second acquire sent %q, want evalsha only", names)
	}
	if err := e.raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	gs, err := b.AcquireBatch(ctx, []backend.AcquireRequest{req("n", "A", false), req("n2", "A", false), req("n", "B", true)})
	if err != nil {
		t.Fatal(err)
	}
	if !gs[0].Acquired || gs[0].Fence == 0 || !gs[1].Acquired || !gs[2].Queued {
		t.Fatalf("AcquireBatch after SCRIPT FLUSH = %+v", gs)
	}
	if cmds, trips, names := c.take(); cmds != 2 || trips != 2 {
		t.Fatalf("batch on a flushed server: %d commands in %d trips (%s), want 1 EVALSHA then 1 EVAL in 2 trips", cmds, trips, names)
	}
	if err := e.raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := b.Heartbeat(ctx, []backend.Waiter{wt("n", "B"), wt("n2", "B")}, time.Minute)
	if err != nil || !res[0].Queued || res[1].Queued {
		t.Fatalf("Heartbeat after SCRIPT FLUSH = %+v, %v", res, err)
	}
}

// BenchmarkAcquireRelease measures an uncontended Acquire+Release and
// reports the server's CPU time per pair (INFO commandstats usec of
// EVALSHA), next to the client's ns/op.
func BenchmarkAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	be, _ := newBenchBackend(b, srv.Addr)
	r := req("bench", "A", false)
	_ = be.Release(ctx, "bench", "A")
	before := evalshaUsec(b, srv.Addr)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := be.Acquire(ctx, r); err != nil {
			b.Fatal(err)
		}
		if err := be.Release(ctx, "bench", "A"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(evalshaUsec(b, srv.Addr)-before)/float64(b.N), "server-µs/op")
}

func newBenchBackend(b *testing.B, addr string) (*Backend, *counter) {
	client := newClient(addr)
	cnt := &counter{}
	client.AddHook(cnt)
	be, err := New(client, &Options{Prefix: "bench:"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = be.Close()
		client.Close()
	})
	return be, cnt
}

// evalshaUsec returns the server's total usec spent in EVALSHA and EVAL.
func evalshaUsec(tb testing.TB, addr string) int64 {
	client := newClient(addr)
	defer client.Close()
	info, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					tb.Fatal(fmt.Errorf("commandstats %q: %w", line, err))
				}
				total += n
			}
		}
	}
	return total
}
