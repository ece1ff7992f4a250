package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Results is everything one run measured; results.json holds it.
type Results struct {
	Meta        Meta
	Libs        []LibInfo
	Floor       Floor
	Uncontended []Uncontended
	Contended   []Contended
	// Shared is the shared scenarios (semaphore, reader-writer lock), ours
	// and the peer pattern (see shared.go).
	Shared []Shared
	Idle   []Idle
	// IdleBaselineCPUUsPerS is the server's CPU per second with no client
	// (its cron jobs), measured before the idle scenarios.
	IdleBaselineCPUUsPerS float64
	Many                  []Many
	// BytesLeft is what locking distinct ids once each leaves on the
	// server, per Redis library.
	BytesLeft []BytesLeft
	Targets   []Target
}

// Meta describes the run.
type Meta struct {
	Date         string
	Command      string
	Note         string `json:",omitempty"`
	Quick        bool
	GoVersion    string
	OS           string
	CPUs         int
	CPU          string
	RedisVersion string
	OwnServer    bool   // the tool started the server (its counters see only this run)
	LoadBefore   string // /proc/loadavg: other work on the machine
	LoadAfter    string
	Seconds      float64
	Config       config
}

// LibInfo is one entry of the library table.
type LibInfo struct {
	Name    string
	Ours    bool
	Setting string
}

// finish fills the floor's cycle rate and evaluates the targets.
func finish(res *Results) {
	res.Floor.CycleFloor = 1e6 / (2 * res.Floor.PingUs)
	for i := range res.Uncontended {
		if res.Uncontended[i].Lib == "ours/memory" {
			res.Uncontended[i].XFloor = 0
		}
	}
	res.Targets = targets(res)
}

func (res *Results) lib(name string) LibInfo {
	for _, l := range res.Libs {
		if l.Name == name {
			return l
		}
	}
	return LibInfo{Name: name}
}

// boundText is a BytesLeft bound: the longest TTL left, or "-" when no key
// was left.
func boundText(secs float64) string {
	if secs <= 0 {
		return "-"
	}
	return (time.Duration(secs * float64(time.Second))).Round(time.Second).String()
}

// topCommands lists the client-visible commands of a window (commandstats
// names, script-called ones included), per acquisition when n > 0.
func topCommands(c cost, n int) string {
	type kv struct {
		k string
		v int64
	}
	var l []kv
	for k, v := range c.PerCommand {
		l = append(l, kv{k, v[0]})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || l[i].v == l[j].v && l[i].k < l[j].k })
	var parts []string
	for i, e := range l {
		if i == 6 {
			break
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", e.k, float64(e.v)/float64(n)))
		} else {
			parts = append(parts, fmt.Sprintf("%s %d", e.k, e.v))
		}
	}
	if len(parts) == 0 {
		return "server: no command"
	}
	if n > 0 {
		return "server per acq: " + strings.Join(parts, ", ")
	}
	return "server: " + strings.Join(parts, ", ")
}

// num formats a rate with thousands separators and 3 significant digits
// below 100.
func num(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "-"
	case v >= 100 || v == 0:
		s := strconv.FormatInt(int64(math.Round(v)), 10)
		var b strings.Builder
		for i, r := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(r)
		}
		return b.String()
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
}

func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

type mdTable struct {
	b *strings.Builder
}

func (t mdTable) row(cells ...string) {
	t.b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
}

// head writes the header row; columns are right-aligned (numbers) except
// the first and those named in left.
func (t mdTable) head(cells ...string) {
	t.headAlign(nil, cells...)
}

func (t mdTable) headAlign(left map[int]bool, cells ...string) {
	t.row(cells...)
	sep := make([]string, len(cells))
	for i := range sep {
		sep[i] = "---:"
		if i == 0 || left[i] {
			sep[i] = "---"
		}
	}
	t.row(sep...)
}

func errRow(t mdTable, lib, err string, n int) {
	cells := []string{lib, "error: " + strings.ReplaceAll(err, "|", "/")}
	for len(cells) < n {
		cells = append(cells, "")
	}
	t.row(cells...)
}

// markdown renders the tables (also printed by the tool).
func markdown(res *Results) string {
	var b strings.Builder
	t := mdTable{&b}
	m := res.Meta
	mode := "full run"
	if m.Quick {
		mode = "quick run (smoke test: counts too small for conclusions)"
	}
	note := ""
	if m.Note != "" {
		note = " (" + m.Note + ")"
	}
	fmt.Fprintf(&b, "Run: %s, %s; `%s`%s; %s, %d CPUs (%s); Redis %s (%s); load average %s before, %s after; %.0f s.\n\n",
		m.Date, mode, m.Command, note, m.OS, m.CPUs, m.CPU, m.RedisVersion, map[bool]string{true: "started by the tool", false: "given"}[m.OwnServer],
		m.LoadBefore, m.LoadAfter, m.Seconds)

	lo, hi := res.Floor.PingUs, res.Floor.PingUs
	for _, p := range res.Floor.PingsUs {
		lo, hi = math.Min(lo, p), math.Max(hi, p)
	}
	fmt.Fprintf(&b, "**Floor.** Redis round trip (RTT) = %.1f µs: the median of %d go-redis PING measurements taken through the run (one before each round; "+
		"range %.1f-%.1f µs; %.1f at the start, %.1f at the end); rueidis PING %.1f µs. The 2-round-trip floor of an acquire+release cycle is 1/(2 RTT) = %s cycles/s. "+
		"Ratios to the floor (x floor) are taken per round, with that round's PING, and the median is shown.\n\n",
		res.Floor.PingUs, len(res.Floor.PingsUs), lo, hi, res.Floor.PingStartUs, res.Floor.PingEndUs, res.Floor.RueidisPingUs, num(res.Floor.CycleFloor))

	if len(res.Uncontended) > 0 {
		fmt.Fprintf(&b, "**Uncontended Acquire + Release** (one process, one worker, one id; median of %d rounds of %.1f s; per-cycle costs over all rounds):\n\n",
			res.Meta.Config.UncRounds, res.Meta.Config.UncDur.Seconds())
		t.head("library", "cycles/s", "x 2-RTT floor", "client cmds/cycle", "server cmds/cycle", "server CPU µs/cycle", "client CPU µs/cycle", "allocs/cycle", "B/cycle")
		for _, u := range res.Uncontended {
			if u.Err != "" {
				errRow(t, u.Lib, u.Err, 9)
				continue
			}
			x, cc, sc, cpu := f2(u.XFloor), f1(u.ClientCmds), f1(u.ServerCmds), f1(u.ServerCPUUs)
			if u.Lib == "ours/memory" {
				x, cc, sc, cpu = "(no Redis)", "-", "-", "-"
			}
			t.row(u.Lib, num(u.PerSec), x, cc, sc, cpu, f1(u.ClientCPUUs), num(u.AllocsPerOp), num(u.BytesPerOp))
		}
		b.WriteString("\n")
	}
	type contCase struct {
		ms    float64
		procs int
	}
	var cases []contCase
	for _, c := range res.Contended {
		cc := contCase{c.HoldMs, c.Procs}
		if !slices.Contains(cases, cc) {
			cases = append(cases, cc)
		}
	}
	for _, cc := range cases {
		var rows []Contended
		for _, c := range res.Contended {
			if c.HoldMs == cc.ms && c.Procs == cc.procs {
				rows = append(rows, c)
			}
		}
		who := fmt.Sprintf("%d processes, one worker each", res.Meta.Config.Workers)
		if cc.procs != res.Meta.Config.Workers {
			who = fmt.Sprintf("%d workers in %d process", res.Meta.Config.Workers, cc.procs)
		}
		fmt.Fprintf(&b, "**Contended, hold %s** (%s, on one id; floor = 1/(measured hold + 2 RTT); %d rounds of %.1f s: "+
			"acq/s, x floor and min/max are medians of the rounds, latencies over all acquisitions):\n\n",
			holdLabel(cc.ms), who, res.Meta.Config.ContRounds, res.Meta.Config.ContDur.Seconds())
		t.head("library", "acq/s", "x floor", "wait p50 / p99 / max ms", "hand-off p50 / p99 µs", "min/max per worker", "client cmds/acq", "server cmds/acq", "server CPU µs/acq", "gave up")
		for _, c := range rows {
			if c.Err != "" {
				errRow(t, c.Lib, c.Err, 10)
				continue
			}
			t.row(c.Lib, num(c.PerSec), f2(c.XFloor),
				fmt.Sprintf("%s / %s / %s", f1(c.WaitP50Ms), f1(c.WaitP99Ms), f1(c.WaitMaxMs)),
				fmt.Sprintf("%s / %s", num(c.HandoffP50Us), num(c.HandoffP99Us)),
				fmt.Sprintf("%s (%d/%d)", f2(c.Fairness), c.MinPerWorker, c.MaxPerWorker),
				f1(c.ClientCmds), f1(c.ServerCmds), f1(c.ServerCPUUs), strconv.Itoa(c.GaveUps))
		}
		b.WriteString("\n")
	}
	writeShared(&b, res)
	if len(res.Idle) > 0 {
		fmt.Fprintf(&b, "**Idle waiters** (%d waiters on an id held by another process, over %.1f s; per waiter, the holder's commands included; "+
			"server CPU includes the server's own %.0f µs/s measured with no client, i.e. %.0f µs/s per waiter):\n\n",
			res.Meta.Config.IdleWaiters, res.Meta.Config.IdleWindow.Seconds(), res.IdleBaselineCPUUsPerS, res.IdleBaselineCPUUsPerS/float64(res.Meta.Config.IdleWaiters))
		t.head("library", "processes", "client cmds/s", "server cmds/s", "server CPU µs/s")
		for _, i := range res.Idle {
			if i.Err != "" {
				errRow(t, i.Lib, i.Err, 5)
				continue
			}
			t.row(i.Lib, strconv.Itoa(i.Procs), num(i.ClientCmdsPerSec), num(i.ServerCmdsPerSec), num(i.ServerCPUUsPerS))
		}
		b.WriteString("\n")
	}
	if len(res.Many) > 0 {
		b.WriteString("**AcquireMany** of N free ids against a loop of Acquire over N other free ids (one process):\n\n")
		t.head("library", "N", "AcquireMany s", "loop s", "loop / AcquireMany", "snapshots", "client cmds/id (many / loop)", "server CPU µs/id (many / loop)")
		for _, m := range res.Many {
			if m.Err != "" {
				errRow(t, m.Lib, m.Err, 8)
				continue
			}
			t.row(m.Lib, strconv.Itoa(m.N), fmt.Sprintf("%.3f", m.ManySeconds), fmt.Sprintf("%.3f", m.LoopSeconds), f1(m.Ratio)+"x",
				strconv.Itoa(m.Snapshots), f2(m.ManyClientCmds)+" / "+f2(m.LoopClientCmds), f1(m.ManyServerCPUUs)+" / "+f1(m.LoopServerCPUUs))
		}
		b.WriteString("\n")
	}
	if len(res.BytesLeft) > 0 {
		fmt.Fprintf(&b, "**Bytes left** on the server per distinct id locked once (lock, then unlock, %d ids; MEMORY USAGE of the keys that hold the id). "+
			"Right after the last unlock, and after the idle bound: the longest TTL among those keys, by when every key with a TTL is gone. "+
			"What stays after the bound is the keys without a TTL, measured right away rather than waited for:\n\n", res.Meta.Config.BytesN)
		t.head("library", "keys/id right after", "bytes/id right after", "idle bound", "bytes left per distinct id locked once, after the idle bound")
		for _, bl := range res.BytesLeft {
			if bl.Err != "" {
				errRow(t, bl.Lib, bl.Err, 5)
				continue
			}
			t.row(bl.Lib, f2(bl.KeysPerID), num(bl.BytesPerID), boundText(bl.BoundSeconds), num(bl.BytesAfterBound))
		}
		b.WriteString("\n")
	}
	writeTargets(&b, res)
	b.WriteString("Libraries and settings:\n\n")
	t.headAlign(map[int]bool{1: true}, "library", "setting")
	for _, l := range res.Libs {
		t.row(l.Name, l.Setting)
	}
	return b.String()
}

// writeTargets writes the Targets section: every target for every Redis
// adapter of ours, met, missed or not measured.
func writeTargets(b *strings.Builder, res *Results) {
	if len(res.Targets) == 0 {
		return
	}
	count := map[string]int{}
	for _, tg := range res.Targets {
		count[tg.Status]++
	}
	quick := ""
	if res.Meta.Quick {
		quick = " A quick run's figures say nothing about the targets."
	}
	fmt.Fprintf(b, "**Targets** (issue 25's, per adapter of ours, from this run's figures; ratios within this run): %d met, %d missed, %d not measured "+
		"(a scenario the run left out or that failed).%s\n\n", count[targetMet], count[targetMissed], count[targetNotMeasured], quick)
	t := mdTable{b}
	t.headAlign(map[int]bool{1: true, 3: true, 4: true, 5: true}, "adapter", "target", "value", "wanted", "status", "from")
	for _, tg := range res.Targets {
		v := "-"
		if tg.Status != targetNotMeasured {
			v = fmtTargetValue(tg.Value, tg.Unit)
		}
		t.row(tg.Adapter, tg.Target, v, tg.Op+" "+fmtThreshold(tg.Threshold, tg.Unit), tg.Status, strings.ReplaceAll(tg.Measured, "|", "/"))
	}
	b.WriteString("\n")
}

func holdLabel(ms float64) string {
	if ms == 0 {
		return "0"
	}
	return strconv.FormatFloat(ms, 'g', -1, 64) + " ms"
}

// writeResults writes results.json, results.csv, table.md and the charts.
func writeResults(dir string, res *Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	if err := writeCSV(filepath.Join(dir, "results.csv"), res); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "table.md"), []byte(markdown(res)), 0o644); err != nil {
		return err
	}
	return writeCharts(dir, res)
}

// metric is one named figure of a CSV row.
type metric struct {
	name string
	v    float64
}

// csvRow is one result as the CSV lists it: a row with an error is left
// out.
type csvRow struct {
	scenario, lib, err string
	metrics            []metric
}

// csvRows returns the results of every scenario, in the CSV's order.
func csvRows(res *Results) []csvRow {
	f := res.Floor
	rows := []csvRow{{"floor", "redis", "", []metric{
		{"ping_us", f.PingUs}, {"ping_start_us", f.PingStartUs}, {"ping_end_us", f.PingEndUs},
		{"ping_rueidis_us", f.RueidisPingUs}, {"cycle_floor_per_s", f.CycleFloor},
	}}}
	for _, u := range res.Uncontended {
		rows = append(rows, csvRow{"uncontended", u.Lib, u.Err, []metric{
			{"cycles_per_s", u.PerSec}, {"x_floor", u.XFloor},
			{"client_cmds_per_cycle", u.ClientCmds}, {"server_cmds_per_cycle", u.ServerCmds},
			{"server_cpu_us_per_cycle", u.ServerCPUUs}, {"client_cpu_us_per_cycle", u.ClientCPUUs},
			{"allocs_per_cycle", u.AllocsPerOp}, {"bytes_per_cycle", u.BytesPerOp},
		}})
	}
	for _, c := range res.Contended {
		s := "contended_hold_" + strconv.FormatFloat(c.HoldMs, 'g', -1, 64) + "ms"
		if c.Procs != c.Workers {
			s += fmt.Sprintf("_%dproc", c.Procs)
		}
		rows = append(rows, csvRow{s, c.Lib, c.Err, []metric{
			{"acq_per_s", c.PerSec}, {"x_floor", c.XFloor},
			{"wait_p50_ms", c.WaitP50Ms}, {"wait_p99_ms", c.WaitP99Ms}, {"wait_max_ms", c.WaitMaxMs},
			{"handoff_p50_us", c.HandoffP50Us}, {"handoff_p99_us", c.HandoffP99Us},
			{"min_per_worker", float64(c.MinPerWorker)}, {"max_per_worker", float64(c.MaxPerWorker)},
			{"fairness_min_over_max", c.Fairness},
			{"client_cmds_per_acq", c.ClientCmds}, {"server_cmds_per_acq", c.ServerCmds},
			{"server_cpu_us_per_acq", c.ServerCPUUs}, {"gave_ups", float64(c.GaveUps)},
		}})
	}
	rows = append(rows, sharedCSVRows(res)...)
	for _, i := range res.Idle {
		rows = append(rows, csvRow{fmt.Sprintf("idle_%dprocs", i.Procs), i.Lib, i.Err, []metric{
			{"client_cmds_per_s_per_waiter", i.ClientCmdsPerSec},
			{"server_cmds_per_s_per_waiter", i.ServerCmdsPerSec},
			{"server_cpu_us_per_s_per_waiter", i.ServerCPUUsPerS},
		}})
	}
	for _, m := range res.Many {
		rows = append(rows, csvRow{"acquiremany", m.Lib, m.Err, []metric{
			{"n", float64(m.N)}, {"many_s", m.ManySeconds}, {"loop_s", m.LoopSeconds}, {"loop_over_many", m.Ratio},
		}})
	}
	for _, tg := range res.Targets {
		if tg.Status == targetNotMeasured {
			continue
		}
		met := 0.0
		if tg.Status == targetMet {
			met = 1
		}
		rows = append(rows, csvRow{"target: " + tg.Target, tg.Adapter, "", []metric{
			{"value", tg.Value}, {"threshold", tg.Threshold}, {"met", met},
		}})
	}
	for _, bl := range res.BytesLeft {
		rows = append(rows, csvRow{"bytesleft", bl.Lib, bl.Err, []metric{
			{"n", float64(bl.N)}, {"keys_per_id", bl.KeysPerID}, {"bytes_per_id", bl.BytesPerID},
			{"bound_s", bl.BoundSeconds}, {"bytes_per_id_after_bound", bl.BytesAfterBound},
		}})
	}
	return rows
}

// writeCSV writes one row per scenario, library and metric.
func writeCSV(path string, res *Results) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	_ = w.Write([]string{"scenario", "library", "metric", "value"})
	for _, r := range csvRows(res) {
		if r.err != "" {
			continue
		}
		for _, m := range r.metrics {
			_ = w.Write([]string{r.scenario, r.lib, m.name, strconv.FormatFloat(m.v, 'g', 6, 64)})
		}
	}
	w.Flush()
	return w.Error()
}
