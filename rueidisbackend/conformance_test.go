package rueidisbackend_test

import (
	"testing"

	"github.com/redislocker/lock/internal/testenv/harness"
	"github.com/redislocker/lock/rueidisbackend"
)

// TestConformanceTracking runs the shared suite against a real
// redis-server with client-side caching on: every Backend is built by New
// and learns of released and expired locks from invalidations.
func TestConformanceTracking(t *testing.T) {
	t.Parallel() // beside the other runs of the suite: each property has keys of its own
	harness.RunRueidis(t, harness.SharedServer, rueidisbackend.Tracking, nil)
}

// TestConformancePubSub runs the suite with caching off: every Backend is
// made by NewWithClient on a client built with DisableCache, and wakes
// its waiters from the scripts' PUBLISH over one dedicated pub/sub
// connection.
func TestConformancePubSub(t *testing.T) {
	t.Parallel() // beside the other runs of the suite: each property has keys of its own
	harness.RunRueidis(t, harness.SharedServer, rueidisbackend.PubSub, nil)
}
