package cluster

import (
	"context"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// TestMain runs the tests, stops the shared cluster and server, and checks
// that no goroutine outlived them.
func TestMain(m *testing.M) {
	// rueidis's cluster client refreshes its slot map lazily, in a
	// goroutine that sleeps about a second first (singleflight.go); one
	// started just before a client closed still sleeps at the end.
	os.Exit(redisserver.NoLeaks(Main(m), goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).LazyDo.func1")))
}

var ctx = context.Background()

// prefix is redisserver.Prefix: a key prefix unique to the test.
func prefix(t testing.TB) string { return redisserver.Prefix(t) }
