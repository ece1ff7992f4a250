package rueidisbackend

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/adaptertest"
	"github.com/redislocker/lock/internal/redistest"
)

// The command-cost tests both adapters run (see internal/adaptertest), in
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
	e := newEnvAt(t, redistest.Start(t).Addr)
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
	adaptertest.ExpectCost(t, &c.Log, "a batch of 3 on a flushed server, Tracking mode (3 EVALSHA, then 3 EVAL)", 6, 2)
	e.do("SCRIPT", "FLUSH")
	res, err := b.Heartbeat(ctx, []backend.Waiter{wt("n", "B"), wt("n2", "B")}, time.Minute)
	if err != nil || !res[0].Queued || res[1].Queued {
		t.Fatalf("Heartbeat after SCRIPT FLUSH = %+v, %v", res, err)
	}
}

// TestTrackingReadsOnlyInTrackingMode: a grant and an extend read the lock
// key again (one PTTL each on the server) in Tracking mode only, where
// NOLOOP would otherwise stop the connection from tracking the key it
// wrote. In PubSub mode nothing needs that read.
func TestTrackingReadsOnlyInTrackingMode(t *testing.T) {
	e := newEnvAt(t, redistest.Start(t).Addr)
	pttl := map[Mode][2]int64{} // mode -> PTTL calls by Acquire, by Extend
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
		pttl[mode] = [2]int64{afterAcquire - before, e.calls("pttl") - afterAcquire}
		if err := b.Release(ctx, id, "A"); err != nil {
			t.Fatal(err)
		}
	}
	tr, ps := pttl[Tracking], pttl[PubSub]
	t.Logf("PTTL calls on the server (Acquire, Extend): tracking %v, pubsub %v", tr, ps)
	if tr[0] != ps[0]+1 || tr[1] != ps[1]+1 {
		t.Fatalf("PTTL calls (Acquire, Extend): tracking %v, pubsub %v; want one more read each in Tracking mode only", tr, ps)
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
