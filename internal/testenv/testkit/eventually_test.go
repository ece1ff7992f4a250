package testkit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// failT records a Fatalf instead of ending the test.
type failT struct {
	testing.TB
	msg string
}

func (f *failT) Helper() {}
func (f *failT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

// run calls fn with a failT and returns its Fatalf message, or "".
func run(t *testing.T, fn func(tb testing.TB)) (msg string) {
	f := &failT{TB: t}
	defer func() {
		if r := recover(); r != nil && r != f {
			panic(r)
		}
		msg = f.msg
	}()
	fn(f)
	return ""
}

// Eventually returns once cond holds, and fails with what when cond never
// holds within the deadline.
func TestEventually(t *testing.T) {
	n := 0
	if msg := run(t, func(tb testing.TB) { Eventually(tb, time.Minute, "n", func() bool { n++; return n == 3 }) }); msg != "" || n != 3 {
		t.Fatalf("Eventually of a condition true on the 3rd check: failed %q after %d checks", msg, n)
	}
	if msg := run(t, func(tb testing.TB) { Eventually(tb, 0, "never", func() bool { return false }) }); !strings.HasPrefix(msg, "not within") || !strings.HasSuffix(msg, ": never") {
		t.Fatalf("Eventually of a false condition: Fatalf(%q), want a failure", msg)
	}
}

// WaitFor returns nil once check does, its last error after the deadline,
// and ctx's error (wrapped) when ctx ends first.
func TestWaitFor(t *testing.T) {
	n := 0
	if err := WaitFor(context.Background(), time.Minute, time.Millisecond, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("WaitFor of a check passing on the 3rd call: %v after %d calls", err, n)
	}
	errLast := errors.New("last")
	if err := WaitFor(context.Background(), 0, time.Millisecond, func() error { return errLast }); !errors.Is(err, errLast) || !strings.HasPrefix(err.Error(), "not within") {
		t.Fatalf("WaitFor past its deadline = %v, want \"not within\" wrapping the last error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WaitFor(ctx, time.Minute, time.Millisecond, func() error { return errLast }); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitFor with an ended ctx = %v, want context.Canceled", err)
	}
}
