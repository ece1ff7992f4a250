package redisbackend

import (
	"testing"

	"github.com/redislocker/lock/internal/testenv/adaptertest"
)

// TestWire: the wire protocol check (see adaptertest.Wire).
func TestWire(t *testing.T) { adaptertest.Wire(t, newEnv(t).adapter()) }
