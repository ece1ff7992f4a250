// Package lockotel maps the events of a lock.Locker to OpenTelemetry
// metrics and spans. It is its own module, so that the lock module does
// not depend on OpenTelemetry.
//
//	obs, err := lockotel.NewObserver(nil) // the global MeterProvider and TracerProvider
//	if err != nil {
//		log.Fatal(err)
//	}
//	locker, err := lock.New(b, &lock.Options{Observer: obs})
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer locker.Close()
//
// # Metrics
//
// Durations are in seconds. Every metric carries the Options.Attributes;
// the lock id ("lock.id") only with Options.IDAttribute, since ids are
// usually unbounded.
//
//   - lock.acquisitions (counter, {acquisition}): acquire calls by
//     lock.outcome: granted, granted_after_wait, busy, queue_timeout,
//     cancelled, error; and by lock.mode: mutex, shared (a lease of some of
//     a shared id's permits: a semaphore's, a reader's) or exclusive (all of
//     them: a writer's). AcquireMany's grants are not counted.
//   - lock.acquire.duration (histogram, s): how long acquire calls took,
//     by lock.outcome and lock.mode: the wait time of waiters.
//   - lock.handoff.duration (histogram, s): from a waiter's wake-up
//     reaching its process to its grant.
//   - lock.hold.duration (histogram, s): from acquire to release, for
//     leases their owner released.
//   - lock.leases.lost (counter, {lease}): leases that ended without a
//     release, by lock.reason: not_held (the backend said so) or presumed
//     (Do saw no successful extend before the lease's validity ended).
//   - lock.extends (counter, {extend}): extends by lock.outcome: ok,
//     not_held, error.
//   - lock.backend.step.duration (histogram, s): backend steps by
//     lock.step (acquire, release, extend, leave, heartbeat, subscribe,
//     acquire_batch, leave_batch, inspect) and lock.outcome: ok, refused
//     (the store's answer: not held, queue full) or error.
//   - lock.backend.step.errors (counter, {error}): failed steps by
//     lock.step.
//   - lock.waiters (up-down counter, {waiter}): waiters queued now
//     (Acquire calls and AcquireMany ids), summed over the Lockers that
//     share the Observer.
//
// # Spans
//
// An acquire that did not end at once (every outcome but granted and busy)
// becomes a span "lock.acquire" from the call's start to its end, a child
// of the span in the caller's context, with lock.outcome, lock.mode,
// lock.fence when granted, lock.capacity and lock.permits on a shared id,
// and lock.id only with Options.IDAttribute. An error outcome
// sets the span's status to Error.
package lockotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/redislocker/lock"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/redislocker/lock/otel"

// Attribute keys.
const (
	KeyOutcome = attribute.Key("lock.outcome")
	KeyReason  = attribute.Key("lock.reason")
	KeyStep    = attribute.Key("lock.step")
	KeyID      = attribute.Key("lock.id")
	KeyFence   = attribute.Key("lock.fence")
	KeyMode    = attribute.Key("lock.mode")
	// KeyCapacity and KeyPermits are a shared id's capacity and the
	// permits an acquire asked for, on spans only (unbounded values).
	KeyCapacity = attribute.Key("lock.capacity")
	KeyPermits  = attribute.Key("lock.permits")
)

// mode is the lock.mode of an acquire event: mutex, shared or exclusive.
func mode(e *lock.Event) string {
	switch {
	case e.Capacity < 2:
		return "mutex"
	case e.Permits >= e.Capacity:
		return "exclusive"
	}
	return "shared"
}

// Options configures an Observer. A nil *Options, and every zero field,
// means the default.
type Options struct {
	// MeterProvider makes the meter. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes the tracer. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// IDAttribute adds the lock id as the attribute lock.id to every
	// metric and span. Default false: one time series per id is
	// unbounded unless the ids are few and fixed.
	IDAttribute bool
	// Attributes are added to every metric and span, e.g. a service or
	// Locker name. Keep them few and bounded. Default: none.
	Attributes []attribute.KeyValue
	// DisableSpans turns the lock.acquire spans off. Default false.
	DisableSpans bool
}

// Observer is a lock.Observer that records OpenTelemetry metrics and
// spans. It may be shared by many Lockers. Create it with NewObserver.
type Observer struct {
	idAttr bool
	extra  []attribute.KeyValue
	tracer trace.Tracer // nil: no spans

	acquisitions metric.Int64Counter
	acquireDur   metric.Float64Histogram
	handoffDur   metric.Float64Histogram
	holdDur      metric.Float64Histogram
	lost         metric.Int64Counter
	extends      metric.Int64Counter
	stepDur      metric.Float64Histogram
	stepErrors   metric.Int64Counter
	waiters      metric.Int64UpDownCounter

	mu   sync.RWMutex
	sets map[setKey]metric.MeasurementOption // see attrs
}

var _ lock.Observer = (*Observer)(nil)

// durationBuckets are the histogram boundaries, in seconds: from half a
// millisecond (a step on loopback) to half an hour (the default queue
// timeout).
var durationBuckets = []float64{
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 300, 1800,
}

// NewObserver makes the instruments on opts.MeterProvider (nil opts: the
// defaults). It fails only if the meter refuses an instrument.
func NewObserver(opts *Options) (*Observer, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	m := o.MeterProvider.Meter(ScopeName)
	ob := &Observer{idAttr: o.IDAttribute, extra: append([]attribute.KeyValue(nil), o.Attributes...),
		sets: make(map[setKey]metric.MeasurementOption)}
	if !o.DisableSpans {
		ob.tracer = o.TracerProvider.Tracer(ScopeName)
	}
	var errs []error
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	ob.acquisitions = counter("lock.acquisitions", "{acquisition}", "Acquire calls by outcome.")
	ob.acquireDur = hist("lock.acquire.duration", "How long acquire calls took (the wait, for waiters), by outcome.")
	ob.handoffDur = hist("lock.handoff.duration", "From a waiter's wake-up to its grant.")
	ob.holdDur = hist("lock.hold.duration", "From acquire to release, for released leases.")
	ob.lost = counter("lock.leases.lost", "{lease}", "Leases that ended without a release, by reason.")
	ob.extends = counter("lock.extends", "{extend}", "Lease extends by outcome.")
	ob.stepDur = hist("lock.backend.step.duration", "Backend step latency by step and outcome.")
	ob.stepErrors = counter("lock.backend.step.errors", "{error}", "Failed backend steps by step.")
	var err error
	ob.waiters, err = m.Int64UpDownCounter("lock.waiters", metric.WithUnit("{waiter}"),
		metric.WithDescription("Waiters queued now."))
	if err := errors.Join(append(errs, err)...); err != nil {
		return nil, fmt.Errorf("lockotel: %w", err)
	}
	return ob, nil
}

// attrs returns the measurement option of e's attributes plus kv (at most
// two). Without the id attribute the sets are few, and cached.
func (o *Observer) attrs(e *lock.Event, kv ...attribute.KeyValue) metric.MeasurementOption {
	if o.idAttr && e.ID != "" {
		return o.build(append(kv[:len(kv):len(kv)], KeyID.String(e.ID)))
	}
	var k setKey
	if len(kv) > 0 {
		k.a = kv[0]
	}
	if len(kv) > 1 {
		k.b = kv[1]
	}
	o.mu.RLock()
	opt, ok := o.sets[k]
	o.mu.RUnlock()
	if ok {
		return opt
	}
	opt = o.build(kv)
	o.mu.Lock()
	o.sets[k] = opt
	o.mu.Unlock()
	return opt
}

// setKey names a cached attribute set: up to two attributes.
type setKey struct{ a, b attribute.KeyValue }

// build returns the measurement option of Options.Attributes plus kv.
func (o *Observer) build(kv []attribute.KeyValue) metric.MeasurementOption {
	all := make([]attribute.KeyValue, 0, len(o.extra)+len(kv))
	all = append(all, o.extra...)
	all = append(all, kv...)
	return metric.WithAttributeSet(attribute.NewSet(all...))
}

// Observe records one event.
func (o *Observer) Observe(e lock.Event) {
	ctx := context.Background()
	switch e.Kind {
	case lock.EventAcquire:
		a := o.attrs(&e, KeyOutcome.String(e.Outcome.String()), KeyMode.String(mode(&e)))
		o.acquisitions.Add(ctx, 1, a)
		o.acquireDur.Record(ctx, e.Duration.Seconds(), a)
		o.span(&e)
	case lock.EventHandoff:
		o.handoffDur.Record(ctx, e.Duration.Seconds(), o.attrs(&e))
	case lock.EventRelease:
		o.holdDur.Record(ctx, e.Duration.Seconds(), o.attrs(&e))
	case lock.EventLeaseLost:
		reason := "not_held"
		if !errors.Is(e.Err, lock.ErrNotHeld) {
			reason = "presumed"
		}
		o.lost.Add(ctx, 1, o.attrs(&e, KeyReason.String(reason)))
	case lock.EventExtend:
		o.extends.Add(ctx, 1, o.attrs(&e, KeyOutcome.String(extendOutcome(e.Err))))
	case lock.EventStep:
		outcome := "ok"
		switch {
		case lock.StepFailed(e.Err):
			outcome = "error"
			o.stepErrors.Add(ctx, 1, o.attrs(&e, KeyStep.String(e.Step)))
		case e.Err != nil:
			outcome = "refused"
		}
		o.stepDur.Record(ctx, e.Duration.Seconds(), o.attrs(&e, KeyStep.String(e.Step), KeyOutcome.String(outcome)))
	case lock.EventWaiters:
		// The id is left out: a per-id up-down counter would leave one
		// series per id ever waited on.
		o.waiters.Add(ctx, int64(e.Delta), o.attrs(&lock.Event{}))
	}
}

func extendOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, lock.ErrNotHeld):
		return "not_held"
	default:
		return "error"
	}
}

// span records an acquire that waited as a finished span.
func (o *Observer) span(e *lock.Event) {
	if o.tracer == nil || e.Outcome == lock.OutcomeGranted || e.Outcome == lock.OutcomeBusy {
		return
	}
	parent := e.Context
	if parent == nil {
		parent = context.Background()
	}
	kv := append([]attribute.KeyValue{KeyOutcome.String(e.Outcome.String()), KeyMode.String(mode(e))}, o.extra...)
	if e.Fence != 0 {
		kv = append(kv, KeyFence.Int64(int64(e.Fence)))
	}
	if e.Capacity >= 2 {
		kv = append(kv, KeyCapacity.Int(e.Capacity), KeyPermits.Int(e.Permits))
	}
	if o.idAttr {
		kv = append(kv, KeyID.String(e.ID))
	}
	start := e.Start
	if start.IsZero() {
		start = time.Now().Add(-e.Duration)
	}
	_, sp := o.tracer.Start(parent, "lock.acquire", trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(kv...))
	if e.Outcome == lock.OutcomeError {
		sp.RecordError(e.Err)
		sp.SetStatus(codes.Error, "acquire failed")
	}
	sp.End(trace.WithTimestamp(start.Add(e.Duration)))
}
