package memorybackend_test

import (
	"testing"

	"github.com/redislocker/lock/conformance"
	"github.com/redislocker/lock/internal/testenv/harness"
)

// TestConformance runs the shared suite against the in-memory backend: one
// Store per harness, one Backend per "process". It is the conformance
// package doc's snippet.
func TestConformance(t *testing.T) {
	conformance.Run(t, newHarness) // newHarness(t) returns a Harness on a fresh store
}

// newHarness returns a harness on a new Store, with direct hand-off.
func newHarness(*testing.T) conformance.Harness { return harness.NewMemory(false, false) }

// TestConformanceNoHandOff runs the suite with direct hand-off off: the
// core's wake-then-acquire fallback, as a backend without
// backend.HandOffer gets it.
func TestConformanceNoHandOff(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness { return harness.NewMemory(false, true) })
}
