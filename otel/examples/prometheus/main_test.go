package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestOnce runs the example's contention and checks that the Prometheus
// text output has each of the Locker's metrics.
func TestOnce(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), "", true, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		`lock_acquisitions_total{`,
		`lock_outcome="granted_after_wait"`,
		`lock_acquire_duration_seconds_bucket{`,
		`lock_handoff_duration_seconds_count{`,
		`lock_hold_duration_seconds_count{`,
		`lock_backend_step_duration_seconds_count{`,
		`lock_step="release"`,
		`lock_waiters{`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the output lacks %s", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}
