package lockotel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/memstore"
	"github.com/redislocker/lock/internal/testenv/testkit"
	lockotel "github.com/redislocker/lock/otel"
)

// broken is a memory backend whose Acquire of the id "broken" fails.
type broken struct{ *memstore.Backend }

var errDown = errors.New("injected: the store is down")

func (b broken) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	if req.ID == "broken" {
		return backend.Grant{}, errDown
	}
	return b.Backend.Acquire(ctx, req)
}

// telemetry is an SDK with an in-memory metric reader and span recorder.
type telemetry struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	obs    *lockotel.Observer
}

func newTelemetry(t *testing.T, idAttr bool) *telemetry {
	tm := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(tm.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tm.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := lockotel.NewObserver(&lockotel.Options{MeterProvider: mp, TracerProvider: tp, IDAttribute: idAttr,
		Attributes: []attribute.KeyValue{attribute.String("service", "test")}})
	if err != nil {
		t.Fatal(err)
	}
	tm.obs = obs
	return tm
}

func (tm *telemetry) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != lockotel.ScopeName {
			t.Fatalf("scope %q, want %q", sm.Scope.Name, lockotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// value returns the sum (counters) or the count (histograms) of the data
// points of m whose attributes include every one of want.
func value(t *testing.T, m metricdata.Metrics, want ...attribute.KeyValue) int64 {
	t.Helper()
	has := func(set attribute.Set) bool {
		for _, kv := range want {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	var n int64
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes) {
				n += p.Value
			}
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes) {
				n += int64(p.Count)
			}
		}
	default:
		t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
	}
	return n
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestMetricsScenario runs every outcome on the memory backend and
// asserts each metric the package documents.
func TestMetricsScenario(t *testing.T) {
	tm := newTelemetry(t, false)
	store, err := memstore.NewStore(nil)
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, broken{store.NewBackend()}, &lock.Options{Observer: tm.obs, Logger: quiet(), WaiterTimeout: 900 * time.Millisecond})
	defer l.Close()
	other := newLocker(t, store.NewBackend(), &lock.Options{Logger: quiet()})
	defer other.Close()
	ctx := context.Background()
	waiters := func() int64 { return value(t, tm.collect(t)["lock.waiters"]) }

	// granted, then released (hold time), extended, lost.
	a, err := l.Acquire(ctx, "a", time.Minute, nil)
	if err != nil || !a.Acquired {
		t.Fatal(a, err)
	}
	if err := a.Lease.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := a.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	x, err := l.Acquire(ctx, "x", time.Minute, nil)
	if err != nil || !x.Acquired {
		t.Fatal(x, err)
	}
	store.ExpireNow("x")
	if err := x.Lease.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatal(err)
	}

	// busy, queue timeout, cancelled, granted after a wait: b is held by
	// another process.
	held, err := other.Acquire(ctx, "b", time.Minute, nil)
	if err != nil || !held.Acquired {
		t.Fatal(held, err)
	}
	if r, err := l.TryAcquire(ctx, "b", time.Minute); err != nil || r.Acquired {
		t.Fatal(r, err)
	}
	if r, err := l.Acquire(ctx, "b", time.Minute, &lock.AcquireOptions{QueueTimeout: 20 * time.Millisecond}); err != nil || r.Acquired {
		t.Fatal(r, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := l.Acquire(cctx, "b", time.Minute, nil); done <- err }()
	testkit.Eventually(t, 5*time.Second, "lock.waiters reaches 1", func() bool { return waiters() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// The waiter below runs inside a span of the caller's.
	tr := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tm.spans)).Tracer("caller")
	pctx, parent := tr.Start(ctx, "caller")
	got := make(chan lock.Result, 1)
	go func() { r, _ := l.Acquire(pctx, "b", time.Minute, nil); got <- r }()
	testkit.Eventually(t, 5*time.Second, "lock.waiters back at 1", func() bool { return waiters() == 1 })
	if err := held.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-got
	parent.End()
	if !b.Acquired {
		t.Fatal(b)
	}
	if err := b.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// error
	if _, err := l.TryAcquire(ctx, "broken", time.Minute); !errors.Is(err, errDown) {
		t.Fatal(err)
	}

	ms := tm.collect(t)
	outcome := func(s string) attribute.KeyValue { return lockotel.KeyOutcome.String(s) }
	checks := []struct {
		metric string
		attrs  []attribute.KeyValue
		want   int64
	}{
		{"lock.acquisitions", []attribute.KeyValue{outcome("granted")}, 2},
		{"lock.acquisitions", []attribute.KeyValue{outcome("busy")}, 1},
		{"lock.acquisitions", []attribute.KeyValue{outcome("queue_timeout")}, 1},
		{"lock.acquisitions", []attribute.KeyValue{outcome("cancelled")}, 1},
		{"lock.acquisitions", []attribute.KeyValue{outcome("granted_after_wait")}, 1},
		{"lock.acquisitions", []attribute.KeyValue{outcome("error")}, 1},
		{"lock.acquire.duration", []attribute.KeyValue{outcome("granted_after_wait")}, 1},
		{"lock.acquire.duration", nil, 7},
		{"lock.handoff.duration", nil, 1},
		{"lock.hold.duration", nil, 2},
		{"lock.leases.lost", []attribute.KeyValue{lockotel.KeyReason.String("not_held")}, 1},
		{"lock.extends", []attribute.KeyValue{outcome("ok")}, 1},
		{"lock.extends", []attribute.KeyValue{outcome("not_held")}, 1},
		{"lock.backend.step.duration", []attribute.KeyValue{lockotel.KeyStep.String("acquire"), outcome("ok")}, 6},
		{"lock.backend.step.duration", []attribute.KeyValue{lockotel.KeyStep.String("extend"), outcome("refused")}, 1},
		{"lock.backend.step.duration", []attribute.KeyValue{lockotel.KeyStep.String("acquire"), outcome("error")}, 1},
		{"lock.backend.step.duration", []attribute.KeyValue{lockotel.KeyStep.String("subscribe"), outcome("ok")}, 1},
		{"lock.backend.step.errors", []attribute.KeyValue{lockotel.KeyStep.String("acquire")}, 1},
		{"lock.waiters", nil, 0},
	}
	for _, c := range checks {
		m, ok := ms[c.metric]
		if !ok {
			t.Errorf("%s: not recorded", c.metric)
			continue
		}
		if got := value(t, m, c.attrs...); (c.metric == "lock.backend.step.duration" && got < c.want) ||
			(c.metric != "lock.backend.step.duration" && got != c.want) {
			t.Errorf("%s%v = %d, want %d", c.metric, c.attrs, got, c.want)
		}
	}
	// Bounded cardinality: no id attribute, every point has the extra one.
	for name, m := range ms {
		if n := value(t, m, lockotel.KeyID.String("a")) + value(t, m, lockotel.KeyID.String("b")); n != 0 {
			t.Errorf("%s carries lock.id without IDAttribute", name)
		}
		if value(t, m) != value(t, m, attribute.String("service", "test")) {
			t.Errorf("%s: a data point lacks Options.Attributes", name)
		}
	}
	if h := ms["lock.hold.duration"].Data.(metricdata.Histogram[float64]); h.DataPoints[0].Sum <= 0 {
		t.Errorf("lock.hold.duration sums %v seconds, want > 0", h.DataPoints[0].Sum)
	}

	// Spans: one per acquire that did not end at once.
	byOutcome := map[string]int{}
	for _, s := range tm.spans.Ended() {
		if s.Name() != "lock.acquire" {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == lockotel.KeyOutcome {
				byOutcome[kv.Value.AsString()]++
				if kv.Value.AsString() == "granted_after_wait" && s.Parent().SpanID() != parent.SpanContext().SpanID() {
					t.Errorf("the waited acquire's span has parent %v, want the caller's span", s.Parent().SpanID())
				}
			}
			if kv.Key == lockotel.KeyID {
				t.Errorf("span carries lock.id without IDAttribute")
			}
		}
		if !s.EndTime().After(s.StartTime()) && s.EndTime() != s.StartTime() {
			t.Errorf("span ends before it starts")
		}
	}
	want := map[string]int{"queue_timeout": 1, "cancelled": 1, "granted_after_wait": 1, "error": 1}
	for k, v := range want {
		if byOutcome[k] != v {
			t.Errorf("lock.acquire spans %v, want %v", byOutcome, want)
			break
		}
	}
	if len(byOutcome) != len(want) {
		t.Errorf("lock.acquire spans %v, want only %v", byOutcome, want)
	}
}

// TestIDAttributeOptIn checks that the id becomes an attribute only when
// asked for.
func TestIDAttributeOptIn(t *testing.T) {
	tm := newTelemetry(t, true)
	b, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, b, &lock.Options{Observer: tm.obs, Logger: quiet()})
	defer l.Close()
	r, err := l.Acquire(context.Background(), "job-7", time.Minute, nil)
	if err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	ms := tm.collect(t)
	if got := value(t, ms["lock.acquisitions"], lockotel.KeyID.String("job-7")); got != 1 {
		t.Fatalf("lock.acquisitions{lock.id=job-7} = %d, want 1", got)
	}
}

// newLocker is lock.New for set-up; it fails t on an error.
func newLocker(t *testing.T, b backend.Backend, o *lock.Options) *lock.Locker {
	t.Helper()
	l, err := lock.New(b, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Acquisitions carry lock.mode (mutex, shared, exclusive); a span of a
// shared id's acquire carries its capacity and permits too.
func TestModeAttribute(t *testing.T) {
	tm := newTelemetry(t, false)
	for _, e := range []lock.Event{
		{Kind: lock.EventAcquire, Outcome: lock.OutcomeGranted},
		{Kind: lock.EventAcquire, Outcome: lock.OutcomeGranted, Capacity: 4, Permits: 1},
		{Kind: lock.EventAcquire, Outcome: lock.OutcomeGranted, Capacity: 4, Permits: 2},
		{Kind: lock.EventAcquire, Outcome: lock.OutcomeGrantedAfterWait, Capacity: 4, Permits: 4, Duration: time.Millisecond},
	} {
		tm.obs.Observe(e)
	}
	ms := tm.collect(t)
	for mode, want := range map[string]int64{"mutex": 1, "shared": 2, "exclusive": 1} {
		if got := value(t, ms["lock.acquisitions"], lockotel.KeyMode.String(mode)); got != want {
			t.Errorf("lock.acquisitions{lock.mode=%s} = %d, want %d", mode, got, want)
		}
	}
	spans := tm.spans.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1 (the acquire that waited)", len(spans))
	}
	got := map[attribute.Key]attribute.Value{}
	for _, kv := range spans[0].Attributes() {
		got[kv.Key] = kv.Value
	}
	if got[lockotel.KeyMode].AsString() != "exclusive" || got[lockotel.KeyCapacity].AsInt64() != 4 || got[lockotel.KeyPermits].AsInt64() != 4 {
		t.Errorf("span attributes %v; want lock.mode exclusive, lock.capacity 4, lock.permits 4", got)
	}
}
