package main

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Charts are horizontal bar charts written by hand as SVG: one file per
// metric and summary.svg with all of them, for the README.

type bar struct {
	label string
	value float64
	ours  bool
}

type chartSpec struct {
	file     string
	title    string
	bars     []bar
	ref      float64 // a vertical reference line (floor or target); 0 = none
	refLabel string
	log      bool
}

const (
	panelW  = 520.0
	labelW  = 130.0
	valueW  = 80.0
	barH    = 16.0
	barGap  = 5.0
	titleH  = 40.0
	footerH = 22.0
)

func (c chartSpec) height() float64 {
	return titleH + float64(len(c.bars))*(barH+barGap) + footerH
}

// scale maps a value to [0, 1] of the bar area.
func (c chartSpec) scale() (func(float64) float64, []float64) {
	hi := c.ref
	lo := math.Inf(1)
	for _, b := range c.bars {
		hi = math.Max(hi, b.value)
		if b.value > 0 {
			lo = math.Min(lo, b.value)
		}
	}
	if c.ref > 0 {
		lo = math.Min(lo, c.ref)
	}
	if hi <= 0 {
		hi = 1
	}
	if !c.log {
		step := niceStep(hi / 4)
		top := math.Ceil(hi*1.02/step) * step
		var ticks []float64
		for v := 0.0; v <= top+step/2; v += step {
			ticks = append(ticks, v)
		}
		return func(v float64) float64 { return math.Max(0, v) / top }, ticks
	}
	if math.IsInf(lo, 1) {
		lo = hi / 10
	}
	l0, l1 := math.Floor(math.Log10(lo))-1, math.Ceil(math.Log10(hi))
	if l1 <= l0 {
		l1 = l0 + 1
	}
	var ticks []float64
	for e := l0; e <= l1; e++ {
		ticks = append(ticks, math.Pow(10, e))
	}
	return func(v float64) float64 {
		if v <= 0 {
			return 0
		}
		return math.Max(0, (math.Log10(v)-l0)/(l1-l0))
	}, ticks
}

func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string { return html.EscapeString(s) }

// panel draws c with its top-left corner at (x, y).
func (c chartSpec) panel(b *strings.Builder, x, y float64) {
	f, ticks := c.scale()
	areaX := x + labelW
	areaW := panelW - labelW - valueW
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="13" font-weight="bold">%s</text>`+"\n", x+4, y+16, esc(c.title))
	top := y + titleH - 8
	bottom := top + float64(len(c.bars))*(barH+barGap)
	for _, t := range ticks {
		tx := areaX + f(t)*areaW
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e2e8f0"/>`+"\n", tx, top, tx, bottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="9" fill="#718096" text-anchor="middle">%s</text>`+"\n", tx, bottom+11, esc(num(t)))
	}
	for i, br := range c.bars {
		by := top + float64(i)*(barH+barGap)
		fill := "#a0aec0"
		if br.ours {
			fill = "#2b6cb0"
		}
		w := f(br.value) * areaW
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n", areaX-6, by+barH-4, esc(br.label))
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", areaX, by, math.Max(w, 0.5), barH, fill)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10">%s</text>`+"\n", areaX+w+4, by+barH-4, esc(num(br.value)))
	}
	if c.ref > 0 {
		rx := areaX + f(c.ref)*areaW
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c53030" stroke-dasharray="4 3"/>`+"\n", rx, top-4, rx, bottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="#c53030" text-anchor="middle">%s</text>`+"\n", rx, top-6, esc(c.refLabel))
	}
}

func svgDoc(w, h float64, body string) string {
	return fmt.Sprintf(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="Helvetica, Arial, sans-serif">`+"\n"+
		`<rect width="100%%" height="100%%" fill="white"/>`+"\n%s</svg>\n", w, h, w, h, body)
}

// charts builds the chart specs from the results.
func charts(res *Results) []chartSpec {
	var cs []chartSpec
	ours := func(name string) bool { return res.lib(name).Ours }
	order := func(bs []bar) []bar {
		sort.SliceStable(bs, func(i, j int) bool { return bs[i].ours && !bs[j].ours })
		return bs
	}
	var bs []bar
	for _, u := range res.Uncontended {
		if u.Err == "" && u.Lib != "ours/memory" {
			bs = append(bs, bar{u.Lib, u.PerSec, ours(u.Lib)})
		}
	}
	if len(bs) > 0 {
		cs = append(cs, chartSpec{file: "uncontended.svg", title: "Uncontended Acquire+Release, cycles/s (higher is better)", bars: order(bs),
			ref: res.Floor.CycleFloor, refLabel: "2-RTT floor"})
	}
	contended := func(hold float64, file, title string, metric func(Contended) float64, ref float64, refLabel string, log bool) {
		var bs []bar
		var floors []float64
		for _, c := range res.Contended {
			if c.Err == "" && c.HoldMs == hold && c.Procs == c.Workers {
				bs = append(bs, bar{c.Lib, metric(c), ours(c.Lib)})
				floors = append(floors, c.Floor)
			}
		}
		if len(bs) == 0 {
			return
		}
		if ref < 0 { // the floor: the median of the rows' floors (each uses its measured hold)
			sort.Float64s(floors)
			ref = floors[len(floors)/2]
		}
		cs = append(cs, chartSpec{file: file, title: title, bars: order(bs), ref: ref, refLabel: refLabel, log: log})
	}
	perSec := func(c Contended) float64 { return c.PerSec }
	contended(1, "contended-hold1ms.svg", "Contended, 8 processes, hold 1 ms: acquisitions/s", perSec, -1, "floor", false)
	contended(0, "contended-hold0.svg", "Contended, 8 processes, hold 0: acquisitions/s", perSec, -1, "2-RTT floor", false)
	contended(1, "wait-p99.svg", "Hold 1 ms: p99 wait, ms (log; lower is better)", func(c Contended) float64 { return c.WaitP99Ms }, 10, "target 10 ms", true)
	contended(1, "fairness.svg", "Hold 1 ms: min/max acquisitions per worker", func(c Contended) float64 { return c.Fairness }, 0.9, "target 0.9", false)
	contended(1, "commands.svg", "Hold 1 ms: client commands per acquisition (log)", func(c Contended) float64 { return c.ClientCmds }, 3, "target 3", true)
	contended(1, "redis-cpu.svg", "Hold 1 ms: Redis CPU µs per acquisition (log)", func(c Contended) float64 { return c.ServerCPUUs }, 0, "", true)
	bs = nil
	for _, i := range res.Idle {
		if i.Err == "" && i.Procs == res.Meta.Config.IdleWaiters {
			bs = append(bs, bar{i.Lib, i.ClientCmdsPerSec, ours(i.Lib)})
		}
	}
	if len(bs) > 0 {
		cs = append(cs, chartSpec{file: "idle.svg", title: "Idle waiters: client commands/s per waiter (log)", bars: order(bs), ref: 0.05, refLabel: "target 0.05", log: true})
	}
	return cs
}

// writeCharts writes each chart and summary.svg (two columns).
func writeCharts(dir string, res *Results) error {
	cs := charts(res)
	for _, c := range cs {
		var b strings.Builder
		c.panel(&b, 10, 6)
		if err := os.WriteFile(filepath.Join(dir, c.file), []byte(svgDoc(panelW+20, c.height()+10, b.String())), 0o644); err != nil {
			return err
		}
	}
	if len(cs) == 0 {
		return nil
	}
	var b strings.Builder
	y := 6.0
	rowH := 0.0
	for i, c := range cs {
		x := 10.0
		if i%2 == 1 {
			x += panelW + 20
		}
		c.panel(&b, x, y)
		rowH = math.Max(rowH, c.height())
		if i%2 == 1 || i == len(cs)-1 {
			y += rowH + 10
			rowH = 0
		}
	}
	fmt.Fprintf(&b, `<text x="10" y="%.1f" font-size="10" fill="#4a5568">%s</text>`+"\n", y+6,
		esc(fmt.Sprintf("%s, %d CPUs, Redis %s, RTT %.1f µs; blue: ours, grey: peers; dashed: floor or target. %s",
			res.Meta.Date, res.Meta.CPUs, res.Meta.RedisVersion, res.Floor.PingUs, res.Meta.Command)))
	return os.WriteFile(filepath.Join(dir, "summary.svg"), []byte(svgDoc(2*panelW+50, y+16, b.String())), 0o644)
}
