package redisbackend

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// TestMain runs the tests under the machine-wide lock, the three
// conformance runs at once (redisserver.Parallel).
func TestMain(m *testing.M) {
	redisserver.Parallel(3)
	os.Exit(redisserver.Main(m))
}

// env is one test's view of a Redis server: a raw client for inspection and
// a key prefix of its own.
type env struct {
	t      *testing.T
	addr   string
	raw    *redis.Client
	prefix string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvAt(t, redisserver.SharedAddr(t))
}

// newEnvBackend returns a new env on the shared server and one Backend
// on it.
func newEnvBackend(t *testing.T) (*env, *adapter) {
	t.Helper()
	e := newEnv(t)
	b, _ := e.backend(nil)
	return e, b
}

func newEnvAt(t *testing.T, addr string) *env {
	t.Helper()
	raw := newClient(addr)
	t.Cleanup(func() { raw.Close() })
	return &env{t: t, addr: addr, raw: raw, prefix: redisserver.Prefix(t)}
}

func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr})
}

// counter is a go-redis hook that logs the commands a client sends: one
// round trip per command sent alone or per pipeline, a script call named
// after its script (adaptertest.Name). The pub/sub connection does not go
// through hooks. Connection setup (HELLO, CLIENT SETINFO, AUTH, SELECT,
// which go-redis sends through the hooks when it initialises a connection)
// is left out: it is per connection, not per step.
type counter struct{ adaptertest.Log }

func isSetup(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select", "readonly":
		return true
	}
	return false
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.note(cmd)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.note(cmds...)
		return next(ctx, cmds)
	}
}

// note logs one round trip of cmds, setup commands left out.
func (c *counter) note(cmds ...redis.Cmder) {
	var trip []string
	for _, cmd := range cmds {
		if isSetup(cmd) {
			continue
		}
		arg := ""
		if args := cmd.Args(); len(args) > 1 {
			arg = fmt.Sprint(args[1])
		}
		trip = append(trip, adaptertest.Name(cmd.Name(), arg))
	}
	c.Note(trip...)
}

// backend returns a new Backend, with its own client (a separate "process"),
// on the env's prefix, and the counter of its client's commands.
func (e *env) backend(opts *Options) (*adapter, *counter) {
	e.t.Helper()
	client := newClient(e.addr)
	cnt := &counter{}
	client.AddHook(cnt)
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = e.prefix
	}
	b, err := concrete(New(client, &o))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = b.Close()
		client.Close()
	})
	return b, cnt
}

// serverMillis returns the server's clock in milliseconds.
func (e *env) serverMillis() int64 {
	e.t.Helper()
	now, err := e.raw.Time(context.Background()).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return now.UnixMilli()
}

// keysOf returns every key pattern matches, with its PTTL, but the wire
// marker of the env's prefix: protocol metadata, not lock state, which
// must have a TTL of at most keys.WireTTL.
func (e *env) keysOf(pattern string) map[string]time.Duration {
	e.t.Helper()
	ctx := context.Background()
	out := map[string]time.Duration{}
	iter := e.raw.Scan(ctx, 0, pattern, 100).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		d, err := e.raw.PTTL(ctx, k).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		ks, _ := keys.New(e.prefix)
		if maxTTL, ok := ks.SlotKey(k); ok {
			if d != -2 && (d <= 0 || d > maxTTL) {
				e.t.Fatalf("the slot key %s has PTTL %v, want within (0, %v]", k, d, maxTTL)
			}
			continue
		}
		if k == e.prefix+keys.SuffixWire {
			if d != -2 && (d <= 0 || d > keys.WireTTL) {
				e.t.Fatalf("the wire marker %s has PTTL %v, want within (0, %v]", k, d, keys.WireTTL)
			}
			continue
		}
		out[k] = d
	}
	if err := iter.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// req, wt and mustAcquire are the shared tests' helpers.
var (
	req         = adaptertest.Req
	wt          = adaptertest.Wt
	mustAcquire = adaptertest.MustAcquire
)

// adapter is the env as the shared tests of internal/testenv/adaptertest see it.
func (e *env) adapter() adaptertest.Adapter {
	ks, err := keys.New(e.prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	ks = ks.OneServer() // one server: as the adapter's engine names the keys
	return adaptertest.Adapter{
		Backend: func(*testing.T) (backend.Backend, *adaptertest.Log) {
			b, c := e.backend(nil)
			return b, &c.Log
		},
		Replicated: func(_ *testing.T, n int, d time.Duration) backend.Backend {
			b, _ := e.backend(&Options{WaitReplicas: n, WaitTimeout: d})
			return b
		},
		Keys: ks,
		Int: func(t *testing.T, args ...string) int64 {
			t.Helper()
			a := make([]any, len(args))
			for i, x := range args {
				a[i] = x
			}
			n, err := e.raw.Do(context.Background(), a...).Int64()
			if err != nil {
				t.Fatal(err)
			}
			return n
		},
	}
}
