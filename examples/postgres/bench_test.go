package postgres

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// BenchmarkStepCost measures the SQL steps of one process with no
// contention, alongside, in one run: the version before shared ids
// (testdata/schema_v1.sql) as the baseline, this version's mutex, and a
// shared id (capacity 2, one permit). Each round of each variant is an
// acquire and a release of a free id, then an acquire, an enqueued waiter,
// a release that hands off to it and the waiter's release. It reports
// each variant's time per round and its ratio to the baseline's:
//
//	go test -run '^$' -bench StepCost -benchtime 2000x
func BenchmarkStepCost(b *testing.B) {
	ctx := context.Background()
	h := newSchema(b, "locktest_bench", Options{})
	newSchema(b, "locktest_bench_v1", Options{})
	v1, err := os.ReadFile("testdata/schema_v1.sql")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := h.admin.Exec(ctx, strings.ReplaceAll(string(v1), "{{s}}", "locktest_bench_v1")); err != nil {
		b.Fatal(err)
	}
	nb, err := New(ctx, h.admin, &h.opts) // makes the schema
	if err != nil {
		b.Fatal(err)
	}
	nb.Close()
	const args = "$1, $2, 60000000, $3, 60000000, 10000, 100, 3600000000, 'locktest_bench_x'"
	type variant struct {
		name, acquire, release string
		extra                  []any
		total                  time.Duration
	}
	vs := []*variant{
		{name: "v1", acquire: "SELECT o_acquired FROM locktest_bench_v1.acquire(" + args + ")",
			release: "SELECT locktest_bench_v1.release($1, $2, 100)"},
		{name: "mutex", acquire: "SELECT o_acquired FROM locktest_bench.acquire(" + args + ", $4, $5)",
			release: "SELECT locktest_bench.release($1, $2, 100)", extra: []any{nil, nil}},
		{name: "shared", acquire: "SELECT o_acquired FROM locktest_bench.acquire(" + args + ", $4, $5)",
			release: "SELECT locktest_bench.release($1, $2, 100)", extra: []any{2, 2}},
	}
	conn, err := h.admin.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	// The steps' own cost, not the server's commit flush (the same for
	// every step, which the server's settings decide).
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		b.Fatal(err)
	}
	step := func(q string, a ...any) {
		var ok bool
		if err := conn.QueryRow(ctx, q, a...).Scan(&ok); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; b.Loop(); i++ {
		for j := range vs { // each variant first in turn, so that none gains from its place
			v := vs[(i+j)%len(vs)]
			id := []byte(v.name) // an id of its own: the mutex and the shared id share a schema
			start := time.Now()
			acq := func(tok string, wait bool) { step(v.acquire, append([]any{id, []byte(tok), wait}, v.extra...)...) }
			acq("t1", false)
			step(v.release, id, []byte("t1"))
			acq("t1", false)
			acq("t2", true)
			step(v.release, id, []byte("t1"))
			step(v.release, id, []byte("t2"))
			v.total += time.Since(start)
		}
	}
	for _, v := range vs {
		b.ReportMetric(float64(v.total.Microseconds())/float64(b.N), v.name+"-µs/round")
		b.ReportMetric(float64(v.total)/float64(vs[0].total), v.name+"/v1")
	}
}
