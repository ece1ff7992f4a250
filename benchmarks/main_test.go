package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestQuickRun runs the tool's quick mode end to end, as CI's smoke test:
// every scenario against a redis-server of its own (or REDIS_ADDR), and
// checks that it finishes without errors and writes its files. It asserts
// nothing about speed.
func TestQuickRun(t *testing.T) {
	if os.Getenv("REDIS_ADDR") == "" && os.Getenv("REDIS_SERVER") == "" {
		if _, err := exec.LookPath("redis-server"); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("no redis-server (CI is set, so this fails instead of skipping): %v", err)
			}
			t.Skipf("no redis-server, skipping (set REDIS_ADDR or install redis-server): %v", err)
		}
	}
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-quick", "-out", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("lockbench -quick exited %d:\n%s", code, stderr.String())
	}
	t.Log(stderr.String())

	var res Results
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if res.Floor.PingUs <= 0 {
		t.Errorf("no floor: %+v", res.Floor)
	}
	want := map[string]bool{}
	for _, l := range libs() {
		want[l.Name] = true
	}
	for _, u := range res.Uncontended {
		if u.Err != "" || u.Cycles == 0 {
			t.Errorf("uncontended %s: %d cycles, error %q", u.Lib, u.Cycles, u.Err)
		}
		delete(want, u.Lib)
	}
	for name := range want {
		t.Errorf("uncontended: no result for %s", name)
	}
	redisLibs := len(libs()) - 1 // all but the memory backend
	if got, w := len(res.Contended), 2*redisLibs; got != w {
		t.Errorf("%d contended results, want %d", got, w)
	}
	for _, c := range res.Contended {
		if c.Err != "" || c.Acquisitions == 0 {
			t.Errorf("contended %s hold %v ms: %d acquisitions, error %q", c.Lib, c.HoldMs, c.Acquisitions, c.Err)
		}
	}
	sharedLibs := 0
	for _, l := range libs() {
		if l.Shared {
			sharedLibs++
		}
	}
	if got, w := len(res.Shared), len(sharedCases())*sharedLibs; got != w {
		t.Errorf("%d shared results, want %d", got, w)
	}
	for _, s := range res.Shared {
		if s.Err != "" || s.Acquisitions == 0 {
			t.Errorf("%s %s: %d acquisitions, error %q", s.Scenario, s.Lib, s.Acquisitions, s.Err)
		}
		// The tool's own count of holders: never more permits held at
		// once than the capacity, ours and the peer pattern alike.
		if s.Violations != 0 || s.PeakPermits > s.Capacity {
			t.Errorf("%s %s: %d grants over the capacity, peak %d permits of %d", s.Scenario, s.Lib, s.Violations, s.PeakPermits, s.Capacity)
		}
		// Ours is FIFO: a writer is granted (a liveness check, not a
		// speed one; the peer pattern may starve its writers).
		if s.WriteEvery > 0 && res.lib(s.Lib).Ours && s.Writes == 0 {
			t.Errorf("%s %s: no write granted (%d reads)", s.Scenario, s.Lib, s.Reads)
		}
		if !strings.Contains(stdout.String(), "| "+s.Lib+" |") || !strings.Contains(stdout.String(), "`"+s.Scenario+"`") {
			t.Errorf("the printed tables have no %s row for %s", s.Scenario, s.Lib)
		}
	}
	if len(res.Idle) != redisLibs {
		t.Errorf("%d idle results, want %d", len(res.Idle), redisLibs)
	}
	for _, i := range res.Idle {
		if i.Err != "" {
			t.Errorf("idle %s: %s", i.Lib, i.Err)
		}
	}
	if len(res.Many) == 0 {
		t.Error("no AcquireMany result")
	}
	for _, m := range res.Many {
		if m.Err != "" || m.Ratio <= 0 {
			t.Errorf("AcquireMany %s: ratio %v, error %q", m.Lib, m.Ratio, m.Err)
		}
	}
	if len(res.BytesLeft) != redisLibs {
		t.Errorf("%d bytes-left results, want %d", len(res.BytesLeft), redisLibs)
	}
	for _, bl := range res.BytesLeft {
		if bl.Err != "" || bl.N == 0 {
			t.Errorf("bytes left %s: %d ids, error %q", bl.Lib, bl.N, bl.Err)
		}
		if res.lib(bl.Lib).Ours && bl.BytesAfterBound != 0 {
			t.Errorf("bytes left %s: %.0f B per id in keys without a TTL; every key of ours expires", bl.Lib, bl.BytesAfterBound)
		}
	}
	if got, want := len(res.Targets), 3*len(targetTable); got != want {
		t.Errorf("%d targets evaluated, want %d (every target for each of our 3 Redis adapters)", got, want)
	}
	for _, tg := range res.Targets {
		// The quick run runs every scenario: each target has its figures.
		if tg.Status != targetMet && tg.Status != targetMissed {
			t.Errorf("target %s, %q: %s (%s)", tg.Adapter, tg.Target, tg.Status, tg.Measured)
		}
	}
	if !strings.Contains(stdout.String(), "**Targets**") {
		t.Errorf("the printed tables have no Targets section:\n%s", stdout.String())
	}
	if !strings.Contains(stdout.String(), "| ours/go-redis |") {
		t.Errorf("the printed table has no row for ours/go-redis:\n%s", stdout.String())
	}
	// -render writes the same tables again from results.json.
	again := t.TempDir()
	var stdout2 bytes.Buffer
	if code := run([]string{"-render", filepath.Join(dir, "results.json"), "-out", again}, &stdout2, &stderr); code != 0 {
		t.Fatalf("lockbench -render exited %d:\n%s", code, stderr.String())
	}
	if stdout2.String() != stdout.String() {
		t.Errorf("-render printed other tables than the run:\n%s\n---\n%s", stdout2.String(), stdout.String())
	}
	for _, f := range []string{"results.csv", "table.md", "summary.svg", "uncontended.svg", "contended-hold1ms.svg", "idle.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Error(err)
			continue
		}
		if strings.HasSuffix(f, ".svg") {
			if err := wellFormed(b); err != nil {
				t.Errorf("%s is not well-formed XML: %v", f, err)
			}
		}
	}
}

func wellFormed(b []byte) error {
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func TestCommandClassification(t *testing.T) {
	for _, name := range []string{"ping", "subscribe", "unsubscribe", "client|setinfo", "client|tracking", "hello", "PING"} {
		if !isConnLevel(name) {
			t.Errorf("isConnLevel(%q) = false", name)
		}
	}
	for _, name := range []string{"evalsha", "eval", "set", "get", "publish", "zadd"} {
		if isConnLevel(name) {
			t.Errorf("isConnLevel(%q) = true", name)
		}
	}
}

func TestStats(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median = %v", got)
	}
	if got := median([]float64{4, 1, 2, 3}); got != 2.5 {
		t.Errorf("median = %v", got)
	}
	s := make([]int64, 100)
	for i := range s {
		s[i] = int64(100 - i)
	}
	if got := pct(s, 0.99); got != 99 {
		t.Errorf("p99 = %v", got)
	}
	if got := pct(s, 0.5); got != 50 {
		t.Errorf("p50 = %v", got)
	}
	if got := num(1234567); got != "1,234,567" {
		t.Errorf("num = %q", got)
	}
}
