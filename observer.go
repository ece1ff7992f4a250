package lock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redislocker/lock/backend"
)

// Observer receives what a Locker does, for metrics and traces (package
// github.com/redislocker/lock/otel maps it to OpenTelemetry). Set it in
// Options.Observer; a nil Observer costs nothing.
//
// Observe is called synchronously, on the goroutine of the call it
// reports, sometimes with the Locker's internal locks held: it must be
// quick, must not block, and must not call the Locker or its leases. It
// may be called from many goroutines at once.
type Observer interface {
	Observe(Event)
}

// EventKind says what an Event reports, and so which of its fields are set.
type EventKind uint8

// The kinds of Event. Each lists the Event fields it sets besides Kind and
// ID.
const (
	// EventAcquire: an Acquire (TryAcquire included) or Do's acquire
	// ended (after the input was found valid). Outcome; Duration is the
	// time the call took (the wait, for a waiter); Start is when it
	// began; Fence when granted; Err when it failed; Context is the
	// caller's context (a parent for a span). AcquireMany's grants are
	// not reported as EventAcquire; their steps are.
	EventAcquire EventKind = iota + 1
	// EventHandoff: a queued waiter was granted after a wake-up. Duration
	// is the time from the wake-up reaching this process to the grant (for
	// a grant by hand-off, which the wake-up carries: to its delivery to
	// the waiting call).
	EventHandoff
	// EventRelease: a lease was released. Duration is the hold time, from
	// the moment its acquire was sent; Fence.
	EventRelease
	// EventLeaseLost: a lease ended without a release by its owner. Err is
	// ErrNotHeld when the backend said so (Extend or Release found it
	// gone), ErrLeaseLost when Do presumed it lost (no successful extend
	// before ValidUntil). Reported once per lease. Fence.
	EventLeaseLost
	// EventExtend: a lease's Extend reached the backend. Err is nil, an
	// error matching ErrNotHeld, or a failure; Fence.
	EventExtend
	// EventStep: one backend step. Step names it ("acquire", "release",
	// "extend", "leave", "heartbeat", "subscribe", "acquire_batch",
	// "leave_batch", "inspect"); Duration is its latency; Err is its
	// error (ErrNotHeld and ErrQueueFull are the store's answers, not
	// failures: see StepFailed). ID is empty for batched steps.
	EventStep
	// EventWaiters: the number of waiters of this Locker (queued Acquire
	// calls and pending AcquireMany ids) changed. Delta is +1 or -1;
	// Waiters is the number after the change.
	EventWaiters
)

var kindNames = [...]string{"", "acquire", "handoff", "release", "lease_lost", "extend", "step", "waiters"}

// String returns the kind's name, e.g. "acquire", "lease_lost".
func (k EventKind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "unknown"
}

// Outcome is how an acquire ended.
type Outcome uint8

// The outcomes of EventAcquire.
const (
	// OutcomeGranted: granted at once, without queueing.
	OutcomeGranted Outcome = iota + 1
	// OutcomeGrantedAfterWait: granted after waiting in the queue.
	OutcomeGrantedAfterWait
	// OutcomeBusy: TryAcquire (or NoWait) found the id in use.
	OutcomeBusy
	// OutcomeQueueTimeout: the queue timeout passed (Acquired == false).
	OutcomeQueueTimeout
	// OutcomeCancelled: the caller's context ended, or the Locker closed.
	OutcomeCancelled
	// OutcomeError: a backend failure (or another error), a timeout of the
	// backend's client (dial, read) included while the caller's context
	// lives.
	OutcomeError
)

var outcomeNames = [...]string{"", "granted", "granted_after_wait", "busy", "queue_timeout", "cancelled", "error"}

// String returns the outcome's name, e.g. "granted_after_wait".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o != 0 {
		return outcomeNames[o]
	}
	return "unknown"
}

// Event is one thing a Locker did. Kind says which fields are set.
type Event struct {
	Kind EventKind
	// ID is the lock id (empty for batched steps). High cardinality: do
	// not make it a metric label unless ids are few.
	ID       string
	Outcome  Outcome       // EventAcquire
	Start    time.Time     // EventAcquire, EventStep: when it began
	Duration time.Duration // see the kinds
	Fence    uint64        // EventAcquire (granted), EventRelease, EventLeaseLost, EventExtend
	Step     string        // EventStep
	Err      error         // see the kinds
	Waiters  int           // EventWaiters: the count after the change
	Delta    int           // EventWaiters: +1 or -1
	// Capacity and Permits are, for EventAcquire on a shared id
	// (AcquireOptions.Capacity), the id's capacity and the permits asked
	// for; both 0 on a mutex.
	Capacity, Permits int
	// Context is the caller's context (EventAcquire only), e.g. the parent
	// of a span. Do not keep it after Observe returns.
	Context context.Context
}

// StepFailed reports whether a step's error is a failure of the store or
// the client (or the caller's context), rather than one of the store's
// answers (ErrNotHeld, ErrQueueFull, ErrCapacity) or nil.
func StepFailed(err error) bool {
	return err != nil && !errors.Is(err, backend.ErrNotHeld) && !refused(err)
}

// observer is a Locker's Observer and its waiter count.
type observer struct {
	o       Observer
	waiters atomic.Int64
}

// newObserver returns nil and b when o is nil; otherwise the observer and
// b wrapped so that every backend step is reported.
func newObserver(o Observer, b backend.Backend) (*observer, backend.Backend) {
	if o == nil {
		return nil, b
	}
	obs := &observer{o: o}
	return obs, &observedBackend{b: b, obs: obs}
}

// obsNow returns time.Now() when the Locker has an observer, and the zero
// time otherwise (so that an unobserved Locker does not read the clock).
func (l *Locker) obsNow() time.Time {
	if l.obs == nil {
		return time.Time{}
	}
	return time.Now()
}

// observeAcquire reports the end of an acquire call that began at start.
func (l *Locker) observeAcquire(ctx context.Context, start time.Time, id string, noWait bool, sh share, res Result, err error) {
	if l.obs == nil {
		return
	}
	ev := Event{Kind: EventAcquire, ID: id, Start: start, Duration: time.Since(start), Err: err, Context: ctx,
		Capacity: sh.capacity, Permits: sh.permits}
	switch {
	case err == nil && res.Acquired && res.WasInUse:
		ev.Outcome = OutcomeGrantedAfterWait
	case err == nil && res.Acquired:
		ev.Outcome = OutcomeGranted
	case err == nil && noWait:
		ev.Outcome = OutcomeBusy
	case err == nil:
		ev.Outcome = OutcomeQueueTimeout
	case cancelled(err): // by type: a client's own timeout is an OutcomeError
		ev.Outcome = OutcomeCancelled
	default:
		ev.Outcome = OutcomeError
	}
	if res.Lease != nil {
		ev.Fence = res.Lease.fence
	}
	l.obs.o.Observe(ev)
}

// observeHandoff reports a grant that followed a wake-up at woke (zero:
// no wake-up, or no observer).
func (l *Locker) observeHandoff(id string, woke time.Time) {
	if l.obs == nil || woke.IsZero() {
		return
	}
	l.obs.o.Observe(Event{Kind: EventHandoff, ID: id, Duration: time.Since(woke)})
}

// observeEnd reports a lease's end: released (hold time) or found not
// held (lost). Lease.end calls it once per lease.
func (l *Locker) observeEnd(le *Lease, s leaseState) {
	if l.obs == nil {
		return
	}
	switch s {
	case released:
		l.obs.o.Observe(Event{Kind: EventRelease, ID: le.id, Fence: le.fence, Duration: time.Since(le.since)})
	case notHeld:
		l.obs.o.Observe(Event{Kind: EventLeaseLost, ID: le.id, Fence: le.fence, Err: ErrNotHeld})
	}
}

// observeDoLost reports a lease that Do presumed lost (lost) when its
// release did not find it gone (that case was reported by observeEnd).
func (l *Locker) observeDoLost(le *Lease, lost bool, releaseErr error) {
	if l.obs == nil || !lost || errors.Is(releaseErr, ErrNotHeld) {
		return
	}
	l.obs.o.Observe(Event{Kind: EventLeaseLost, ID: le.id, Fence: le.fence, Err: ErrLeaseLost})
}

// extend reports an Extend that reached the backend; o may be nil.
func (o *observer) extend(le *Lease, err error) {
	if o == nil {
		return
	}
	o.o.Observe(Event{Kind: EventExtend, ID: le.id, Fence: le.fence, Err: err})
}

// waitersChanged reports a waiter added (+1) or removed (-1); o may be nil.
func (o *observer) waitersChanged(id string, delta int) {
	if o == nil {
		return
	}
	n := o.waiters.Add(int64(delta))
	o.o.Observe(Event{Kind: EventWaiters, ID: id, Waiters: int(n), Delta: delta})
}
