package rueidisbackend

import (
	"testing"

	"github.com/redislocker/lock/internal/testenv/adaptertest"
)

// The client's errors are classified: a dial failure is unsent (rueidis
// writes only on a connection it has), anything else may have been sent.
func TestKind(t *testing.T) {
	adaptertest.Kinds(t, commands{}.Classify, nil)
}
