package rueidisbackend

import (
	"testing"

	"github.com/redislocker/lock/internal/testenv/adaptertest"
)

// An operator's forced release works through the adapter, in each mode
// (see adaptertest.ForceRelease).
func TestForceRelease(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			holder, _ := e.backend(mode, nil)
			waiter, _ := e.backend(mode, nil)
			op, _ := e.backend(mode, nil)
			adaptertest.ForceRelease(t, holder, waiter, op)
		})
	}
}
