package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The shared scenarios' tables and CSV rows, with every figure's ratio to
// the peer pattern's (peerShared) in the same run.

// sharedPeer returns the peer's row of scenario, if the run has one
// without an error.
func (res *Results) sharedPeer(scenario string) (Shared, bool) {
	for _, s := range res.Shared {
		if s.Scenario == scenario && s.Lib == peerShared && s.Err == "" && s.Acquisitions > 0 {
			return s, true
		}
	}
	return Shared{}, false
}

// ratio returns v / of, or NaN when there is no peer figure to divide by.
func ratio(v, of float64, ok bool) float64 {
	if !ok || of == 0 {
		return math.NaN()
	}
	return v / of
}

// xText formats a ratio to the peer: "1.23x", "peer" on the peer's own
// row, "-" when there is none.
func xText(lib string, v float64) string {
	switch {
	case lib == peerShared:
		return "peer"
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "-"
	}
	return f2(v) + "x"
}

// sharedScenarios returns the scenarios of res.Shared in order.
func sharedScenarios(res *Results) []string {
	var ss []string
	for _, s := range res.Shared {
		if !slices.Contains(ss, s.Scenario) {
			ss = append(ss, s.Scenario)
		}
	}
	return ss
}

// writeShared writes a table per shared scenario.
func writeShared(b *strings.Builder, res *Results) {
	t := mdTable{b}
	cfg := res.Meta.Config
	for _, scenario := range sharedScenarios(res) {
		var rows []Shared
		for _, s := range res.Shared {
			if s.Scenario == scenario {
				rows = append(rows, s)
			}
		}
		first := rows[0]
		peer, ok := res.sharedPeer(scenario)
		if first.WriteEvery == 0 {
			fmt.Fprintf(b, "**Semaphore `%s`** (%d processes, one worker each, on one id of %d permits, each acquisition 1 permit held %s; "+
				"ours: `AcquireOptions{Capacity: %d}`; %s: one key per permit, see the README; %d rounds of %.1f s: acq/s, x floor and min/max are medians of the rounds, "+
				"waits over all acquisitions and the waits going on at each window's end; x floor = acq/s / (%d / (measured hold + 2 RTT)); "+
				"\"vs peer\" = ours / %s in this run; violations = grants over %d permits held at once, by the tool's count of its holders: must be 0):\n\n",
				scenario, first.Workers, first.Capacity, holdLabel(first.HoldMs), first.Capacity, peerShared, cfg.ContRounds, cfg.ContDur.Seconds(),
				first.Capacity, peerShared, first.Capacity)
			t.head("library", "acq/s", "vs peer", "x floor", "wait p50 / p99 / max ms", "wait p99 vs peer", "min/max per worker",
				"server CPU µs/acq", "vs peer", "server cmds/acq", "client cmds/acq", "peak permits held", "violations", "gave up")
			for _, s := range rows {
				if s.Err != "" {
					errRow(t, s.Lib, s.Err, 14)
					continue
				}
				t.row(s.Lib, num(s.PerSec), xText(s.Lib, ratio(s.PerSec, peer.PerSec, ok)), f2(s.XFloor),
					fmt.Sprintf("%s / %s / %s", f1(s.WaitP50Ms), f1(s.WaitP99Ms), f1(s.WaitMaxMs)),
					xText(s.Lib, ratio(s.WaitP99Ms, peer.WaitP99Ms, ok)),
					fmt.Sprintf("%s (%d/%d)", f2(s.Fairness), s.MinPerWorker, s.MaxPerWorker),
					f1(s.ServerCPUUs), xText(s.Lib, ratio(s.ServerCPUUs, peer.ServerCPUUs, ok)),
					f1(s.ServerCmds), f1(s.ClientCmds),
					fmt.Sprintf("%d of %d", s.PeakPermits, s.Capacity), strconv.Itoa(s.Violations), strconv.Itoa(s.GaveUps))
			}
			b.WriteString("\n")
			continue
		}
		fmt.Fprintf(b, "**Reader-writer lock `%s`** (%d processes, one worker each, on one id; 1 acquisition in %d of each worker is a write, "+
			"the workers out of step, the rest reads; every hold %s; ours: readers `AcquireOptions{Capacity: %d}`, writers `{Capacity: %d, Permits: %d}`; "+
			"%s: readers take one of %d slot keys, a writer all of them in order, see the README; %d rounds of %.1f s, medians of the rounds; "+
			"waits over all acquisitions and the waits going on at each window's end; fairness = min/max acquisitions per worker of the class; "+
			"\"vs peer\" = ours / %s in this run; violations = grants over %d permits held at once (a writer holds %d), by the tool's count: must be 0):\n\n",
			scenario, first.Workers, first.WriteEvery, holdLabel(first.HoldMs), first.Capacity, first.Capacity, first.Capacity,
			peerShared, first.Capacity, cfg.ContRounds, cfg.ContDur.Seconds(), peerShared, first.Capacity, first.Capacity)
		t.head("library", "reads/s", "vs peer", "writes/s", "vs peer", "read wait p50 / p99 ms", "write wait p50 / p99 / max ms", "write p99 vs peer",
			"fairness reads", "fairness writes", "server CPU µs/acq", "vs peer", "server cmds/acq", "client cmds/acq", "peak permits held", "violations")
		for _, s := range rows {
			if s.Err != "" {
				errRow(t, s.Lib, s.Err, 16)
				continue
			}
			t.row(s.Lib, num(s.ReadsPerSec), xText(s.Lib, ratio(s.ReadsPerSec, peer.ReadsPerSec, ok)),
				num(s.WritesPerSec), xText(s.Lib, ratio(s.WritesPerSec, peer.WritesPerSec, ok)),
				fmt.Sprintf("%s / %s", f1(s.ReadWaitP50Ms), f1(s.ReadWaitP99Ms)),
				fmt.Sprintf("%s / %s / %s", f1(s.WriteWaitP50Ms), f1(s.WriteWaitP99Ms), f1(s.WriteWaitMaxMs)),
				xText(s.Lib, ratio(s.WriteWaitP99Ms, peer.WriteWaitP99Ms, ok)),
				f2(s.ReadFairness), f2(s.WriteFairness),
				f1(s.ServerCPUUs), xText(s.Lib, ratio(s.ServerCPUUs, peer.ServerCPUUs, ok)),
				f1(s.ServerCmds), f1(s.ClientCmds),
				fmt.Sprintf("%d of %d", s.PeakPermits, s.Capacity), strconv.Itoa(s.Violations))
		}
		b.WriteString("\n")
	}
}

// sharedCSVRows returns a CSV row per shared scenario and library; the
// ratios to the peer are left out where the run has no peer figure.
func sharedCSVRows(res *Results) []csvRow {
	var rows []csvRow
	for _, s := range res.Shared {
		peer, ok := res.sharedPeer(s.Scenario)
		ms := []metric{{"acq_per_s", s.PerSec}}
		if s.WriteEvery == 0 {
			ms = append(ms, metric{"x_floor", s.XFloor})
		} else {
			ms = append(ms, metric{"reads_per_s", s.ReadsPerSec}, metric{"writes_per_s", s.WritesPerSec})
		}
		ms = append(ms, metric{"wait_p50_ms", s.WaitP50Ms}, metric{"wait_p99_ms", s.WaitP99Ms}, metric{"wait_max_ms", s.WaitMaxMs})
		if s.WriteEvery > 0 {
			ms = append(ms, metric{"read_wait_p50_ms", s.ReadWaitP50Ms}, metric{"read_wait_p99_ms", s.ReadWaitP99Ms},
				metric{"write_wait_p50_ms", s.WriteWaitP50Ms}, metric{"write_wait_p99_ms", s.WriteWaitP99Ms},
				metric{"write_wait_max_ms", s.WriteWaitMaxMs},
				metric{"fairness_reads", s.ReadFairness}, metric{"fairness_writes", s.WriteFairness})
		}
		ms = append(ms,
			metric{"fairness_min_over_max", s.Fairness},
			metric{"min_per_worker", float64(s.MinPerWorker)}, metric{"max_per_worker", float64(s.MaxPerWorker)},
			metric{"client_cmds_per_acq", s.ClientCmds}, metric{"server_cmds_per_acq", s.ServerCmds},
			metric{"server_cpu_us_per_acq", s.ServerCPUUs},
			metric{"peak_permits", float64(s.PeakPermits)}, metric{"violations", float64(s.Violations)},
			metric{"gave_ups", float64(s.GaveUps)})
		if ok && s.Lib != peerShared {
			vs := []metric{
				{"acq_per_s_vs_peer", ratio(s.PerSec, peer.PerSec, ok)},
				{"wait_p99_vs_peer", ratio(s.WaitP99Ms, peer.WaitP99Ms, ok)},
				{"server_cpu_vs_peer", ratio(s.ServerCPUUs, peer.ServerCPUUs, ok)},
			}
			if s.WriteEvery > 0 {
				vs = append(vs, metric{"reads_per_s_vs_peer", ratio(s.ReadsPerSec, peer.ReadsPerSec, ok)},
					metric{"writes_per_s_vs_peer", ratio(s.WritesPerSec, peer.WritesPerSec, ok)},
					metric{"write_wait_p99_vs_peer", ratio(s.WriteWaitP99Ms, peer.WriteWaitP99Ms, ok)})
			}
			for _, m := range vs {
				if !math.IsNaN(m.v) && !math.IsInf(m.v, 0) {
					ms = append(ms, m)
				}
			}
		}
		rows = append(rows, csvRow{s.Scenario, s.Lib, s.Err, ms})
	}
	return rows
}
