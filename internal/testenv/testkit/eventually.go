package testkit

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Poll is the interval between two checks of a condition by Eventually
// and Until.
const Poll = 2 * time.Millisecond

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
	err := WaitFor(context.Background(), d, Poll, func() error {
		if why := check(); why != "" {
			return fmt.Errorf("%s", why)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v", err)
	}
}

// WaitFor calls check every interval until it returns nil, and returns
// its last error when d passes first ("not within d: ...") or ctx ends
// first (wrapping ctx's error). It is the one polling loop of the tests,
// for code that reports errors rather than failing a test.
func WaitFor(ctx context.Context, d, interval time.Duration, check func() error) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-deadline.C:
			return fmt.Errorf("not within %v: %w", d, err)
		case <-tick.C:
		}
	}
}
