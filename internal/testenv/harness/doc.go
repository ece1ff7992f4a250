// Package harness holds the conformance harnesses of the project's own
// backends: [Memory] for memorybackend (which the conformance package's
// self-test wraps in its deliberately broken backends), and [Redis] for the
// two Redis adapters on one server or on a cluster ([GoRedis] for
// redisbackend, [Rueidis] for rueidisbackend). It is test support: no
// library code imports it.
package harness

// The harnesses' small limits, so that waiter-cap and purge-limit can fill
// a queue; the suite's largest queue has 16 waiters.
const (
	MaxWaiters = 64
	PurgeLimit = 8
)
