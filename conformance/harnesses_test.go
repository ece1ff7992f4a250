package conformance_test

import (
	"github.com/redislocker/lock/conformance"
	"github.com/redislocker/lock/internal/testenv/harness"
)

// full is a harness with every optional capability but ClockAdvancer
// (both stores run on the real clock). The project's own harnesses have
// them all, so that every property runs on every backend: a capability
// lost in a refactoring fails the build here, not as a property skipped in
// silence.
type full interface {
	conformance.Harness
	conformance.Expirer
	conformance.StateChecker
	conformance.Forgetter
	conformance.NotifierDropper
	conformance.SubscribeDelayer
	conformance.Limiter
}

var (
	_ full = (*harness.Memory)(nil)
	_ full = (*harness.Redis)(nil)
)
