package harness

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/conformance"
	"github.com/redislocker/lock/internal/testenv/redisserver"
	"github.com/redislocker/lock/redisbackend"
	"github.com/redislocker/lock/rueidisbackend"
)

// SharedServer is the test binary's shared server ([redisserver.SharedAddr]).
func SharedServer(t *testing.T) Target { return Server(redisserver.SharedAddr(t)) }

// RunGoRedis runs the conformance suite with GoRedis harnesses (opts) on
// the deployment target returns for each property. Runs may go at once
// (see isolate).
func RunGoRedis(t *testing.T, target func(*testing.T) Target, opts *redisbackend.Options) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		isolate(t)
		return GoRedis(t, target(t), opts)
	})
}

// RunRueidis runs the conformance suite with Rueidis harnesses (mode,
// opts) on the deployment target returns for each property. Runs may go
// at once (see isolate).
func RunRueidis(t *testing.T, target func(*testing.T) Target, mode rueidisbackend.Mode, opts *rueidisbackend.Options) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		isolate(t)
		return Rueidis(t, target(t), mode, opts)
	})
}

// processWide is held, shared, by every property of the runs of
// RunGoRedis and RunRueidis, and alone by the ones that look at the whole
// process (processWideProperties), so that runs of the suite can go at
// once in one test binary.
var processWide sync.RWMutex

// processWideProperties are the properties whose check covers every
// goroutine of the process: no-goroutine-leak counts the lock package's
// goroutines, another run's included.
var processWideProperties = []string{"no-goroutine-leak"}

// isolate takes processWide for the property t runs, until t's cleanup:
// alone for a property of processWideProperties, shared for any other. A
// run holds it for one property at a time, so runs never deadlock.
func isolate(t *testing.T) {
	name := t.Name()
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	if slices.Contains(processWideProperties, name) {
		processWide.Lock()
		t.Cleanup(processWide.Unlock)
		return
	}
	processWide.RLock()
	t.Cleanup(processWide.RUnlock)
}

// GoRedis returns a harness of redisbackend Backends on tg, each on a
// go-redis client of its own, made with opts (nil: the defaults). The
// harness sets the limits, and the prefix when opts has none.
func GoRedis(t *testing.T, tg Target, opts *redisbackend.Options) *Redis {
	o := orZero(opts)
	o.Prefix = prefixOr(t, o.Prefix)
	o.MaxWaiters, o.PurgeLimit = MaxWaiters, PurgeLimit
	return newRedis(t, tg, o.Prefix, func(t *testing.T, conns *notifyConns) backend.Backend {
		o := o
		return GoRedisBackend(t, tg.client(conns), &o)
	})
}

// Rueidis returns a harness of rueidisbackend Backends of the given mode
// on tg, made with opts (nil: the defaults): New in Tracking mode,
// NewWithClient on a client built with DisableCache in PubSub mode. The
// harness sets the limits and the client, and the prefix when opts has
// none.
func Rueidis(t *testing.T, tg Target, mode rueidisbackend.Mode, opts *rueidisbackend.Options) *Redis {
	o := orZero(opts)
	o.Prefix = prefixOr(t, o.Prefix)
	o.MaxWaiters, o.PurgeLimit = MaxWaiters, PurgeLimit
	tracking := mode == rueidisbackend.Tracking
	return newRedis(t, tg, o.Prefix, func(t *testing.T, conns *notifyConns) backend.Backend {
		co := SmallRueidis(tg.rueidisOption(conns))
		o := o
		var b backend.Backend
		if tracking {
			o.ClientOption = co
			b = RueidisBackend(t, &o)
		} else {
			co.DisableCache = true
			client, err := rueidis.NewClient(co)
			if err != nil {
				t.Fatal(err)
			}
			// Registered before the Backend's cleanup, so it runs after it.
			t.Cleanup(client.Close)
			if b, err = rueidisbackend.NewWithClient(client, &o); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
		}
		if got := rueidisbackend.ModeOf(b); got != mode {
			t.Fatalf("ModeOf = %v, want %v", got, mode)
		}
		return b
	})
}

// SmallRueidis returns co with the per-connection buffers of a test
// client: a ring of 16 commands in flight and 16 KiB read and write
// buffers instead of rueidis's 1024 and 0.5 MiB each. A harness's backends
// have a client each, a few connections per node, and never many commands
// in flight; allocating (and, under the race detector, shadowing) the
// default rings and buffers for every connection was most of the CPU time
// of the cluster suites.
func SmallRueidis(co rueidis.ClientOption) rueidis.ClientOption {
	co.RingScaleEachConn = 4
	co.ReadBufferEachConn = 16 << 10
	co.WriteBufferEachConn = 16 << 10
	return co
}

// GoRedisBackend returns redisbackend.New(client, opts), failing the test
// on error. The Backend and then client are closed at the test's end;
// registered before the suite's own cleanups, that runs after them.
func GoRedisBackend(t testing.TB, client redis.UniversalClient, opts *redisbackend.Options) backend.Backend {
	b, err := redisbackend.New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Close()
		client.Close()
	})
	return b
}

// RueidisBackend returns rueidisbackend.New(opts), failing the test on
// error, closed at the test's end.
func RueidisBackend(t testing.TB, opts *rueidisbackend.Options) backend.Backend {
	b, err := rueidisbackend.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// orZero returns *p, or the zero value when p is nil.
func orZero[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}

// prefixOr returns prefix, or a prefix of the test's own when it is "".
func prefixOr(t testing.TB, prefix string) string {
	if prefix == "" {
		return redisserver.Prefix(t)
	}
	return prefix
}
