package redisbackend

import (
	"testing"

	"github.com/redislocker/lock/internal/adaptertest"
)

// TestWire: the wire protocol check (see adaptertest.Wire).
func TestWire(t *testing.T) { adaptertest.Wire(t, newEnv(t).adapter()) }
