package adaptertest

import (
	"testing"
	"time"
)

// Deadline bounds every wait of this package: a test that waits longer
// fails.
const Deadline = 10 * time.Second

// Eventually polls cond until it holds, failing with what after
// [Deadline].
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Until(t, func() string {
		if cond() {
			return ""
		}
		return what
	})
}

// Until calls check until it returns "", failing with its last answer
// after [Deadline].
func Until(t testing.TB, check func() string) {
	t.Helper()
	deadline := time.Now().Add(Deadline)
	for {
		why := check()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", Deadline, why)
		}
		time.Sleep(5 * time.Millisecond) // poll interval of a condition with a deadline
	}
}
