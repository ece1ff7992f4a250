package conformance_test

import (
	"os"
	"testing"

	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// TestMain takes the machine-wide lock of the test binaries that check
// bounded delays (redisserver.Exclusive): the self-test runs the whole
// suite for every broken backend at once, a burst of CPU that would starve
// the bounds of the Redis, fault and cluster tests beside it, and its own
// control run checks bounds too. The self-test's subprocesses run under
// their parent's lock.
func TestMain(m *testing.M) {
	if os.Getenv(brokenEnv) == "" {
		redisserver.HoldExclusive()
	}
	os.Exit(m.Run())
}
