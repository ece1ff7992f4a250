package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The performance targets of issue 25, each evaluated for every Redis
// adapter of ours from the figures of one run. A target compares one
// figure (mostly a ratio to a peer or to a floor measured in the same run)
// with a threshold; changing a threshold is changing one line of
// targetTable.

// cmpOp is a target's comparison of its figure with its threshold; both
// are inclusive.
type cmpOp string

const (
	atLeast cmpOp = ">="
	atMost  cmpOp = "<="
)

// holds reports whether value meets threshold under op.
func (op cmpOp) holds(value, threshold float64) bool {
	switch op {
	case atLeast:
		return value >= threshold
	case atMost:
		return value <= threshold
	}
	panic(fmt.Sprintf("cmpOp %q", string(op)))
}

// Target statuses.
const (
	targetMet         = "met"
	targetMissed      = "missed"
	targetNotMeasured = "not measured"
)

// reading is a target's figure for one adapter: its value and how it was
// computed, or why the run could not compute it.
type reading struct {
	value   float64
	detail  string
	missing string // non-empty: not measured, and why
}

func notMeasured(why string) reading { return reading{missing: why} }

// targetSpec is one row of targetTable.
type targetSpec struct {
	Name      string  // what is compared, as the report prints it
	Op        cmpOp   // how the figure is compared with Threshold
	Threshold float64 // in Unit
	Unit      string  // of the figure and the threshold: "x" (a ratio), " B", or "" (a count or a fraction)
	// figure computes the figure for adapter from the run's results.
	figure func(res *Results, adapter string) reading
}

// The peers the targets compare with: bsm/redislock at the retry of its
// documented example (uncontended, where it never retries) and at a 1 ms
// retry (contended).
const (
	peerUnc  = "redislock"
	peerCont = "redislock/tuned"
)

// targetTable is issue 25's targets, in the report's order.
var targetTable = []targetSpec{
	{"uncontended: cycles/s vs redislock", atLeast, 1.0, "x", uncRate},
	{"uncontended: Redis CPU per cycle vs redislock", atMost, 1.1, "x", uncCPU},
	{"8 processes, hold 1 ms: Redis CPU per acquisition vs redislock/tuned (1 ms retry)", atMost, 1.0, "x", contCPU},
	{"8 processes, hold 1 ms: server commands per acquisition", atMost, 20, "", contServerCmds},
	{"8 processes, hold 1 ms: acquisitions/s vs the floor 1/(measured hold + 2 RTT)", atLeast, 0.9, "x", contXFloor},
	{"8 processes, hold 1 ms: wait p99 vs the FIFO floor 7 x (measured hold + 2 RTT)", atMost, 1.5, "x", contWaitP99},
	{"8 processes, hold 1 ms: fairness (min/max acquisitions per worker)", atLeast, 0.95, "", contFairness(1)},
	{"8 processes, hold 0: fairness (min/max acquisitions per worker)", atLeast, 0.95, "", contFairness(0)},
	{"8 processes, hold 0: acquisitions/s vs redislock/tuned (1 ms retry)", atLeast, 0.6, "x", hold0Rate},
	{"AcquireMany of N free ids (10,000 in the full run) vs a loop of Acquire", atLeast, 20, "x", manyRatio},
	{"bytes left per distinct id locked once, after the idle bound", atMost, 64, " B", bytesAfterBound},
}

// targetAdapters returns our Redis adapters: the ones the targets are for.
func targetAdapters(res *Results) []string {
	var as []string
	for _, l := range res.Libs {
		if l.Ours && l.Name != "ours/memory" {
			as = append(as, l.Name)
		}
	}
	return as
}

// Target is one target evaluated for one adapter (results.json keeps
// them; -render evaluates them again).
type Target struct {
	Adapter   string
	Target    string
	Op        string
	Threshold float64
	Unit      string  `json:",omitempty"`
	Value     float64 // the figure; 0 when not measured
	Status    string  // met, missed or not measured
	Measured  string  // how Value was computed, or why it was not measured
}

// targets evaluates targetTable for every Redis adapter of ours.
func targets(res *Results) []Target {
	var ts []Target
	for _, a := range targetAdapters(res) {
		for _, spec := range targetTable {
			ts = append(ts, evalTarget(res, a, spec))
		}
	}
	return ts
}

func evalTarget(res *Results, adapter string, spec targetSpec) Target {
	t := Target{Adapter: adapter, Target: spec.Name, Op: string(spec.Op), Threshold: spec.Threshold, Unit: spec.Unit}
	r := spec.figure(res, adapter)
	if r.missing == "" && (math.IsNaN(r.value) || math.IsInf(r.value, 0)) {
		r = notMeasured("no finite value (" + r.detail + ")")
	}
	switch {
	case r.missing != "":
		t.Status, t.Measured = targetNotMeasured, r.missing
	case spec.Op.holds(r.value, spec.Threshold):
		t.Status, t.Value, t.Measured = targetMet, r.value, r.detail
	default:
		t.Status, t.Value, t.Measured = targetMissed, r.value, r.detail
	}
	return t
}

// fmtThreshold formats a target's threshold in its unit.
func fmtThreshold(v float64, unit string) string {
	return strconv.FormatFloat(v, 'g', -1, 64) + unit
}

// fmtTargetValue formats a target's figure in its unit.
func fmtTargetValue(v float64, unit string) string {
	switch unit {
	case "x":
		return f2(v) + "x"
	case " B":
		return num(v) + " B"
	}
	return f2(v)
}

// ---- the figures ----

func uncScenario(lib string) string { return "uncontended/" + lib }

// contName is the scenario name of a contended case, "contended-hold1ms".
func contName(holdMs float64) string {
	return "contended-" + holdName(time.Duration(holdMs*float64(time.Millisecond)))
}

// uncontended returns lib's uncontended result, or why there is none.
func (res *Results) uncontended(lib string) (*Uncontended, string) {
	for i := range res.Uncontended {
		if u := &res.Uncontended[i]; u.Lib == lib {
			if u.Err != "" || u.Cycles == 0 {
				return nil, uncScenario(lib) + " failed"
			}
			return u, ""
		}
	}
	return nil, "the run left out " + uncScenario(lib)
}

// contended returns lib's contended result at holdMs with each worker in
// its own process, or why there is none.
func (res *Results) contended(lib string, holdMs float64) (*Contended, string) {
	s := contName(holdMs) + "/" + lib
	for i := range res.Contended {
		c := &res.Contended[i]
		if c.Lib == lib && math.Abs(c.HoldMs-holdMs) < 0.01 && c.Procs == c.Workers {
			if c.Err != "" || c.Acquisitions == 0 {
				return nil, s + " failed"
			}
			return c, ""
		}
	}
	return nil, "the run left out " + s
}

// whyNot joins the reasons of the figures a target lacks.
func whyNot(reasons ...string) string {
	var rs []string
	for _, r := range reasons {
		if r != "" {
			rs = append(rs, r)
		}
	}
	return strings.Join(rs, "; ")
}

func uncRate(res *Results, a string) reading {
	u, why := res.uncontended(a)
	p, whyP := res.uncontended(peerUnc)
	if u == nil || p == nil {
		return notMeasured(whyNot(why, whyP))
	}
	return reading{value: u.PerSec / p.PerSec, detail: fmt.Sprintf("%s vs %s cycles/s (medians of %d rounds interleaved with redislock's)",
		num(u.PerSec), num(p.PerSec), u.Rounds)}
}

func uncCPU(res *Results, a string) reading {
	u, why := res.uncontended(a)
	p, whyP := res.uncontended(peerUnc)
	if u == nil || p == nil {
		return notMeasured(whyNot(why, whyP))
	}
	return reading{value: u.ServerCPUUs / p.ServerCPUUs, detail: fmt.Sprintf("%.1f vs %.1f µs per cycle, over all rounds; %.1f vs %.1f server commands",
		u.ServerCPUUs, p.ServerCPUUs, u.ServerCmds, p.ServerCmds)}
}

func contCPU(res *Results, a string) reading {
	c, why := res.contended(a, 1)
	p, whyP := res.contended(peerCont, 1)
	if c == nil || p == nil {
		return notMeasured(whyNot(why, whyP))
	}
	return reading{value: c.ServerCPUUs / p.ServerCPUUs, detail: fmt.Sprintf("%.0f vs %.0f µs per acquisition", c.ServerCPUUs, p.ServerCPUUs)}
}

func contServerCmds(res *Results, a string) reading {
	c, why := res.contended(a, 1)
	if c == nil {
		return notMeasured(why)
	}
	return reading{value: c.ServerCmds, detail: fmt.Sprintf("%.1f client commands; %s", c.ClientCmds, topCommands(c.Cost, c.Acquisitions))}
}

func contXFloor(res *Results, a string) reading {
	c, why := res.contended(a, 1)
	if c == nil {
		return notMeasured(why)
	}
	return reading{value: c.XFloor, detail: fmt.Sprintf("median of %d rounds, each against its own hold and RTT; %s acq/s, the run's floor 1/(%.0f + 2 x %.1f µs) = %s",
		c.Rounds, num(c.PerSec), c.MeanHoldUs, res.Floor.PingUs, num(c.Floor))}
}

func contWaitP99(res *Results, a string) reading {
	c, why := res.contended(a, 1)
	if c == nil {
		return notMeasured(why)
	}
	others := c.Workers - 1
	floorMs := float64(others) * (c.MeanHoldUs + 2*res.Floor.PingUs) / 1e3
	return reading{value: c.WaitP99Ms / floorMs, detail: fmt.Sprintf("p99 %.1f ms vs %d x (%.0f + 2 x %.1f µs) = %.1f ms (p50 %.1f, max %.1f)",
		c.WaitP99Ms, others, c.MeanHoldUs, res.Floor.PingUs, floorMs, c.WaitP50Ms, c.WaitMaxMs)}
}

func contFairness(holdMs float64) func(*Results, string) reading {
	return func(res *Results, a string) reading {
		c, why := res.contended(a, holdMs)
		if c == nil {
			return notMeasured(why)
		}
		return reading{value: c.Fairness, detail: fmt.Sprintf("median of %d rounds; %d/%d in the median round", c.Rounds, c.MinPerWorker, c.MaxPerWorker)}
	}
}

func hold0Rate(res *Results, a string) reading {
	c, why := res.contended(a, 0)
	p, whyP := res.contended(peerCont, 0)
	if c == nil || p == nil {
		return notMeasured(whyNot(why, whyP))
	}
	return reading{value: c.PerSec / p.PerSec, detail: fmt.Sprintf("%s vs %s acq/s (medians of %d interleaved rounds; redislock/tuned's fairness %.2f)",
		num(c.PerSec), num(p.PerSec), c.Rounds, p.Fairness)}
}

func manyRatio(res *Results, a string) reading {
	for _, m := range res.Many {
		if m.Lib != a {
			continue
		}
		if m.Err != "" || m.Rounds == 0 {
			return notMeasured("acquiremany/" + a + " failed")
		}
		return reading{value: m.Ratio, detail: fmt.Sprintf("N = %d: loop %.3f s vs AcquireMany %.3f s (medians of %d rounds); Redis CPU %.1f vs %.1f µs per id",
			m.N, m.LoopSeconds, m.ManySeconds, m.Rounds, m.LoopServerCPUUs, m.ManyServerCPUUs)}
	}
	return notMeasured("the run left out acquiremany/" + a)
}

// bytesAfterBound is what the bytes-left scenario measures after the idle
// bound: the keys whose names hold the id and have no TTL, measured right
// away. Keys shared by many ids (per hash slot) are not counted.
func bytesAfterBound(res *Results, a string) reading {
	for _, bl := range res.BytesLeft {
		if bl.Lib != a {
			continue
		}
		if bl.Err != "" || bl.N == 0 {
			return notMeasured("bytesleft/" + a + " failed")
		}
		after := "no key naming an id was left"
		if bl.KeysPerID > 0 {
			after = fmt.Sprintf("%.0f B/id in %.2f keys/id were left, those with a TTL gone within %s", bl.BytesPerID, bl.KeysPerID, boundText(bl.BoundSeconds))
		}
		return reading{value: bl.BytesAfterBound, detail: fmt.Sprintf(
			"measured after the idle bound only: MEMORY USAGE of the keys naming the id that have no TTL, over %d ids locked once; "+
				"right after the releases %s; keys shared by the ids (per hash slot) are not counted", bl.N, after)}
	}
	return notMeasured("the run left out bytesleft/" + a)
}
