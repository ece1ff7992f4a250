package redisbackend

import (
	"testing"

	"github.com/redislocker/lock/internal/testenv/adaptertest"
)

// An operator's forced release works through the adapter (see
// adaptertest.ForceRelease).
func TestForceRelease(t *testing.T) {
	e := newEnv(t)
	holder, _ := e.backend(nil)
	waiter, _ := e.backend(nil)
	op, _ := e.backend(nil)
	adaptertest.ForceRelease(t, holder, waiter, op)
}
