package redisbackend

import (
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// The command-cost tests both adapters run (see internal/testenv/adaptertest).

func TestCommandCounts(t *testing.T) { adaptertest.CommandCounts(t, newEnv(t).adapter()) }

func TestCoreCommandCounts(t *testing.T) { adaptertest.CoreCommandCounts(t, newEnv(t).adapter()) }

func TestIdleWaitersOnlyHeartbeat(t *testing.T) {
	adaptertest.IdleWaitersOnlyHeartbeat(t, newEnv(t).adapter())
}

func TestExtendNoLoop(t *testing.T) { adaptertest.ExtendNoLoop(t, newEnv(t).adapter()) }

// TestNoScriptFallback: on a server that lost its scripts (SCRIPT FLUSH,
// a restart), a step costs EVALSHA + EVAL once, alone or in a pipeline, and
// then EVALSHA only. The server has no FUNCTION command, so that the steps
// go as EVALSHA (TestFunctions checks FCALL).
func TestNoScriptFallback(t *testing.T) {
	srv := redisserver.StartT(t, redisserver.Options{Args: []string{"--rename-command", "FUNCTION", ""}})
	e := newEnvAt(t, srv.Addr)
	b, c := e.backend(nil)
	_ = b.Release(ctx, "n", "nobody") // dials the client's connection
	if err := e.raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c.Take()
	mustAcquire(t, b, req("n", "A", false))
	if _, _, names := c.Take(); names != "acquire eval:acquire" {
		t.Fatalf("first acquire on a flushed server sent %q, want EVALSHA then EVAL of acquire", names)
	}
	mustAcquire(t, b, req("n", "A", false))
	if _, _, names := c.Take(); names != "acquire" {
		t.Fatalf("second acquire sent %q, want EVALSHA of acquire only", names)
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
	if cmds, trips, names := c.Take(); cmds != 2 || trips != 2 {
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
	srv := redisserver.StartT(b, redisserver.Options{})
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

func newBenchBackend(b *testing.B, addr string) (*adapter, *counter) {
	client := newClient(addr)
	cnt := &counter{}
	client.AddHook(cnt)
	be, err := concrete(New(client, &Options{Prefix: "bench:"}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = be.Close()
		client.Close()
	})
	return be, cnt
}

// evalshaUsec returns the server's total usec spent in EVALSHA, EVAL and
// FCALL (the scripts' function library).
func evalshaUsec(tb testing.TB, addr string) int64 {
	client := newClient(addr)
	defer client.Close()
	info, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total int64
	for _, cmd := range []string{"evalsha", "eval", "fcall"} {
		total += redisserver.CommandStat(tb, info, cmd, "usec")
	}
	return total
}

// TestFunctions: the scripts go as FCALL of the function library, with
// EVALSHA as the fallback (see adaptertest.Functions).
func TestFunctions(t *testing.T) {
	adaptertest.Functions(t, func(t *testing.T, addr string) (backend.Backend, func() bool) {
		b, _ := newEnvAt(t, addr).backend(nil)
		return b, b.run.Functions
	})
}
