// Package lock provides distributed locks with a fair wait queue, fencing
// tokens and pluggable backends.
//
// A [Locker] wraps a [backend.Backend] (redisbackend for go-redis,
// rueidisbackend for rueidis, memorybackend in process). [Locker.Acquire]
// takes a lease on an id; if the id is held, the caller joins a FIFO queue
// and is granted the lock when it is its turn, until the queue timeout
// (default 30 minutes) or its context ends. A backend with direct hand-off
// ([backend.HandOffer]) grants the lock to the head in the step that frees
// it, and the head returns with no step of its own; otherwise the head is
// woken and takes the lock with one step. [Locker.AcquireMany] streams the leases
// of many ids as they are granted; [Do] runs a function under a lock (or
// skips it at once if the lock is held, with NoWait: a job that must run
// once across replicas), keeps the lease alive while it runs, and always
// releases. Any lease can be kept alive by the Locker
// ([AcquireOptions.KeepAlive], for Acquire and AcquireMany): all its kept-alive
// leases are extended in one batched backend step per tick.
//
// An id may also be shared, for semaphores and reader-writer locks:
// AcquireOptions.Capacity (2 or more) lets leases be held together while
// their AcquireOptions.Permits add up to at most the capacity; a writer
// takes them all. The queue stays FIFO: a waiter that does not fit holds
// back those behind it (so a writer is never starved), and the waiters at
// the head that fit are granted together. Each lease has its own token,
// fence, TTL and release. It needs a backend.Sharer (every backend of
// this module is one).
//
// The Locker and memorybackend work inside a testing/synctest bubble, so
// that tests of code using them move time with time.Sleep instead of
// waiting.
//
// # Guarantees
//
// This is the one statement of the guarantees. Each is checked by named
// properties of the conformance suite (in parentheses), which every
// backend passes; docs/deployment.md in the repository says where they end
// (restarts, failovers, paused holders).
//
// Safety:
//   - S1 exclusive grants: for one id, grant intervals on the backend never
//     overlap (mutual-exclusion); on a shared id, the permits of the leases
//     live at once never exceed its capacity, and an exclusive lease (all
//     the permits) overlaps no other (shared-capacity, shared-exclusive).
//   - S2 conservative validity: [Lease.ValidUntil] is measured from the moment the
//     acquire (or extend) was sent, so it never lies past the backend's expiry;
//     every TTL a backend reports lies between what is left and what was
//     granted, exact to its resolution (a millisecond on Redis)
//     (conservative-validity, ttl-precision).
//     A lease granted by hand-off maps the grant's store time to this
//     process's clock through the waiter's last step (its send time and the
//     store time it read), less 1000 ppm of the time between them and 2 ms,
//     and never past the time the grant arrived plus the TTL; the send time
//     of the last step or heartbeat that found it queued is a floor
//     (handoff-grant).
//   - S3 fencing: [Lease.Fence] strictly increases per id, in grant order, also
//     when a lease ends without a release while others wait; Extend keeps it
//     (fencing, fence-after-idle, expiry-handoff). The Redis backends keep
//     this across idle periods, restarts and failovers under a clock
//     assumption, which docs/protocol.md in the repository states.
//   - S4 owner-only: Release and Extend compare the owner token, one by one in
//     a batched extend too; Extend never re-creates an expired lock. Otherwise
//     they return [ErrNotHeld] and change nothing (owner-only,
//     not-held-after-expiry, extend-never-revives, extend-batch).
//   - S5 lost leases are signalled: [Lease.Lost] is closed, and Do's context
//     cancelled, no later than ValidUntil, by the Locker's own timer: a
//     backend client that ignores deadlines does not delay it
//     (lost-lease-signalled).
//   - S6 retry-safe: a retried acquire with the same token is a no-op; a step
//     whose outcome is unknown (error, cancellation) is cleaned up by token
//     (retry-safe, retry-remaining-ttl).
//   - S7 AcquireMany never leaves a lease held that the caller was not shown
//     (acquire-many-no-unseen-leases).
//
// Liveness and fairness:
//   - L1 no lost wake-ups: a waiter subscribes before it checks; the head is
//     granted (direct hand-off) or woken when the lock is freed; the head
//     keeps a timer at the holder's remaining TTL; heartbeats double as a
//     fallback check, so a free lock is noticed within one notification or
//     within one heartbeat interval (WaiterTimeout/3). A grant to a head
//     that just died costs the queue that lease's TTL at most
//     (wake-on-release, no-lost-wakeup, subscribe-scoped, handoff-dead-head).
//   - L2 FIFO among live waiters: grants follow queue tickets, which the
//     store hands out in enqueue order (never from client clocks); a
//     TryAcquire never jumps the queue (fifo-order, try-acquire-fair). On a
//     shared id a waiter that does not fit holds back every later one, and
//     the heads that fit are granted in one step (shared-fifo-batch).
//   - L3 a waiter that stops heartbeating is purged after WaiterTimeout (by
//     the backend's clock), wherever it stands in the queue; a live waiter
//     is never purged, nor one whose deadline is near, and if it finds its
//     entry gone it re-queues at the tail and logs a warning
//     (dead-waiter-purge, live-waiter-kept, purge-exact).
//   - L4 every wait ends: at the queue timeout, or when ctx ends (queue-timeout).
//   - L5 overlapping AcquireMany calls never deadlock as long as the caller
//     releases what it is shown; AcquireMany itself holds nothing back
//     (acquire-many-overlap).
//   - L6 cancelling a waiter removes its entry, and a grant that raced the
//     cancellation is released (cancel-while-queued, handoff-cancelled-head).
//
// Hygiene:
//   - H1 no goroutine outlives [Locker.Close]: a Locker runs one heartbeat
//     goroutine only while it has waiters, and one keep-alive goroutine
//     only while it has kept-alive leases (no-goroutine-leak).
//   - H2 every key a backend keeps expires, so nothing is left of an id that
//     stays idle for the backend's stated bound (on Redis at most an hour
//     after its last grant or extend) (no-state-left).
//   - H3 bounded input and work: ids of up to 512 bytes
//     ([backend.MaxIDLength]), a cap on the waiters of an id, bounded purge
//     work per step (bounded-input, waiter-cap, purge-limit).
//
// No lease stops a holder that paused (GC, swap, SIGSTOP) from acting after
// its lease ended: only a resource that checks [Lease.Fence] can reject such
// a late write. Use the fence where correctness matters.
package lock

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// Defaults of Options.
const (
	defaultQueueTimeout  = 30 * time.Minute
	defaultBatchTick     = 50 * time.Millisecond
	defaultWaiterTimeout = 15 * time.Second
)

// minWaiterTimeoutFloor is the shortest WaiterTimeout New accepts, or 10
// times the backend's resolution if that is longer. Below it a waiter's
// heartbeats (every WaiterTimeout/3) cannot keep its entry alive through
// ordinary scheduling and network delays: it would be purged and re-queued
// at the tail again and again.
const minWaiterTimeoutFloor = 100 * time.Millisecond

// cleanupTimeout bounds the Leave or Release sent after a step whose
// outcome is unknown (the caller's ctx may already be over).
const cleanupTimeout = 5 * time.Second

// Options configures a Locker. A nil *Options, and every zero field, means
// the default. New refuses a negative duration, and a WaiterTimeout below
// 100 ms (or 10 times the backend's resolution, if longer), with an
// *backend.ArgumentError naming the field.
type Options struct {
	// QueueTimeout is how long Acquire, AcquireMany and Do wait in the queue
	// before giving up with Acquired == false. Default 30 minutes.
	QueueTimeout time.Duration
	// BatchTick is how often AcquireMany retries its woken ids (in one
	// batched round trip) and yields a snapshot of what they were granted;
	// a grant by hand-off needs no step and is yielded as it comes.
	// Default 50 ms.
	BatchTick time.Duration
	// WaiterTimeout is how long a queue entry lives without a heartbeat;
	// a waiter whose process died is purged after it. The Locker sends one
	// batched heartbeat for all its waiters every WaiterTimeout/3, which
	// also serves as the fallback check for a lost wake-up. Default 15 s.
	WaiterTimeout time.Duration
	// Logger receives Do's warnings and errors and the Locker's own
	// warnings (a live waiter that was purged, a failed cleanup).
	// Default slog.Default().
	Logger *slog.Logger
	// Observer receives the Locker's events (acquisitions, hand-offs,
	// releases, lost leases, extends, backend steps, waiters) for metrics
	// and traces; see Observer. Default nil: none, at no cost.
	Observer Observer
}

// Locker takes locks on one backend. It is safe for concurrent use. Create
// it with New and Close it when done.
type Locker struct {
	b            backend.Backend
	queueTimeout time.Duration
	tick         time.Duration
	waiterTTL    time.Duration
	heartbeat    time.Duration
	resolution   time.Duration
	handsOff     bool // the backend grants by hand-off (backend.HandOffer)
	shares       bool // the backend takes shared ids (backend.Sharer)
	log          *slog.Logger
	obs          *observer // nil without an Observer

	life   *lifecycle // calls in flight, stray steps, Close
	room   *room      // waiters, their subscriptions and heartbeats
	keeper *keeper    // kept-alive leases
}

// New returns a Locker over b; opts may be nil. It checks its input before
// anything else: a nil b, a negative duration or a WaiterTimeout below
// its minimum is an *backend.ArgumentError (matching ErrInvalidArgument)
// that names the field, and no Locker is made.
func New(b backend.Backend, opts *Options) (*Locker, error) {
	if b == nil {
		return nil, argErr("b", "nil backend")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	res := fallback.Resolution(b)
	if err := o.check(res); err != nil {
		return nil, err
	}
	o.QueueTimeout = cmp.Or(o.QueueTimeout, defaultQueueTimeout)
	o.BatchTick = cmp.Or(o.BatchTick, defaultBatchTick)
	o.WaiterTimeout = cmp.Or(o.WaiterTimeout, defaultWaiterTimeout)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	wt := o.WaiterTimeout.Truncate(res)
	obs, b := newObserver(o.Observer, b) // b reports its steps to obs
	life := newLifecycle()
	return &Locker{
		b:            b,
		queueTimeout: o.QueueTimeout,
		tick:         o.BatchTick,
		waiterTTL:    wt,
		heartbeat:    wt / 3,
		resolution:   res,
		handsOff:     fallback.HandsOff(b),
		shares:       fallback.Shares(b),
		log:          o.Logger,
		obs:          obs,
		life:         life,
		room:         newRoom(b, wt, o.Logger, obs, life),
		keeper:       newKeeper(b, wt/3, o.Logger, obs, life),
	}, nil
}

// minWaiterTimeout is the shortest WaiterTimeout for a backend of
// resolution res.
func minWaiterTimeout(res time.Duration) time.Duration {
	return max(minWaiterTimeoutFloor, 10*res)
}

// check validates o for a backend of resolution res.
func (o *Options) check(res time.Duration) error {
	for _, f := range [...]struct {
		name string
		d    time.Duration
	}{{"QueueTimeout", o.QueueTimeout}, {"BatchTick", o.BatchTick}, {"WaiterTimeout", o.WaiterTimeout}} {
		if f.d < 0 {
			return argErr("opts."+f.name, fmt.Sprintf("must not be negative, got %v", f.d))
		}
	}
	if m := minWaiterTimeout(res); o.WaiterTimeout != 0 && o.WaiterTimeout < m {
		return argErr("opts.WaiterTimeout", fmt.Sprintf("%v is below the minimum %v (100 ms, or 10x the backend's resolution)", o.WaiterTimeout, m))
	}
	return nil
}

// Close cancels the Locker's waiting calls (they leave their queues and
// return ErrClosed), stops its heartbeat and keep-alive goroutines, waits
// for them, and closes the backend. Running Do calls have their fn's
// context cancelled (cause ErrClosed) and are waited for, so they still
// release. Leases already granted are not released and no longer kept
// alive: release them before Close, or they expire at their ValidUntil
// (Lost then fires as usual). Later calls return ErrClosed; Close itself is
// idempotent and returns the backend's Close error once.
//
// Close waits for the calls in flight, which return within moments once
// it cancels them (a call whose ctx can never end, such as
// context.Background(), waits for its step in flight to return from the
// client), and then for the backend steps that callers stopped waiting
// for, when their ctx ended, and for the cleanups after them (Leave by
// token), for up to 5 seconds in all. On a stalled server, a client that
// ignores deadlines can keep such a step longer: Close then closes the
// backend all the same, the step's goroutine ends when its client returns
// (at the client's read timeout, or when the client is closed), and what
// the step left expires on its own (a queue entry after WaiterTimeout, a
// grant after its ttl).
//
// Close waits for the calls in flight, so it must not be called from inside
// Do's fn or an AcquireMany loop body of the same Locker (like
// http.Server.Shutdown from a handler, it would wait for itself).
func (l *Locker) Close() error {
	return l.life.closeOnce(func() error {
		l.life.shut()
		l.room.close()
		l.keeper.close()
		if n := l.life.steps.wait(closeWait); n > 0 {
			l.log.Warn("lock: closing with backend steps still running in the client; they end when the client returns, and what they left expires on its own",
				"steps", n, "waited", closeWait)
		}
		return l.b.Close()
	})
}

// begin registers a call in flight; it fails once the Locker is closed.
func (l *Locker) begin() error { return l.life.begin() }

// end ends a call that begin registered.
func (l *Locker) end() { l.life.end() }
