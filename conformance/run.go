package conformance

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// Timings of the Lockers the suite makes. They are short so that the suite
// runs in seconds; the bounds below leave room for a loaded machine and the
// race detector.
const (
	// waiterTimeout is the default WaiterTimeout (heartbeat every third).
	waiterTimeout = 900 * time.Millisecond
	// queueTimeout is the default QueueTimeout: long enough never to be
	// the reason a property passes, short enough that a hang ends.
	queueTimeout = 20 * time.Second
	// batchTick is the default BatchTick.
	batchTick = 10 * time.Millisecond
	// longTTL is a lease that must not expire during a property.
	longTTL = 30 * time.Second
	// slack is added to every time bound for scheduling delays.
	slack = time.Second
	// prompt bounds something that should happen at once (one or two steps).
	prompt = 5 * time.Second
)

// property is one named guarantee: one subtest of Run.
type property struct {
	// name is the subtest's name.
	name string
	// contract is the sentence every failure of the subtest starts with.
	contract string
	run      func(e *env)
}

// properties is the suite, in the order Run runs it.
var properties = []property{
	// Safety.
	{"mutual-exclusion", "S1 mutual-exclusion: for one id, grant intervals never overlap", mutualExclusion},
	{"conservative-validity", "S2 conservative-validity: ValidUntil never lies past the backend's expiry", conservativeValidity},
	{"fencing", "S3 fencing: fences strictly increase per id in grant order; extend and retried acquires keep the fence", fencing},
	{"owner-only", "S4 owner-only: Release and Extend by a non-owner or after expiry return ErrNotHeld and change nothing; Extend never re-creates an expired lock", ownerOnly},
	{"lost-lease-signalled", "S5 lost-lease-signalled: Lost() closes and Do's ctx is cancelled with ErrLeaseLost no later than ValidUntil", lostLeaseSignalled},
	{"retry-safe", "S6 retry-safe: a retried acquire with the same token is a no-op, and an unknown outcome is cleaned up by token", retrySafe},
	{"ttl-precision", "S2 ttl-precision: every TTL a step reports (a grant's, a retried grant's, the holder's to a waiter, a new head's notice, a hand-off's) is exact to the millisecond, never rounded to seconds", ttlPrecision},
	{"retry-remaining-ttl", "S2 retry-remaining-ttl: a retried acquire by the holder reports the TTL that is left, never the TTL it asks for", retryRemainingTTL},
	{"fence-after-idle", "S3 fence-after-idle: fences strictly increase per id across idle periods, also after the store forgot the id's state", fenceAfterIdle},
	{"not-held-after-expiry", "S4 not-held-after-expiry: Release after the lease expired returns ErrNotHeld, whether or not someone else took the lock since", notHeldAfterExpiry},
	{"extend-never-revives", "S4 extend-never-revives: Extend of an expired lease returns ErrNotHeld and never re-creates the lock", extendNeverRevives},
	{"expiry-handoff", "S3 L2 expiry-handoff: when a lease ends without a release while others wait, the next holder's fence is above every earlier one, its retries and Inspect report that fence, and no queue entry of it is left to stall the queue", expiryHandoff},
	{"acquire-many-no-unseen-leases", "S7 acquire-many-no-unseen-leases: AcquireMany never leaves a lease held, or a queue entry, that the caller was not shown", acquireManyNoUnseen},
	// Liveness and fairness.
	{"wake-on-release", "L1 wake-on-release: a release wakes the head of the queue, which acquires within one notification", wakeOnRelease},
	{"wake-only-head", "L1 wake-only-head: a release wakes the head of the queue and no other waiter, in any process", wakeOnlyHead},
	{"wake-new-head", "L1 wake-new-head: every step that frees the lock or removes the head wakes the new head (release, leave, purge, a heartbeat that finds the lease ended)", wakeNewHead},
	{"subscribe-live", "L1 subscribe-live: Subscribe returns only once wake-ups for the id are delivered", subscribeLive},
	{"subscribe-scoped", "L1 subscribe-scoped: cancelling one subscription of an id leaves every other subscription of that id live, in the same process and in others", subscribeScoped},
	{"reconnect-wakes-all", "L1 reconnect-wakes-all: when the notifier's connection is re-established, every subscribed id gets Wake{All} and wake-ups flow again", reconnectWakesAll},
	{"one-delivery-per-wake", "L1 one-delivery-per-wake: a wake-up reaches only the process of the waiter it names, not every process waiting on the id", oneDeliveryPerWake},
	{"head-after-grant", "L1 head-after-grant: after a lease ends without a release, the head at that moment is granted within 100 ms, whether or not it queued as the head", headAfterGrant},
	{"no-lost-wakeup", "L1 no-lost-wakeup: a free lock is noticed by its head waiter within the fallback bound, without a notification", noLostWakeup},
	{"fifo-order", "L2 fifo-order: live waiters are granted in queue order, and nobody jumps the queue", fifoOrder},
	{"try-acquire-fair", "L2 try-acquire-fair: TryAcquire never wins over a queued waiter", tryAcquireFair},
	{"dead-waiter-purge", "L3 dead-waiter-purge: waiters that stop heartbeating are purged within WaiterTimeout plus two heartbeats, every one of them", deadWaiterPurge},
	{"live-waiter-kept", "L3 live-waiter-kept: a live waiter is never purged and keeps its place in the queue", liveWaiterKept},
	{"queue-timeout", "L4 queue-timeout: a wait ends at the queue timeout with Acquired=false, WasInUse=true, a nil error, and no entry left", queueTimeoutProp},
	{"acquire-many-overlap", "L5 acquire-many-overlap: overlapping AcquireMany calls whose callers release what they are shown never deadlock", acquireManyOverlap},
	{"cancel-while-queued", "L6 cancel-while-queued: cancelling a waiter returns ctx's error, holds nothing and removes its entry", cancelWhileQueued},
	// Direct hand-off (backend.HandOffer); skipped for a backend without it.
	{"handoff-grant", "S2 S3 handoff-grant: a release to a queued head grants it in the same step: the head runs no step of its own, gets a fence above the previous holder's, and a ValidUntil no later than the store's expiry", handoffGrant},
	{"handoff-cancelled-head", "L6 handoff-cancelled-head: a grant by hand-off to a head whose Acquire is cancelled first is released by its cleanup, and the next waiter is granted", handoffCancelledHead},
	{"handoff-dead-head", "L1 handoff-dead-head: a grant by hand-off to a head whose process died costs at most that lease's TTL: the next waiter is granted within 100 ms (+ slack) of its end", handoffDeadHead},
	// Shared ids (backend.Sharer, checklist item 15), at the backend's
	// steps; skipped for a backend that does not offer them.
	{"shared-capacity", "S1 shared-capacity: the live leases of a shared id never take more than its Capacity permits, and every step agrees with the model of item 15", sharedCapacity},
	{"shared-exclusive", "S1 shared-exclusive: an exclusive lease (Permits = Capacity) excludes every other lease, and waits for every shared holder to go", sharedExclusive},
	{"shared-fifo-batch", "L2 shared-fifo-batch: the step that frees permits lets in every head that fits, in ticket order, each with its own grant or wake-up, and no request passes a head that does not fit (no writer starvation)", sharedFIFOBatch},
	{"shared-fences", "S3 shared-fences: every grant on a shared id takes a new fence, strictly above every earlier one, also beside live holders; a retried acquire and an extend keep it", sharedFences},
	{"shared-waiter-release", "L1 shared-waiter-release: the Leave or the purge of a head that blocks lets in the waiters behind it that fit, in one step, with their wake-ups", sharedWaiterRelease},
	{"shared-retry", "S6 shared-retry: a retried acquire by a token that holds a lease of a shared id is a no-op that reports that lease; a waiter's retry keeps its ticket; Leave releases a lease", sharedRetry},
	{"shared-capacity-conflict", "shared-capacity-conflict: a request with another capacity while the id has a holder or a waiter fails with ErrCapacity and changes nothing; an idle id forgets its capacity", sharedCapacityConflict},
	{"shared-inspect", "shared-inspect: Inspect of a shared id lists every live lease (fence order, permits, TTL, fingerprint), the Capacity and each waiter's Permits; Held, Fence, TTL and Holder describe the lease granted last", sharedInspect},
	// Hygiene.
	{"no-goroutine-leak", "H1 no-goroutine-leak: no goroutine of the lock package outlives Close", noGoroutineLeak},
	{"no-state-left", "H2 no-state-left: after release, leave, timeout and expiry the store keeps no state for the id but documented counters", noStateLeft},
	{"bounded-input", "H3 bounded-input: ids longer than MaxIDLength are rejected before any I/O; ids of exactly MaxIDLength work", boundedInput},
	{"waiter-cap", "H3 waiter-cap: a queue at the backend's cap refuses new waiters with ErrQueueFull and enqueues nothing", waiterCap},
	{"purge-exact", "L3 purge-exact: every queue entry past its deadline goes, wherever it stands in the queue, within the purge limit's worth per step, and none goes before its deadline", purgeExact},
	{"purge-limit", "H3 purge-limit: purges are bounded per step, yet no entry past its deadline is ever refreshed or granted, and every one goes", purgeLimit},
	// The API around the guarantees.
	{"bad-input", "bad-input: invalid arguments and calls after Close return an error naming the argument (or ErrClosed) before any I/O", badInput},
	{"extend-batch", "S4 extend-batch: ExtendBatch extends each request as Extend would: a token that does not hold the id gets ErrNotHeld and extends nothing, even when another token holds it, each result is in its request's place, and no request fails or skips another", extendBatch},
	{"heartbeat-order", "heartbeat-order: a batched Heartbeat refreshes and reports each waiter in its request's place", heartbeatOrder},
	{"error-kinds", "error-kinds: a step's error tells its outcome truly: a store's answer is of kind answer, and a step of kind unsent took no effect", errorKinds},
	{"batch-order", "batch-order: AcquireBatch takes effect and reports in request order, each per-request error in its own place", batchOrder},
	{"acquire-many", "acquire-many: AcquireMany yields every id exactly once, in non-empty snapshots, and reports timed-out ids in the last one", acquireMany},
	{"do", "do: Do runs fn under the lock, extends it while fn runs, always releases, and returns ErrNotAcquired on a queue timeout", doProp},
	{"close", "close: Close ends queued calls promptly with ErrClosed, leaves their queues, and is idempotent", closeProp},
	{"inspect", inspectContract, inspectProp},
	{"inspect-read-only", "inspect-read-only: Inspect reports the holder's own fence, never an ended lease as held or a dead waiter as queued, and writes nothing: no purge, expiry, hand-off or wake-up", inspectReadOnly},
	{"model", "model: backend steps agree with the plain model (holder, fence, queue in ticket order)", model},
}

// Run runs the conformance suite: one subtest per property, each named
// after it, each with a new Harness from newHarness. See the package doc.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	if newHarness == nil {
		t.Fatal("conformance.Run: nil newHarness")
	}
	var skips skipLog
	var hung atomic.Bool
	for i, p := range properties {
		t.Run(p.name, func(t *testing.T) {
			e := newEnv(t, p)
			e.skips = &skips
			e.hung = &hung
			skips.ran.Add(1)
			h := newHarness(t)
			if h == nil {
				t.Fatal("conformance.Run: newHarness returned nil")
			}
			e.h = h
			switch {
			case i == 0:
				e.probe(prompt)
			case hung.Load():
				e.probe(probeTimeout)
			}
			p.run(e)
		})
	}
	skips.summary(t)
}

// probeTimeout bounds the probe that a property runs first once a step of
// an earlier one went unanswered.
const probeTimeout = 2 * time.Second

// probe fails the property at once when the store does not answer an
// Acquire of a free id within timeout: a backend that hangs then fails
// the suite in about two minutes, not a property's full bounds at a time
// (a quarter of an hour). It runs before the first property, and before
// each one after a step went unanswered: an Acquire that waited prompt or
// more and ended with its ctx's deadline, or a probe that failed.
func (e *env) probe(timeout time.Duration) {
	e.t.Helper()
	b := e.h.NewBackend(e.t)
	defer func() { _ = b.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	id, tok := e.id(), e.token("probe")
	g, err := b.Acquire(ctx, backend.AcquireRequest{ID: id, Token: tok, TTL: longTTL})
	if err != nil || !g.Acquired {
		e.hung.Store(true)
		e.fatalf("a backend Acquire of a free id, run before the property: %+v, %v (within %v); failing at once rather than waiting out the property's bounds", g, err, timeout)
	}
	e.hung.Store(false)
	_ = b.Release(ctx, id, tok)
}

// skipLog collects the properties Run skipped, for its summary.
type skipLog struct {
	mu     sync.Mutex
	lines  []string
	strict bool
	ran    atomic.Int64 // properties started
}

func (s *skipLog) add(name, reason string, strict bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, name+": "+reason)
	s.strict = s.strict || strict
}

// summary logs every property skipped, with its reason; they failed if
// the harness is Strict.
func (s *skipLog) summary(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case len(s.lines) == 0:
		t.Logf("conformance: %d of the suite's %d properties ran, none skipped", s.ran.Load(), len(properties))
	case s.strict:
		t.Logf("conformance: %d of %d properties ran; these would have been skipped, and failed instead (Limits.Strict):\n\t%s",
			s.ran.Load(), len(properties), strings.Join(s.lines, "\n\t"))
	default:
		t.Logf("conformance: %d of %d properties ran; skipped, in whole or in part (Limits.Strict makes a skip fail):\n\t%s",
			s.ran.Load(), len(properties), strings.Join(s.lines, "\n\t"))
	}
}

// skipf skips the property for a capability the harness or the backend
// lacks, or for an exception its Limits state, and records it for Run's
// summary. With Limits.Strict it fails the property instead.
func (e *env) skipf(format string, args ...any) {
	e.t.Helper()
	reason := fmt.Sprintf(format, args...)
	if e.recordSkip(reason) {
		e.fatalf("skipped, but the harness claims full conformance (Limits.Strict): %s", reason)
	}
	e.t.Skip(reason)
}

// recordSkip adds reason to Run's summary and reports whether the harness
// is Strict, so that the skip must fail instead.
func (e *env) recordSkip(reason string) (strict bool) {
	strict = e.limits().Strict
	if e.skips != nil {
		e.skips.add(e.t.Name(), reason, strict)
	}
	return strict
}

// skipCase runs the property without one of its cases, for the same
// reasons as skipf, and records it for Run's summary. With Limits.Strict
// it fails the property instead.
func (e *env) skipCase(format string, args ...any) {
	e.t.Helper()
	reason := "a case skipped: " + fmt.Sprintf(format, args...)
	if e.recordSkip(reason) {
		e.errorf("%s, but the harness claims full conformance (Limits.Strict)", reason)
		return
	}
	e.t.Log(reason)
}

// nonce makes ids unique per process, so that reruns against one shared
// store (a Redis server) never collide.
var nonce = func() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("conformance: crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}()

// env is the state of one property's subtest.
type env struct {
	t        *testing.T
	h        Harness
	contract string
	ids      atomic.Int64
	bg       sync.WaitGroup // goroutines started by e.goFn
	logw     *testWriter
	skips    *skipLog     // Run's record of skipped properties
	hung     *atomic.Bool // a step went unanswered: see probe
}

func newEnv(t *testing.T, p property) *env {
	e := &env{t: t, contract: p.contract, logw: &testWriter{t: t}}
	// Registered first, so it runs last: after every Locker is closed
	// (which ends the calls the goroutines wait in), wait for them, and
	// then stop logging (printing the log if the property failed).
	t.Cleanup(func() {
		e.bg.Wait()
		e.logw.stop()
	})
	return e
}

// errorf reports a violation of the property, led by its contract sentence.
// It may be called from any goroutine of the subtest.
func (e *env) errorf(format string, args ...any) {
	e.t.Helper()
	e.t.Errorf("%s: %s", e.contract, fmt.Sprintf(format, args...))
}

// fatalf is errorf, then FailNow; only from the subtest's goroutine.
func (e *env) fatalf(format string, args ...any) {
	e.t.Helper()
	e.t.Fatalf("%s: %s", e.contract, fmt.Sprintf(format, args...))
}

// goFn runs fn in a goroutine that the subtest waits for at its end.
func (e *env) goFn(fn func()) {
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		fn()
	}()
}

// id returns a new id, unique per subtest, per call and per process.
func (e *env) id() string {
	return fmt.Sprintf("%s/%s/%d", e.t.Name(), nonce, e.ids.Add(1))
}

// ctx returns a context for one scenario, cancelled at the end of the
// subtest and after timeout at the latest.
func (e *env) ctx(timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	e.t.Cleanup(cancel)
	return ctx
}

// backend returns a new backend of the harness, wrapped in a spy, closed
// at the end of the subtest.
func (e *env) backend() *spy {
	s := newSpy(e.h.NewBackend(e.t), e.hung)
	e.t.Cleanup(func() { _ = s.Close() })
	return s
}

// handsOff reports whether the harness's backends hand off
// (backend.HandOffer).
func (e *env) handsOff() bool { return fallback.HandsOff(e.backend()) }

// locker returns a Locker over a new backend of the harness (a new
// "process"), wrapped in a spy; it is closed at the end of the subtest.
// Zero fields of o get the suite's short timings.
func (e *env) locker(o lock.Options) (*lock.Locker, *spy) {
	o.QueueTimeout = cmp.Or(o.QueueTimeout, queueTimeout)
	o.WaiterTimeout = cmp.Or(o.WaiterTimeout, waiterTimeout)
	o.BatchTick = cmp.Or(o.BatchTick, batchTick)
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(e.logw, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	s := newSpy(e.h.NewBackend(e.t), e.hung)
	l, err := lock.New(s, &o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = l.Close() })
	return l, s
}

// defaultLocker is e.locker with the suite's default timings.
func (e *env) defaultLocker() (*lock.Locker, *spy) { return e.locker(lock.Options{}) }

// mustAcquire takes a free (or soon free) id, failing the subtest if it
// cannot.
func (e *env) mustAcquire(l *lock.Locker, id string, ttl time.Duration) *lock.Lease {
	e.t.Helper()
	res, err := l.Acquire(e.ctx(queueTimeout), id, ttl, nil)
	if err != nil || !res.Acquired || res.Lease == nil {
		e.fatalf("Acquire(%q): Acquired=%v Lease=%v err=%v, want a lease", id, res.Acquired, res.Lease != nil, err)
	}
	return res.Lease
}

// mustRelease releases le, failing the subtest on error.
func (e *env) mustRelease(le *lock.Lease) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), prompt)
	defer cancel()
	if err := le.Release(ctx); err != nil {
		e.fatalf("Release(%q): %v", le.ID(), err)
	}
}

// tryAcquire is one TryAcquire by l; it reports the lease or nil.
func (e *env) tryAcquire(l *lock.Locker, id string, ttl time.Duration) (*lock.Lease, error) {
	ctx, cancel := context.WithTimeout(context.Background(), prompt)
	defer cancel()
	res, err := l.TryAcquire(ctx, id, ttl)
	if err != nil {
		return nil, err
	}
	if res.Acquired != (res.Lease != nil) {
		e.errorf("TryAcquire(%q): Acquired=%v but Lease=%v", id, res.Acquired, res.Lease)
	}
	return res.Lease, nil
}

// assertFree checks that a client other than the ones involved can take id
// at once with TryAcquire (so that nothing holds it and nobody is queued),
// and releases it again.
func (e *env) assertFree(l *lock.Locker, id, what string) {
	e.t.Helper()
	e.assertTry(l, id, what, true)
}

// assertHeld checks that a TryAcquire of id by another client fails.
func (e *env) assertHeld(l *lock.Locker, id, what string) {
	e.t.Helper()
	e.assertTry(l, id, what, false)
}

// assertTry checks that a TryAcquire of id by another client, l, succeeds
// when free is set and fails otherwise. A lease it gets is released again.
func (e *env) assertTry(l *lock.Locker, id, what string, free bool) {
	e.t.Helper()
	le, err := e.tryAcquire(l, id, longTTL)
	switch {
	case err != nil:
		e.errorf("%s: TryAcquire(%q) by another client: %v", what, id, err)
	case free && le == nil:
		e.errorf("%s: TryAcquire(%q) by another client failed: the id is still held or has a queue entry left", what, id)
	case !free && le != nil:
		e.errorf("%s: TryAcquire(%q) by another client succeeded (fence %d) although the id should be held", what, id, le.Fence())
	}
	if le == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), prompt)
	defer cancel()
	if err := le.Release(ctx); err != nil && free {
		e.errorf("%s: releasing %q again: %v", what, id, err)
	}
}

// expire ends the lease le (granted for ttl) without a release: see
// expireID. It returns how, for messages.
func (e *env) expire(le *lock.Lease, ttl time.Duration) string {
	e.t.Helper()
	return e.expireID(le.ID(), ttl, le.ValidUntil())
}

// expireID ends id's lease (granted for ttl, valid until validUntil)
// without a release: through the harness's Expirer or ClockAdvancer when it
// has one, otherwise by waiting for the TTL to run out (then validUntil
// must be known). It returns how, for messages.
func (e *env) expireID(id string, ttl time.Duration, validUntil time.Time) string {
	e.t.Helper()
	if x, ok := e.h.(Expirer); ok {
		x.ExpireNow(e.t, id)
		return "expired by the harness (Expirer)"
	}
	if c, ok := e.h.(ClockAdvancer); ok {
		// The store's expiry is at most ttl after now (the acquire was
		// received before now).
		c.Advance(e.t, ttl+10*time.Millisecond)
		return "expired by advancing the store's clock (ClockAdvancer)"
	}
	if validUntil.IsZero() {
		e.fatalf("internal: expireID(%q) without Expirer or ClockAdvancer needs validUntil", id)
	}
	// The store's expiry is within ValidUntil plus the request's transit.
	waitUntil(validUntil.Add(150 * time.Millisecond))
	return "expired at its TTL"
}

// canExpireEarly reports whether e.expire ends a lease before its TTL.
func (e *env) canExpireEarly() bool {
	switch e.h.(type) {
	case Expirer, ClockAdvancer:
		return true
	}
	return false
}

// testWriter keeps a Locker's log lines (the suite injects faults, so a
// passing property logs warnings too) and hands them to t.Log at the end
// of the subtest only if it failed; otherwise they are dropped. It keeps
// the last maxLogLines lines.
type testWriter struct {
	t       *testing.T
	mu      sync.Mutex
	lines   []string
	dropped int
	stopped bool
}

// maxLogLines bounds the log lines a failed property prints.
const maxLogLines = 200

var _ io.Writer = (*testWriter)(nil)

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		if len(w.lines) == maxLogLines {
			w.lines = w.lines[1:]
			w.dropped++
		}
		w.lines = append(w.lines, strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// stop ends the logging and, if the subtest failed, prints what was kept.
func (w *testWriter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if !w.t.Failed() || len(w.lines) == 0 {
		return
	}
	w.t.Logf("the Lockers' log (last %d lines, %d before them dropped):\n%s", len(w.lines), w.dropped, strings.Join(w.lines, "\n"))
}
