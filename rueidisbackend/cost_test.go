package rueidisbackend

import (
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// The command-cost tests both adapters run (see internal/testenv/adaptertest), in
// both modes.

func TestCommandCounts(t *testing.T) { inModes(t, adaptertest.CommandCounts) }

func TestCoreCommandCounts(t *testing.T) { inModes(t, adaptertest.CoreCommandCounts) }

func TestIdleWaitersOnlyHeartbeat(t *testing.T) { inModes(t, adaptertest.IdleWaitersOnlyHeartbeat) }

func TestExtendNoLoop(t *testing.T) { inModes(t, adaptertest.ExtendNoLoop) }

// inModes runs a shared test in each mode, on an env of its own.
func inModes(t *testing.T, test func(*testing.T, adaptertest.Adapter)) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) { test(t, newEnv(t).adapter(mode)) })
	}
}

// TestNoScriptFallback: on a server that lost its scripts (SCRIPT FLUSH,
// a restart), a step costs EVALSHA + EVAL once, alone or batched, and then
// EVALSHA only.
func TestNoScriptFallback(t *testing.T) {
	// No FUNCTION command: the steps go as EVALSHA (TestFunctions checks FCALL).
	e := newEnvAt(t, redisserver.StartT(t, redisserver.Options{Args: []string{"--rename-command", "FUNCTION", ""}}).Addr)
	b, c := e.backend(Tracking, nil)
	_ = b.Release(ctx, "n", "nobody") // dials
	e.do("SCRIPT", "FLUSH")
	c.Take()
	mustAcquire(t, b, req("n", "A", false))
	adaptertest.ExpectCost(t, &c.Log, "first acquire on a flushed server (EVALSHA, then EVAL)", 2, 2)
	mustAcquire(t, b, req("n", "A", false))
	adaptertest.ExpectCost(t, &c.Log, "second acquire", 1, 1)
	e.do("SCRIPT", "FLUSH")
	gs, err := b.AcquireBatch(ctx, []backend.AcquireRequest{req("n", "A", false), req("n2", "A", false), req("n", "B", true)})
	if err != nil {
		t.Fatal(err)
	}
	if !gs[0].Acquired || gs[0].Fence == 0 || !gs[1].Acquired || !gs[2].Queued {
		t.Fatalf("AcquireBatch after SCRIPT FLUSH = %+v", gs)
	}
	adaptertest.ExpectCost(t, &c.Log, "a batch of 3 on a flushed server, Tracking mode (an acquire_many EVALSHA, then EVAL)", 2, 2)
	e.do("SCRIPT", "FLUSH")
	res, err := b.Heartbeat(ctx, []backend.Waiter{wt("n", "B"), wt("n2", "B")}, time.Minute)
	if err != nil || !res[0].Queued || res[1].Queued {
		t.Fatalf("Heartbeat after SCRIPT FLUSH = %+v, %v", res, err)
	}
}

// TestNoTrackingReads: the scripts read no key again after writing it, in
// either mode: the Tracking mode tracks its inbox keys only (broadcasting
// mode), never a key a step reads.
func TestNoTrackingReads(t *testing.T) {
	e := newEnvAt(t, redisserver.StartT(t, redisserver.Options{}).Addr)
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
		if a, x := afterAcquire-before, e.calls("pttl")-afterAcquire; a != 0 || x != 0 {
			t.Fatalf("%v: PTTL calls by Acquire %d, by Extend %d; want none", mode, a, x)
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
	return redisserver.CommandStat(e.t, info, name, "calls")
}

// TestFunctions: the scripts go as FCALL of the function library, with
// EVALSHA as the fallback (see adaptertest.Functions).
func TestFunctions(t *testing.T) {
	adaptertest.Functions(t, func(t *testing.T, addr string) (backend.Backend, func() bool) {
		b, _ := newEnvAt(t, addr).backend(PubSub, nil)
		return b, b.run.Functions
	})
}
