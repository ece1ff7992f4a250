// Package conformance is the shared test suite that every lock backend
// runs: the guarantees that the lock package doc states (S1-S7, L1-L6,
// H1-H3), as named properties checked through the real lock.Locker over
// the backend, or straight at its steps. The list below says what each property does; the package
// lock doc says what each guarantee promises.
//
// # Running it
//
// A backend package has a short conformance_test.go:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, newHarness) // newHarness(t) returns a Harness on a fresh store
//	}
//
// Run makes one subtest per property, named after it, and a new Harness for
// each (newHarness is called inside the subtest). Harness.NewBackend must
// return an independent backend on the harness's store each time: a
// separate "process" that contends with the others on the same ids. Every
// failure message starts with the property's contract sentence, e.g.
// "S1 mutual-exclusion: for one id, grant intervals never overlap: ...".
// Run one property with -run 'TestConformance/fifo-order$'.
//
// Ids are made from t.Name() and a random per-process nonce, so one shared
// store (a Redis server) needs no flush between runs. The Lockers of the
// suite use short timings (WaiterTimeout 300 ms-1 min as each property
// needs, BatchTick 10 ms) and are closed when their subtest ends; the suite
// takes seconds, not minutes (about 25 s on memorybackend with -race).
// Before the first property, and before each one after a step went
// unanswered, Run probes the store with one Acquire of a free id: a
// backend that hangs fails each property within seconds and the whole
// suite within about two minutes, and one whose steps fail, at once. The
// Lockers' log lines (the suite injects faults, so a passing run logs
// warnings) are printed, with t.Log, only for a property that failed. The
// suite assumes that the store's clock runs at real speed: a harness may
// move it ahead with ClockAdvancer, but not stop it.
//
// # Properties
//
// Safety:
//   - mutual-exclusion (S1): 8 processes x 2 goroutines take one id 208 times
//     (Acquire and TryAcquire); a real-time detector sees at most one holder
//     inside, and the fences seen at entry strictly increase.
//   - conservative-validity (S2): after a lease of 150 ms runs out unextended
//     (also after an Extend), no other client is granted the id before its
//     ValidUntil, and ValidUntil is at most the call's return plus ttl.
//   - fencing (S3): fences strictly increase over successive holders (after
//     release, queue hand-off and expiry); Extend keeps the fence; a retried
//     Acquire with the same Token returns the same fence.
//   - owner-only (S4): Release and Extend by a non-owner, or by an owner
//     whose lease expired and was taken over, return ErrNotHeld and leave the
//     new holder's lock alone; Extend after expiry does not re-create the
//     lock; Release twice returns nil twice.
//   - lost-lease-signalled (S5): Lost() closes by ValidUntil (+200 ms);
//     Extend finding the lease gone closes it; Do's ctx is cancelled with
//     cause ErrLeaseLost, and Do returns ErrLeaseLost, when Extend reports
//     ErrNotHeld, when the store expired the lease (Expirer), and when the
//     backend is unreachable (by ValidUntil, with nobody saying so).
//   - retry-safe (S6): backend steps retried with the same token are no-ops
//     (same fence, same ticket); Leave by token removes a grant or an entry;
//     when the reply of a granting step or of an enqueue is lost, the core
//     returns ErrBackend and leaves nothing held or queued.
//   - retry-remaining-ttl (S2, S6): a retried Acquire by the holder, alone
//     and in a batch, reports the TTL that is left after 400 ms, not the
//     TTL it asks for; a lease from a retried Acquire is valid no longer
//     than the first grant.
//   - fence-after-idle (S3): fences strictly increase across a release, an
//     expiry and an emptied queue, each followed (with a Forgetter) by the
//     store forgetting the idle id.
//   - not-held-after-expiry (S4): backend Release of an expired lease
//     (at its TTL, and with an Expirer) is ErrNotHeld, with and without a
//     new holder, whose lock stays untouched.
//   - extend-never-revives (S4): backend Extend of an expired lease is
//     ErrNotHeld, and another client can take the id at once.
//   - expiry-handoff (S3, L2): A's lease ends without a release (at its
//     TTL, and with an Expirer) while W and X wait; whether W's own
//     Acquire, a newcomer's or W's Heartbeat comes next, W's fence is
//     above every earlier one, W's retries and Inspect report it, W's
//     Heartbeat finds no entry of W, Inspect lists X alone, and X is
//     granted as soon as W releases.
//   - ttl-precision (S2, checklist item 13): with leases of 1.7 s and
//     1.3 s, a new grant's TTL, a retried grant's, Grant.HolderTTL, a new
//     head's Wake.HolderTTL and a hand-off's TTL each lie between what is
//     left by the clock and what was granted: never rounded to seconds.
//   - extend-batch (S4): one ExtendBatch of six requests: the holders'
//     leases are extended, an intruder's request on an id another token
//     holds, one on a free id and one on an ended lease get ErrNotHeld and
//     change nothing, each result is in its place, and the failures skip
//     nothing after them. It runs the backend's ExtendBatcher, or the
//     core's fallback.
//   - acquire-many-no-unseen-leases (S7): breaking out of AcquireMany, or
//     cancelling it, leaves no unseen lease and no queue entry.
//
// Liveness and fairness:
//   - wake-on-release (L1): with heartbeats and the holder's TTL too slow to
//     matter, a released lock is taken by the queued waiter within 5 s, and a
//     wake-up reached its subscription.
//   - wake-only-head (L1, checklist item 7): four waiters in four
//     processes; after one release, counted per process through the spy,
//     the wake-ups reach the head and no other waiter (none names another
//     waiter; no unnamed wake-up or Wake{All} reaches another process,
//     unless Limits.UnnamedWakes).
//   - wake-new-head (L1, checklist item 7): a waiter with heartbeats too
//     slow to matter is woken within 5 s when it becomes the head of a free
//     lock: by a release, by the head's Leave, by another client's step
//     that purges a dead head, and (with an Expirer) by another waiter's
//     heartbeat that finds the lease ended.
//   - subscribe-live (L1, checklist item 8): a release right after
//     Subscribe returned (and the waiting step after it) wakes the
//     subscriber, with subscriptions delayed 300 ms by a SubscribeDelayer.
//   - subscribe-scoped (L1, checklist item 8): process P subscribes twice
//     to an id and Q once; P cancels one subscription; releases then wake
//     P's waiter through P's other subscription, and Q's through Q's.
//   - reconnect-wakes-all (L1, checklist item 8): after the harness breaks
//     a process's notifier (NotifierDropper), each of its subscribed ids
//     gets Wake{All} within 5 s, and releases wake its waiters again.
//   - one-delivery-per-wake (L1, checklist item 7): eight processes wait,
//     one waiter each, and are granted in turn; the core is handed at most
//     two wake-ups per hand-off across them all (skipped with
//     Limits.WakesEveryProcess).
//   - head-after-grant (L1, checklist item 7): A holds, B and C queue in
//     their own processes, heartbeats every 6.7 s. A releases to B, which
//     makes C the head; B dies holding: C is granted within 100 ms (+ 1 s
//     slack) of B's lease's end. The same when B's Leave makes C the head
//     while A holds and A's lease ends (skipped with HeadChangeUnwoken).
//   - no-lost-wakeup (L1): with the wake-ups lost, after a release, and after
//     the holder's lease expires (at its TTL, or early with an Expirer) the
//     waiter still acquires within the fallback bound.
//   - fifo-order (L2): five waiters in five processes, queued one after
//     another, are granted in that order; a newcomer's TryAcquire never wins.
//   - try-acquire-fair (L2): a TryAcquire racing a hand-off never wins over
//     the queued waiter.
//   - dead-waiter-purge (L3): a live waiter behind two dead ones (their
//     process killed) acquires within WaiterTimeout plus two heartbeats.
//   - live-waiter-kept (L3): a waiter queued for three WaiterTimeouts keeps
//     its ticket and is granted before a later waiter.
//   - queue-timeout (L4): a wait ends at QueueTimeout (Locker or per call)
//     with Acquired=false, WasInUse=true, nil error, and no entry left.
//   - acquire-many-overlap (L5): two AcquireMany calls on the same ids in
//     opposite orders, releasing what they are shown, both complete.
//   - cancel-while-queued (L6): cancelling a queued Acquire returns an error
//     matching context.Canceled and leaves nothing; also when the cancel
//     races the grant.
//
// Direct hand-off (backend.HandOffer; each is skipped for a backend that
// does not hand off):
//   - handoff-grant (S2, S3): A holds, W queues; A's release grants W in
//     the same step: W's Acquire returns with no Acquire step of its own
//     after the release, a fence above A's, and a ValidUntil after the
//     release and no later than its return + TTL; another client polling
//     with TryAcquire takes the id only after that ValidUntil.
//   - handoff-cancelled-head (L6): A holds, W and X queue; W's process
//     drops its wake-ups, A's release grants W; W's Acquire, cancelled,
//     returns context.Canceled with no lease, and its cleanup hands the
//     lock to X at once.
//   - handoff-dead-head (L1): A holds, D and X queue (heartbeats too slow
//     to matter); D's process dies and A releases, which grants D a 300 ms
//     lease: X is granted within that TTL + 100 ms (+ 1 s slack) of the
//     release. A grant to a dead head costs the queue that lease's TTL at
//     most (a head whose deadline passed is purged, not granted).
//
// Shared ids (backend.Sharer, checklist item 15), checked at the
// backend's steps (each waiter in a process of its own, subscribed before
// it queues); each is skipped, and does not fail under Strict, for a
// backend that does not offer shared ids:
//   - shared-capacity (S1): 4 processes x 2 goroutines take 96 leases of 1
//     to 3 permits of a capacity of 3, polling with Acquire (which also
//     finds a hand-off's grant); a real-time ledger never counts more
//     than 3 permits inside, nor one fence held twice, and Inspect, sampled
//     meanwhile, never lists more. Then a rapid state machine drives
//     Acquire (with and without Wait), Release, Leave and Heartbeat of five
//     tokens with fixed permits on a shared id of capacity 2 to 4 through
//     three processes, and compares every result, and each Inspection's
//     holders and waiters (with permits), with a plain model of item 15
//     (grant iff the permits fit and no waiter is ahead; with hand-off,
//     the heads that fit are granted by the step; fences strictly increase
//     in grant order).
//   - shared-exclusive (S1): two shared holders; an exclusive request is
//     refused, an exclusive waiter is not let in by the first release, and
//     is by the second; while it holds, requests of 1, capacity-1 and
//     capacity permits are refused with the holder's TTL.
//   - shared-fifo-batch (L2): X holds exclusively; S1 and S2 (shared)
//     queue, then X2 (exclusive), then S3 (shared). X's release lets S1 and
//     S2 in: both wake-ups arrive before either runs a step (each carries
//     its grant, with hand-off), with fences above X's in ticket order. S3,
//     and a newcomer, are refused though their permits fit (X2 is ahead);
//     X2 is let in once S1 and S2 both released, S3 once X2 did.
//   - shared-fences (S3): three leases granted side by side take strictly
//     increasing fences; retries in two processes, after an Extend, report
//     them; Inspect lists them; an exclusive waiter let in by their
//     releases, and a grant after it, get greater ones.
//   - shared-waiter-release (L1): A holds 1 of 3 permits, X (exclusive)
//     waits, S1 and S2 (1 each) behind it, refused. X's Leave, the purge
//     of X (dead) by S2's Heartbeat, and by a newcomer's Acquire, each
//     lets S1 and S2 in, both woken (or granted) by that one step.
//   - shared-retry (S6): a holder's retried Acquire, in its process,
//     another one, and a batch, reports its fence and a TTL in (0, ttl];
//     a waiter's retry keeps its ticket; Leave by a holder releases its
//     lease (Release then says ErrNotHeld); the waiter is let in only once
//     both holders left; its own Leave releases its grant.
//   - shared-capacity-conflict: on a shared id of capacity 3 with a holder
//     and a waiter, requests of capacity 0, 1, 2 and 4 get ErrCapacity
//     (alone, and in a batch in their place), enqueue nothing (Heartbeat),
//     and change nothing (Inspect, the holder's retry); so does a mutex
//     request while only the waiter is left; once idle the id takes a
//     mutex, refuses a shared request while it is held, and then takes
//     capacity 5.
//   - shared-inspect: holders of 1 and 2 of 4 permits and an exclusive
//     waiter: Inspect lists both leases in fence order (fingerprints,
//     permits, TTLs), the capacity, the second lease as Held, Fence and
//     Holder, and the waiter's 4 permits; a mutex has capacity 0, no
//     Holders and waiters of 0 permits. Skipped without backend.Inspector.
//
// Hygiene:
//   - no-goroutine-leak (H1): no goroutine with a frame of package lock
//     outlives Close, after waits, heartbeats, AcquireMany, Do, a queue
//     timeout and a cancel.
//   - no-state-left (H2): after release, hand-off, TryAcquire, queue
//     timeout, cancel, Leave, AcquireMany and Do, StateLeft is empty; after
//     a lease expired with no step since, it is empty once the store's
//     idle bound passed (the harness's Forgetter makes it pass).
//   - bounded-input (H3): an id of MaxIDLength+1 bytes is an
//     *backend.ArgumentError with no backend call. An id of exactly
//     MaxIDLength (with braces, NUL and invalid UTF-8) works, queue hand-off
//     included, and is not confused with an id that differs in its last byte.
//   - waiter-cap (H3): with Limits.MaxWaiters stated, a full queue refuses
//     a new waiter with ErrQueueFull (alone, in a batch, and through
//     Locker.Acquire) and enqueues nothing, a queued waiter's retry is not
//     refused, and a place that frees up can be taken.
//   - purge-exact (L3, H3): a waiter whose deadline is a third of its
//     WaiterTTL away is still queued with its ticket after other clients'
//     steps; and with 2 x PurgeLimit + 1 dead entries between two live
//     waiters, the live head's ceil(dead / PurgeLimit) heartbeats purge
//     them all, so that once the live waiters leave and the holder
//     releases, StateLeft is empty (that part needs a StateChecker).
//   - purge-limit (H3, L3): with three times Limits.PurgeLimit waiters dead
//     ahead of a live one, no Heartbeat refreshes and no Acquire grants a
//     dead entry, the entry the purges reach last probed first; a dead
//     waiter that asks again with Wait queues anew behind the live one; the
//     live waiter is granted within a bounded number of its own steps.
//
// The API around them:
//   - bad-input: nil ctx, empty id, bad ttl, nil fn or Locker, bad
//     AcquireMany ids, bad options, and every call after Close fail with an
//     error naming the argument (or ErrClosed), with no backend call.
//   - error-kinds (checklist item 9, backend.Kind): ErrNotHeld from Release
//     and Extend is of kind answer; an Acquire cut by its ctx (before the
//     call, and after 1 µs to 5 ms) is never of kind answer, and if it says
//     unsent, its token is neither queued nor holding.
//   - heartbeat-order (checklist item 6): one Heartbeat of six waiters of
//     two held ids, interleaved, some queued and some not, reports each in
//     its place.
//   - batch-order: AcquireBatch requests on shared ids take effect and
//     report in request order, ErrQueueFull in its own place (with
//     Limits.MaxWaiters); LeaveBatch leaves every listed entry.
//   - acquire-many: no empty snapshot; every id exactly once, in ids order
//     within a snapshot; held ids arrive after their release; duplicates fail
//     before I/O; a queue timeout reports the ids left in the last snapshot.
//   - do: Do returns fn's value, releases on fn's error and on panic
//     (re-raised), extends while fn runs 3x the ttl, and returns zero and
//     ErrNotAcquired on a queue timeout.
//   - close: Close ends a queued Acquire, AcquireMany and Do with ErrClosed
//     promptly, they leave the queue, and Close twice returns the same; a
//     backend's own Close twice returns nil or ErrClosed, and its steps
//     after Close return ErrClosed.
//   - inspect: Inspect reports the holder (fence, TTL, fingerprint) and
//     the live waiters in order, bounded; skipped without backend.Inspector.
//   - inspect-read-only: Inspect reports the holder's own fence after
//     grants of other ids; with a lease that ended and a dead head and no
//     step since, it reports the id as not held (no negative TTL) and
//     counts only the live waiter, twice alike; StateLeft is the same
//     before and after, and no wake-up is sent. Skipped without
//     backend.Inspector.
//   - model: a rapid state machine drives Acquire (with and without Wait),
//     AcquireBatch, Release, Extend, Leave, LeaveBatch and Heartbeat on three
//     backends and compares every result with a plain model (holder, fence,
//     queue in ticket order). Tune it with -rapid.checks and -rapid.steps.
//     Its time limit is 5 minutes for rapid's default 100 checks of 30
//     steps, scaled with checks x steps; a failure after it ran out says
//     so (it is not a backend hang).
//
// # Optional harness capabilities
//
//   - Expirer: lets S3, S4 and S5 end a lease at once instead of waiting
//     for its TTL, and enables the no-lost-wakeup case of a lease the store
//     ends early (found by the heartbeat) and the Do-with-expired-lease case
//     of lost-lease-signalled.
//   - ClockAdvancer: used like Expirer (advance past the TTL) when the
//     harness has no Expirer.
//   - StateChecker: enables no-state-left (skipped without it), the
//     second half of purge-exact and inspect-read-only's before-and-after
//     comparison, and makes model check that nothing is left after each
//     of its runs. It must show everything the backend stores for the id,
//     expired or dead entries included, or a leftover cannot be seen.
//   - Forgetter: lets fence-after-idle make the store forget an idle id's
//     state (what it would drop by itself after an idle bound).
//   - NotifierDropper: breaks a backend's notifier connection; enables
//     reconnect-wakes-all (skipped without it).
//   - SubscribeDelayer: makes subscriptions become live late, so that
//     subscribe-live catches a Subscribe that returns early.
//   - Limiter: states the waiter cap and purge limit (waiter-cap is skipped
//     without a cap) and documented exceptions: UnnamedWakes (wake-ups
//     that cannot name the head) and HeadChangeUnwoken (a head removed
//     by a Leave or a purge wakes nobody, nor tells the new head of a held
//     lock; the heartbeat finds it).
//
// # Skips and strict mode
//
// A property whose capability is missing (a harness interface above, an
// optional backend interface, or an exception stated in Limits) is
// skipped, or runs without the case that needs it, with the reason; Run
// ends with a summary that names each. A harness whose Limits set Strict
// claims full conformance: each such skip fails instead, but for the
// shared-* properties of a backend that does not offer shared ids.
//
// The suite wraps every backend in a spy that records the steps
// and wake-ups, and injects faults: lost wake-ups, a killed process, a lost
// reply after a step took effect, a lease taken away. It forwards every
// optional backend interface, so that each runs under the suite. It imports only the
// standard library, pgregory.net/rapid, and packages lock and backend.
package conformance
