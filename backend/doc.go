// Package backend defines what a lock backend implements: the atomic steps on
// one store that the lock package composes into fair, fenced, queued locks.
//
// The lock package (the "core") owns everything that is written once:
// argument validation, tokens, waiting, wake-up routing, heartbeats, timers,
// batching, lease renewal and error wrapping. A backend owns only atomic
// steps on its store. Each method below is one step: on Redis, one Lua
// script; in memory, one critical section.
//
// # Interfaces
//
// A backend implements [Backend]: fair try-acquire with enqueue, release,
// extend, leave, heartbeat, wake-ups (Subscribe) and Close. Optional
// capabilities are separate interfaces found by type assertion; the core
// runs a fallback for each one a backend lacks:
//
//   - [Batcher]: many acquire or leave steps in one round trip
//     (fallback: one step at a time);
//   - [ExtendBatcher]: many extend steps in one round trip, for the
//     Locker's keep-alive (fallback: up to 16 Extend calls at a time);
//   - [Resolver]: the smallest TTL the store can express
//     (fallback: one millisecond);
//   - [Inspector]: a read-only view of one id for operators
//     (fallback: the core's Inspect returns ErrUnsupported);
//   - [HandOffer]: direct hand-off, a step that frees the lock grants it to
//     the head and the wake-up carries the grant (checklist item 14;
//     fallback: the head is woken and takes the lock with its own step);
//   - [Sharer]: shared ids, for semaphores and reader-writer locks
//     (checklist item 15; fallback: none, the core returns ErrUnsupported).
//
// # Implementer's checklist
//
// State per id: a lock (holder token, expiry, fence), a queue of waiters
// (token, ticket, deadline) and a fence counter.
//
// Two words are used throughout. An entry is dead once its deadline is at
// or before the store's now, and a lease has ended once its expiry is,
// whether or not a step has removed it yet: no step, Inspect included,
// treats either as live. The head is the live entry with the lowest
// ticket: a dead entry, purged or not, is never the head, so the head a
// step grants or wakes (items 1, 7 and 14) is the first live one. "Store" below means
// whatever holds that state (Redis keys, table rows, a map in memory);
// the Redis adapters are the running example.
//
// Ids and tokens are arbitrary byte strings, not text: they may hold NUL,
// invalid UTF-8, braces and separators. Choose columns that keep every
// byte (bytea, not text; Redis strings are binary-safe) and an encoding of
// the id into names that is injective (ids "a:b" and "a" with suffix ":b"
// never meet).
//
//  1. Acquire is one atomic step: purge expired waiters of the id (every
//     expired entry, up to a bounded LIMIT per step). When req.Token already
//     holds the lock, whatever the queue holds, the step is a no-op that
//     reports Acquired with the existing fence and the remaining TTL, never
//     req.TTL (retry safety, S6; a lease must not claim more validity than
//     the store has left, S2). Otherwise it grants if and only if the lock
//     is free and no waiter with a lower ticket than the requester's is in
//     the queue (a requester that is not queued has an infinite ticket, so
//     any queued waiter blocks it). Granting removes the requester's queue entry, sets
//     the lock to req.Token with expiry now+req.TTL (relative to the store's
//     clock), and takes the next fence from a counter (per id, or wider:
//     fences and tickets need only strictly increase per id, not by one).
//     Fences never go back, also after the id was idle and its state was
//     deleted: a counter deleted with the id's other state restarts, so keep
//     it apart (a store-wide counter), or take the fence from the store's
//     clock as the Redis adapters do: max(last fence + 1, server time in
//     µs), under a clock assumption that your backend's doc must state
//     (docs/protocol.md in the repository states the Redis one). An entry
//     past its deadline is dead even where the
//     purge LIMIT left it in place: never refresh or grant it; its owner
//     counts as not queued.
//  2. When Acquire does not grant and req.Wait is set, the requester is
//     enqueued with the next ticket of the id's ticket counter (or keeps its
//     ticket if already queued) and its deadline becomes now+req.WaiterTTL by
//     the store's clock. Tickets strictly increase per id; the queue is
//     ordered by ticket, never by time. A full queue (the cap of item 11)
//     returns ErrQueueFull and enqueues nothing; a requester already queued
//     is never refused for it. Without req.Wait nothing is enqueued and no
//     deadline is refreshed, but a requester that is already queued is
//     reported as such all the same: Grant.Queued, its Ticket, and Head.
//  3. Release deletes the lock only if req token holds it (compare-and-
//     delete); otherwise it returns ErrNotHeld and changes nothing. A lease
//     past its expiry is not held, whether or not anyone took the lock
//     since: its Release is ErrNotHeld too. A backend whose client may
//     resend a command on its own (go-redis retries after a lost reply) may
//     answer nil to a token that released the id a short while ago (the
//     Redis adapters: within a minute), so that the resent release does not
//     report ErrNotHeld for a release that happened, whatever grants and
//     releases came in between; it never touches a lock another token
//     holds.
//  4. Extend sets a new expiry only if the token holds the lock and it has
//     not expired (compare-and-set); it never re-creates an expired lock
//     (an upsert is the classic mistake), and it keeps the fence. Otherwise
//     ErrNotHeld.
//  5. Leave removes the token's queue entry and, if the token holds the
//     lock (a grant that raced the waiter's cancellation), releases it. It is
//     idempotent and returns nil when there was nothing to remove.
//  6. Heartbeat refreshes the deadline of each listed waiter that is still
//     queued (never re-adds one that is gone, never revives one past its
//     deadline), purges expired waiters of each listed id, and reports per
//     waiter whether it is still queued and whether it could be granted now
//     (lock free and it is the head). A live waiter whose heartbeats arrive
//     within WaiterTTL is never purged.
//  7. Wake the head: every step that frees the lock while waiters are
//     queued, or removes the head while the lock is free, or finds the lock
//     free with a queued head (Heartbeat), wakes that head through the
//     Subscribe with Wake{ID, Token: headToken}. Removing the head includes
//     its Leave and the purge of a dead head by any step (an Acquire of
//     another client, a Heartbeat). Only the head is named; other waiters
//     are not woken. A wake-up should reach only the process whose waiter
//     it names, once (the Redis adapters record each waiter's inbox, a
//     channel or key of its process, when it queues, and send there); one
//     that reaches every process subscribed to the id, at most once each,
//     is correct too (the core routes it to the named waiter), at the cost
//     of a delivery per waiting process (conformance.Limits
//     .WakesEveryProcess states it). A lease
//     that expires without a release need not notify: the core keeps a
//     timer at the holder's remaining TTL, once it knows it is the head.
//     So every step that changes the head while the lock is held (a grant
//     to the head with waiters left, the head's Leave, the purge of a dead
//     head) tells the new head, unless it is the requester of the step
//     (its reply tells it): Wake{ID, Token: headToken, HolderTTL: the
//     holder's remaining TTL} (optional: a plain Wake{ID, Token:
//     headToken} makes it re-check with a step, which tells it too).
//  8. Subscribe must not return before wake-ups for the id can be
//     delivered (the core subscribes before it checks, so no release can
//     slip between): on Redis, wait for the server's confirmation of the
//     SUBSCRIBE, not only for the command to be sent. Use one shared,
//     reference-counted subscription per backend, never a connection per
//     waiter. Once the backend's own channel (its inbox) is subscribed,
//     Subscribe of another id may be a local registration with no I/O. A
//     backend whose wake-ups wait in a store it reads when told (the
//     rueidis tracking mode: a list key per process, tracked from the
//     connection's start, drained on its invalidation) may make Subscribe
//     a registration only: a wake-up sent before the process looked is
//     still there. So may one whose wake-ups come from tracking a key the
//     step itself reads: the core always runs a waiting Acquire after
//     Subscribe and before it relies on wake-ups, and that step's read
//     starts the tracking. When the connection is re-established, deliver
//     Wake{ID: id, All: true} for every subscribed id so that every local
//     waiter re-checks. If the backend cannot name the head (e.g. a cache
//     invalidation), deliver Wake{ID: id}.
//     Steps that return ErrNotHeld may still expire or purge what is
//     already dead; nothing a live client can observe changes.
//  9. Errors: return ErrNotHeld and ErrQueueFull as themselves (wrapping
//     is allowed); return store or client failures as they are, the core
//     wraps them once in an error that matches ErrBackend and the
//     client's error. Honour ctx: a cancelled ctx
//     ends the call, and the outcome may then be unknown (the core cleans up
//     by token with Leave). That cleanup may reach the store before the
//     cancelled step does (another connection, a resent command): the
//     backend need not order them, and what the late step leaves (an entry,
//     a grant) is bounded by its WaiterTTL or TTL.
//  10. Concurrency: every method may be called concurrently from many
//     goroutines. A backend value is one "process": two backend values on
//     the same store contend with each other exactly like two machines.
//     Atomicity is per step and per id: each waiter of a Heartbeat and each
//     request of a batch is its own step. Neither needs to be atomic as a
//     whole, and neither may hold a lock of one id while it waits for
//     another (a store where one batch is one transaction deadlocks two
//     batches that list the same ids in opposite orders: run one
//     transaction per id, or take the ids in a fixed order). AcquireBatch
//     still takes effect in request order and reports in that order.
//  11. Bounds (H3): at most MaxIDLength bytes per id and MaxTokenLength per
//     token (the core validates both before any call); a cap on waiters per
//     id; a LIMIT on the purge work of one step. Every key or entry a
//     backend stores expires, except documented counters (fence, ticket).
//     A store that expires lazily (rows past their expiry deleted by a later
//     step or a sweep) has "no state left" (H2) for an id once every row of
//     it is past its expiry: expired rows count as gone, but they must go
//     within a bounded, documented idle time, and never be read as live.
//  12. Close releases the backend's own resources; a second Close does
//     nothing more and returns nil or ErrClosed. Every other call after
//     Close returns ErrClosed.
//  13. TTLs: a store with a coarser clock than the TTLs it is given states
//     it with Resolver. Grant.TTL of a retried grant is the remaining TTL
//     rounded down (never more than is left); Grant.HolderTTL is the
//     holder's remaining TTL rounded up to the resolution, so that it is
//     never 0 while the lock is held (Redis: PTTL in ms, 0 in the last
//     millisecond, reported as 1).
//  14. Direct hand-off (optional, [HandOffer]; skip it and item 7's
//     wake-ups are the protocol). Store the lease TTL a waiter asks for with
//     its queue entry. Every step that leaves the lock free with a live head
//     queued (a release, the head's Leave, a purge, a Heartbeat or another
//     client's Acquire that finds the lease expired, an operator's forced
//     release) grants it to that head in the same atomic step: the lock
//     set to the head's token with expiry now+its TTL, the next fence from
//     Acquire's counter, its entry removed. Never grant a head past its
//     deadline (purge it). Then deliver Wake{ID, Token: head, Grant:
//     &HandOff{Fence, TTL, StoreTime}}, StoreTime being the store's clock
//     at the grant, and tell the next head the new holder's TTL (item 7).
//     Report Grant.StoreTime on every Acquire step that leaves the
//     requester queued: the core maps a grant's StoreTime to its own clock
//     through it, so that ValidUntil stays conservative (S2). Heartbeat
//     may report a head it granted as queued. A grant to a head whose
//     process died costs the queue that lease's TTL: the lease expires,
//     and the next head, told that TTL, takes the lock then. A waiter
//     cancelled before it sees its grant releases it with Leave (item 5).
//  15. Shared ids (optional, [Sharer]). An id acquired with a Capacity of
//     2 or more keeps that capacity, with its permits, in its state while
//     it has a holder or a waiter; a request with another capacity (a
//     mutex's 0 or 1 included, and a shared request on a mutex) fails with
//     ErrCapacity and changes nothing. Its holders are a set of leases,
//     each with its own token, expiry, fence (from the id's one counter:
//     every grant takes a new, greater fence) and permits. Items 1-14 hold
//     with "the lock is free" read as "the requester's permits fit": the
//     permits of the live leases plus req.Permits are at most Capacity.
//     A requester is granted if and only if it fits and no live waiter is
//     ahead of it: a head that does not fit blocks everyone behind it,
//     even a request that would fit (so an exclusive waiter is never
//     starved by shared ones). A waiter's entry records its permits. Every
//     step that frees permits or removes a head grants (with
//     [HandOffer]), or wakes, the heads in ticket order while they fit:
//     several waiters in one step, each with its own fence, wake-up and
//     grant. Grant.HolderTTL and Wake.HolderTTL are the remaining TTL of
//     the live lease that ends first. Release, Extend and Leave find the
//     token's lease among the holders; Inspect lists them (Holders,
//     Capacity) and each waiter's Permits. A lease that ends, by expiry or
//     release, frees its permits; when the id has no holder and no waiter,
//     its capacity is forgotten with the rest of its state.
//
// The conformance package runs the same suite against every backend; a new
// backend is done when conformance.Run passes.
package backend
