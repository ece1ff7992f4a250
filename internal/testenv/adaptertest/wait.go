package adaptertest

import (
	"testing"
	"time"

	"github.com/redislocker/lock/internal/testenv/testkit"
)

// Deadline bounds every wait of this package: a test that waits longer
// fails.
const Deadline = 10 * time.Second

// Eventually polls cond until it holds, failing with what after
// [Deadline].
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, Deadline, what, cond)
}

// Until calls check until it returns "", failing with its last answer
// after [Deadline].
func Until(t testing.TB, check func() string) {
	t.Helper()
	testkit.Until(t, Deadline, check)
}
