package redisharness

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/notifyconn"
	"github.com/redislocker/lock/internal/redistest"
	"github.com/redislocker/lock/redisbackend"
	"github.com/redislocker/lock/rueidisbackend"
)

// GoRedis returns a harness of redisbackend Backends on tg, each on a
// go-redis client of its own, made with opts (nil: the defaults). The
// harness sets the limits, and the prefix when opts has none.
func GoRedis(t *testing.T, tg Target, opts *redisbackend.Options) *Harness {
	var o redisbackend.Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = redistest.Prefix(t)
	}
	o.MaxWaiters, o.PurgeLimit = MaxWaiters, PurgeLimit
	return newHarness(t, tg, o.Prefix, false, func(t *testing.T, conns *notifyconn.Conns) backend.Backend {
		client := tg.client(conns.Dial)
		o := o
		b, err := redisbackend.New(client, &o)
		if err != nil {
			t.Fatal(err)
		}
		// Registered before the suite's own cleanups, so it runs after them.
		t.Cleanup(func() {
			_ = b.Close()
			client.Close()
		})
		return b
	})
}

// Rueidis returns a harness of rueidisbackend Backends of the given mode
// on tg, made with opts (nil: the defaults): New in Tracking mode,
// NewWithClient on a client built with DisableCache in PubSub mode. The
// harness sets the limits and the client, and the prefix when opts has
// none.
func Rueidis(t *testing.T, tg Target, mode rueidisbackend.Mode, opts *rueidisbackend.Options) *Harness {
	var o rueidisbackend.Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = redistest.Prefix(t)
	}
	o.MaxWaiters, o.PurgeLimit = MaxWaiters, PurgeLimit
	tracking := mode == rueidisbackend.Tracking
	return newHarness(t, tg, o.Prefix, tracking, func(t *testing.T, conns *notifyconn.Conns) backend.Backend {
		co := rueidis.ClientOption{InitAddress: tg.Addrs, ForceSingleClient: !tg.Cluster, DialCtxFn: conns.DialCtx}
		o := o
		var b *rueidisbackend.Backend
		var err error
		if tracking {
			o.ClientOption = co
			b, err = rueidisbackend.New(o)
		} else {
			co.DisableCache = true
			client, cerr := rueidis.NewClient(co)
			if cerr != nil {
				t.Fatal(cerr)
			}
			// Registered before the Backend's cleanup, so it runs after it.
			t.Cleanup(client.Close)
			b, err = rueidisbackend.NewWithClient(client, &o)
		}
		if err != nil {
			t.Fatal(err)
		}
		if b.Mode() != mode {
			t.Fatalf("Mode() = %v, want %v", b.Mode(), mode)
		}
		// Registered before the suite's own cleanups, so it runs after them.
		t.Cleanup(func() { _ = b.Close() })
		return b
	})
}
