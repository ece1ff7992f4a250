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

// TestConformanceSecure runs the suite in both modes over TLS, logged in
// as an ACL user that may touch only the keys and channels of the test
// prefixes and run only the commands of harness.ACLRules: no FUNCTION,
// no SCRIPT, no admin command (harness.SecureServer).
func TestConformanceSecure(t *testing.T) {
	t.Parallel() // beside the other runs of the suite: each property has keys of its own
	harness.CheckACLLog(t)
	for _, mode := range []rueidisbackend.Mode{rueidisbackend.Tracking, rueidisbackend.PubSub} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			harness.RunRueidis(t, harness.SecureServer, mode, nil)
		})
	}
}
