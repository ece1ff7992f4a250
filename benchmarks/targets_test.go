package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// syntheticResults is a run where ours/go-redis is well inside every
// target, ours/rueidis well outside every one, and ours/rueidis-pubsub has
// no figure the targets need (scenarios left out or failed). The figures
// are far from the thresholds, so a threshold may move without changing
// the outcome; a comparison turned around does change it.
func syntheticResults() *Results {
	const rtt = 50.0 // µs
	res := &Results{
		Libs: []LibInfo{
			{Name: "ours/go-redis", Ours: true}, {Name: "ours/rueidis", Ours: true}, {Name: "ours/rueidis-pubsub", Ours: true},
			{Name: "ours/memory", Ours: true}, {Name: "redislock"}, {Name: "redislock/tuned"},
		},
		Floor: Floor{PingUs: rtt},
	}
	unc := func(lib string, perSec, cpu float64) Uncontended {
		return Uncontended{Lib: lib, Rounds: 5, Cycles: 1000, PerSec: perSec, ServerCPUUs: cpu, ServerCmds: 5}
	}
	res.Uncontended = []Uncontended{
		unc("redislock", 5000, 50),
		unc("ours/go-redis", 7500, 40),            // 1.5x the rate, 0.8x the CPU
		unc("ours/rueidis", 2500, 100),            // 0.5x the rate, 2.0x the CPU
		{Lib: "ours/rueidis-pubsub", Err: "boom"}, // failed
		unc("ours/memory", 1e6, 0),
	}
	// hold 1 ms: the FIFO floor is 7 x (1100 + 2 x 50) µs = 8.4 ms.
	cont := func(lib string, holdMs float64, perSec, cpu, cmds, xfloor, p99, fair float64) Contended {
		return Contended{Lib: lib, HoldMs: holdMs, Workers: 8, Procs: 8, Rounds: 3, Acquisitions: 1000, PerSec: perSec,
			MeanHoldUs: 1100, XFloor: xfloor, WaitP99Ms: p99, Fairness: fair, ServerCPUUs: cpu, ServerCmds: cmds}
	}
	res.Contended = []Contended{
		cont("redislock/tuned", 1, 600, 300, 60, 0.8, 70, 0.7),
		cont("ours/go-redis", 1, 700, 150, 10, 0.98, 8.4, 1.0),  // 0.5x CPU, 10 cmds, 0.98x floor, p99 1.0x FIFO floor, fair
		cont("ours/rueidis", 1, 400, 600, 40, 0.5, 25.2, 0.5),   // 2.0x CPU, 40 cmds, 0.5x floor, p99 3.0x, unfair
		cont("ours/rueidis-pubsub", 1, 500, 200, 10, 0.9, 9, 1), // one process: not the 8-process case
		cont("redislock/tuned", 0, 8000, 50, 10, 0, 5, 0.7),
		cont("ours/go-redis", 0, 7200, 100, 20, 0, 5, 0.99), // 0.9x redislock/tuned, fair
		cont("ours/rueidis", 0, 1600, 100, 20, 0, 5, 0.4),   // 0.2x, unfair
	}
	res.Contended[3].Procs = 1
	res.Many = []Many{
		{Lib: "ours/go-redis", N: 10000, Rounds: 3, Ratio: 40},
		{Lib: "ours/rueidis", N: 10000, Rounds: 3, Ratio: 5},
		{Lib: "ours/rueidis-pubsub", N: 10000, Err: "boom"},
	}
	res.BytesLeft = []BytesLeft{
		{Lib: "ours/go-redis", N: 100, BytesAfterBound: 0},
		{Lib: "ours/rueidis", N: 100, BytesAfterBound: 500},
	}
	return res
}

func TestTargetsMetMissedNotMeasured(t *testing.T) {
	res := syntheticResults()
	finish(res)
	want := map[string]string{"ours/go-redis": targetMet, "ours/rueidis": targetMissed, "ours/rueidis-pubsub": targetNotMeasured}
	got := map[string]int{}
	for _, tg := range res.Targets {
		w, ok := want[tg.Adapter]
		if !ok {
			t.Errorf("target for %s, which is not one of our Redis adapters: %+v", tg.Adapter, tg)
			continue
		}
		got[tg.Adapter]++
		if tg.Status != w {
			t.Errorf("%s, %q: %s (value %v %s %v: %s), want %s", tg.Adapter, tg.Target, tg.Status, tg.Value, tg.Op, tg.Threshold, tg.Measured, w)
		}
		if tg.Status == targetNotMeasured && !strings.Contains(tg.Measured, "ours/rueidis-pubsub") {
			t.Errorf("%s, %q: not measured without naming the missing scenario: %q", tg.Adapter, tg.Target, tg.Measured)
		}
	}
	for a := range want {
		if got[a] != len(targetTable) {
			t.Errorf("%s: %d targets, want %d", a, got[a], len(targetTable))
		}
	}
}

// TestTargetValues checks the figures against hand-computed ones (for
// ours/go-redis in syntheticResults).
func TestTargetValues(t *testing.T) {
	res := syntheticResults()
	want := []float64{
		1.5,  // cycles/s vs redislock: 7500 / 5000
		0.8,  // Redis CPU per cycle: 40 / 50
		0.5,  // Redis CPU per acquisition: 150 / 300
		10,   // server commands per acquisition
		0.98, // x floor
		1.0,  // wait p99 8.4 ms / (7 x (1100 + 2 x 50) µs)
		1.0,  // fairness, hold 1 ms
		0.99, // fairness, hold 0
		0.9,  // hold 0: 7200 / 8000
		40,   // AcquireMany
		0,    // bytes
	}
	if len(want) != len(targetTable) {
		t.Fatalf("%d expected values for %d targets", len(want), len(targetTable))
	}
	for i, spec := range targetTable {
		tg := evalTarget(res, "ours/go-redis", spec)
		if math.Abs(tg.Value-want[i]) > 1e-9 {
			t.Errorf("%q: value %v, want %v (%s)", spec.Name, tg.Value, want[i], tg.Measured)
		}
	}
}

// TestTargetsNeedThePeer: without redislock's uncontended figures, the
// uncontended targets are not measured even where ours has figures.
func TestTargetsNeedThePeer(t *testing.T) {
	res := syntheticResults()
	res.Uncontended = res.Uncontended[1:] // no redislock
	finish(res)
	n := 0
	for _, tg := range res.Targets {
		if tg.Adapter == "ours/go-redis" && strings.HasPrefix(tg.Target, "uncontended") {
			n++
			if tg.Status != targetNotMeasured || !strings.Contains(tg.Measured, "uncontended/redislock") {
				t.Errorf("%q: %s (%s), want not measured for lack of uncontended/redislock", tg.Target, tg.Status, tg.Measured)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d uncontended targets, want 2", n)
	}
}

func TestCmpOpBounds(t *testing.T) {
	for _, c := range []struct {
		op        cmpOp
		v, thr    float64
		wantHolds bool
	}{
		{atLeast, 1.0, 1.0, true}, {atLeast, 1.01, 1.0, true}, {atLeast, 0.99, 1.0, false},
		{atMost, 20, 20, true}, {atMost, 19, 20, true}, {atMost, 21, 20, false},
	} {
		if got := c.op.holds(c.v, c.thr); got != c.wantHolds {
			t.Errorf("%v %s %v: %v, want %v", c.v, c.op, c.thr, got, c.wantHolds)
		}
	}
}

// TestTargetsSection: the printed tables have the Targets section, one row
// per target and adapter, with its status.
func TestTargetsSection(t *testing.T) {
	res := syntheticResults()
	finish(res)
	md := markdown(res)
	if !strings.Contains(md, "**Targets**") {
		t.Fatalf("no Targets section:\n%s", md)
	}
	for _, tg := range res.Targets {
		row := fmt.Sprintf("| %s | %s | ", tg.Adapter, tg.Target)
		i := strings.Index(md, row)
		if i < 0 {
			t.Errorf("no row %q", row)
			continue
		}
		line := md[i : i+strings.IndexByte(md[i:], '\n')]
		if !strings.Contains(line, " | "+tg.Status+" | ") {
			t.Errorf("row without its status %q: %s", tg.Status, line)
		}
	}
	n := len(targetTable)
	if want := fmt.Sprintf("%d met, %d missed, %d not measured", n, n, n); !strings.Contains(md, want) {
		t.Errorf("the section does not say %q", want)
	}
}
