package conformance

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/redislocker/lock/internal/testenv/testkit"
)

// TestSpyForwardsEveryCapability checks that the spy the suite wraps
// around every backend has every interface package backend declares: a
// capability it lacked would never run under the suite (as ExtendBatch
// once did not).
func TestSpyForwardsEveryCapability(t *testing.T) {
	testkit.Forwards(t, reflect.TypeFor[*spy](), filepath.Join("..", "backend"))
}
