package testkit

import (
	"testing"
	"time"
)

// poll is the interval between two checks of a condition.
const poll = 2 * time.Millisecond

// Eventually polls cond until it holds, and fails t with what when it does
// not within d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	Until(t, d, func() string {
		if cond() {
			return ""
		}
		return what
	})
}

// Until calls check until it returns "", and fails t with its last answer
// when that does not happen within d.
func Until(t testing.TB, d time.Duration, check func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		why := check()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, why)
		}
		time.Sleep(poll) // poll interval of a condition with a deadline
	}
}
