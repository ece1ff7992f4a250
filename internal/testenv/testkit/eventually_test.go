package testkit

import (
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
