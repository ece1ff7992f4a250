package rueidisbackend

import (
	"testing"

	"github.com/redislocker/lock/internal/testenv/adaptertest"
)

// TestWire: the wire protocol check (see adaptertest.Wire), in both modes.
func TestWire(t *testing.T) {
	for _, mode := range []Mode{Tracking, PubSub} {
		t.Run(mode.String(), func(t *testing.T) { adaptertest.Wire(t, newEnv(t).adapter(mode)) })
	}
}
