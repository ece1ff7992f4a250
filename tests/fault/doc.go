// Package fault tests the lock's guarantees when things break, on real
// redis-server processes, through lock.Locker and every Redis adapter in
// the adapters table of its tests. The guarantees are those the lock
// package doc states, named S1-S7, L1-L6 and H1-H3. It has
// no code of its own; everything is in its _test.go files:
//
//   - TestLinearizableFencedMutex: porcupine checks that the histories of
//     6 clients doing Acquire/Release through fault proxies (delays, resets,
//     cuts after N bytes) are linearizable against a fenced mutex (S1, S3,
//     S4), with operations of unknown outcome modelled as such.
//   - TestLinearizableFencedSemaphore: the same on a shared id of capacity
//     3 whose clients take 1 permit or all 3, against a fenced semaphore
//     (capacity never exceeded, an exclusive lease overlaps no other).
//   - TestFencedResourceRejectsStaleWrites: holders paused past their TTL
//     write to a resource that checks fences; every stale write is rejected
//     and no update is lost (S2, S3).
//   - TestNoLostWakeup: a release between check and subscribe, CLIENT KILL
//     TYPE pubsub, the pub/sub connection down during a release, and a
//     holder that expires without a release: the waiter is granted within
//     the documented bound (L1).
//   - TestDeadWaiterPurgedWhenProcessStopped: a SIGSTOPped waiter process is
//     purged within the WaiterTimeout window, the lock moves on, and on
//     SIGCONT the waiter re-queues and is granted, never hangs (L3).
//   - TestStoppedHolderLosesLeaseHonestly: a holder process SIGSTOPped past
//     its TTL: nobody is granted before its ValidUntil; on SIGCONT its Lost
//     fires and Extend/Release say ErrNotHeld (S2, S5).
//   - TestCutConnectionLeavesNothing: a connection cut at every byte offset
//     of an acquire, an enqueue and a release: the unknown outcome is
//     cleaned up by token, no key is left (S6, H2).
//   - TestRedisRestart: SHUTDOWN NOSAVE and a restart on the same port:
//     holders see their lease lost, waiters recover and are granted, the
//     scripts are reloaded after NOSCRIPT.
//   - TestServerStall: CLIENT PAUSE and SIGSTOP of redis-server longer than
//     the TTL: no validity reported past the TTL, Lost fires; a short stall:
//     renewals resume.
//
// TestMain checks for leaked goroutines (goleak). -soak makes the
// randomized tests run for minutes.
package fault
