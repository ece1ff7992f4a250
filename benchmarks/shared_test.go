package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// semStore is an in-process semaphore for the tests of the shared rounds:
// a grant takes permits while they fit in the capacity (leak > 0 lets that
// many permits too many in: a planted bug).
type semStore struct {
	mu    sync.Mutex
	cond  *sync.Cond
	inUse int
	leak  int
}

func newSemStore(leak int) *semStore {
	s := &semStore{leak: leak}
	s.cond = sync.NewCond(&s.mu)
	return s
}

type semProc struct{ s *semStore }

func (p semProc) Lock(context.Context, string, time.Duration) (func(context.Context) error, error) {
	panic("not a mutex")
}

func (p semProc) Close() {}

func (p semProc) LockShared(ctx context.Context, _ string, _ time.Duration, capacity, permits int) (func(context.Context) error, error) {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.inUse+permits > capacity+s.leak {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.cond.Wait()
	}
	s.inUse += permits
	return func(context.Context) error {
		s.mu.Lock()
		s.inUse -= permits
		s.mu.Unlock()
		s.cond.Broadcast()
		return nil
	}, nil
}

func semLib(s *semStore) lib {
	return lib{Name: "test/sem", Shared: true, New: func(*env) (proc, error) { return semProc{s}, nil }}
}

// TestSharedRoundViolations: the in-process count of holders finds every
// grant over the capacity, for a semaphore and a reader-writer lock, and
// finds none on a correct one; the writers of a correct lock are granted.
func TestSharedRoundViolations(t *testing.T) {
	cfg := quickConfig()
	cfg.Warm, cfg.ContDur = 20*time.Millisecond, 150*time.Millisecond
	r := &runner{cfg: cfg, prefix: "test:"} // no admin client: no server figures
	for _, sc := range sharedCases() {
		for _, leak := range []int{0, 1} {
			rd, err := r.sharedRound(semLib(newSemStore(leak)), sc)
			if err != nil {
				t.Fatalf("%s, leak %d: %v", sc.name, leak, err)
			}
			switch {
			case leak == 0 && rd.violations != 0:
				t.Errorf("%s on a correct semaphore: %d violations", sc.name, rd.violations)
			case leak > 0 && rd.violations == 0:
				t.Errorf("%s on a semaphore that grants %d permit too many: no violation found (peak %d of %d)", sc.name, leak, rd.peak, sc.capacity)
			}
			if leak == 0 && rd.peak != sc.capacity {
				t.Errorf("%s on a correct semaphore: peak %d permits held, want %d", sc.name, rd.peak, sc.capacity)
			}
			if sc.writeEvery > 0 && leak == 0 && rd.acq(classWrite) == 0 {
				t.Errorf("%s: no write granted in %v", sc.name, cfg.ContDur)
			}
			s := aggregateShared(sc, "test/sem", cfg.Workers, []shRound{rd})
			if s.Violations != rd.violations || s.Acquisitions != rd.acq(classRead)+rd.acq(classWrite) {
				t.Errorf("%s: aggregate %d violations, %d acquisitions; round %d, %d", sc.name, s.Violations, s.Acquisitions,
					rd.violations, rd.acq(classRead)+rd.acq(classWrite))
			}
		}
	}
}

// TestSharedReport: the tables and the CSV give ours' figures as ratios
// to the peer's of the same scenario, and "-" without a peer.
func TestSharedReport(t *testing.T) {
	res := &Results{Shared: []Shared{
		{Scenario: "semaphore-n4", Lib: "ours/go-redis", Capacity: 4, Workers: 8, HoldMs: 1, Acquisitions: 10, PerSec: 3000, WaitP99Ms: 2, ServerCPUUs: 100},
		{Scenario: "semaphore-n4", Lib: peerShared, Capacity: 4, Workers: 8, HoldMs: 1, Acquisitions: 10, PerSec: 2000, WaitP99Ms: 8, ServerCPUUs: 200},
		{Scenario: "rw-read-heavy", Lib: "ours/go-redis", Capacity: 8, WriteEvery: 10, Workers: 8, HoldMs: 1, Acquisitions: 10, ReadsPerSec: 900, WritesPerSec: 100},
	}}
	var b strings.Builder
	writeShared(&b, res)
	md := b.String()
	for _, want := range []string{"| ours/go-redis | 3,000 | 1.50x |", "| 0.0 / 2.0 / 0.0 | 0.25x |", "| 100.0 | 0.50x |", "| redislock/tuned | 2,000 | peer |",
		"| ours/go-redis | 900 | - | 100 | - |"} {
		if !strings.Contains(md, want) {
			t.Errorf("the tables lack %q:\n%s", want, md)
		}
	}
	got := map[string]float64{}
	for _, row := range sharedCSVRows(res) {
		for _, m := range row.metrics {
			got[row.scenario+"/"+row.lib+"/"+m.name] = m.v
		}
	}
	if v := got["semaphore-n4/ours/go-redis/acq_per_s_vs_peer"]; v != 1.5 {
		t.Errorf("acq_per_s_vs_peer = %v, want 1.5", v)
	}
	if _, ok := got["rw-read-heavy/ours/go-redis/reads_per_s_vs_peer"]; ok {
		t.Error("a ratio to a peer the run does not have")
	}
	if _, ok := got["semaphore-n4/"+peerShared+"/acq_per_s_vs_peer"]; ok {
		t.Error("the peer's ratio to itself")
	}
}
