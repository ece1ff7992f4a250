package rueidisbackend

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidishook"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// TestMain runs the tests against the shared redis-server and then checks
// that no goroutine outlived them (every Backend and client is closed by
// its test's cleanup). Its four conformance runs go at once
// (redisserver.Parallel).
func TestMain(m *testing.M) {
	redisserver.Parallel(4)
	os.Exit(redisserver.NoLeaks(redisserver.Main(m)))
}

var ctx = context.Background()

// env is one test's view of a Redis server: a raw client for inspection
// and a key prefix of its own.
type env struct {
	t      *testing.T
	addr   string
	raw    rueidis.Client
	prefix string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvAt(t, redisserver.SharedAddr(t))
}

func newEnvAt(t *testing.T, addr string) *env {
	t.Helper()
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	return &env{t: t, addr: addr, raw: raw, prefix: redisserver.Prefix(t)}
}

// clientOption is the ClientOption of the tests' clients.
func (e *env) clientOption() rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: []string{e.addr}, ForceSingleClient: true}
}

// counter is a rueidishook.Hook that logs the commands a client sends,
// one round trip per Do and per DoMulti, named by adaptertest.Name (a
// script call by its script: "acquire", "heartbeat", ...). Connection setup and
// rueidis's own PINGs do not go through hooks. The commands of a dedicated
// client (the pub/sub connection) are recorded too.
//
// SUBSCRIBE and UNSUBSCRIBE (PubSub mode's own connection, which the
// supervisor drives on its own schedule) are kept apart, in subs: the step
// counts leave them out, as redisbackend's counts leave out its pub/sub
// connection.
type counter struct {
	adaptertest.Log
	mu   sync.Mutex
	subs []string
}

var _ rueidishook.Hook = (*counter)(nil)

func (c *counter) note(cmds ...rueidis.Completed) {
	var trip []string
	for _, cmd := range cmds {
		args := cmd.Commands()
		arg := ""
		if len(args) > 1 {
			arg = args[1]
		}
		switch n := adaptertest.Name(args[0], arg); n {
		case "subscribe", "unsubscribe":
			c.mu.Lock()
			c.subs = append(c.subs, n)
			c.mu.Unlock()
		default:
			trip = append(trip, n)
		}
	}
	c.Note(trip...)
}

func (c *counter) Do(client rueidis.Client, ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.note(cmd)
	return client.Do(ctx, cmd)
}

func (c *counter) DoMulti(client rueidis.Client, ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.note(multi...)
	return client.DoMulti(ctx, multi...)
}

func (c *counter) DoCache(client rueidis.Client, ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.note(rueidis.Completed(cmd))
	return client.DoCache(ctx, cmd, ttl)
}

func (c *counter) DoMultiCache(client rueidis.Client, ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	cmds := make([]rueidis.Completed, len(multi))
	for i, m := range multi {
		cmds[i] = rueidis.Completed(m.Cmd)
	}
	c.note(cmds...)
	return client.DoMultiCache(ctx, multi...)
}

func (c *counter) Receive(client rueidis.Client, ctx context.Context, subscribe rueidis.Completed, fn func(msg rueidis.PubSubMessage)) error {
	c.note(subscribe)
	return client.Receive(ctx, subscribe, fn)
}

func (c *counter) DoStream(client rueidis.Client, ctx context.Context, cmd rueidis.Completed) rueidis.RedisResultStream {
	c.note(cmd)
	return client.DoStream(ctx, cmd)
}

func (c *counter) DoMultiStream(client rueidis.Client, ctx context.Context, multi ...rueidis.Completed) rueidis.MultiRedisResultStream {
	c.note(multi...)
	return client.DoMultiStream(ctx, multi...)
}

// takeSubs returns the SUBSCRIBE and UNSUBSCRIBE commands since the last
// call.
func (c *counter) takeSubs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.subs
	c.subs = nil
	return s
}

// modes are the two ways a Backend is made in the tests: New with
// tracking, and New with ClientOption.DisableCache (pub/sub).
var modes = []Mode{Tracking, PubSub}

// backend returns a new Backend of the given mode, with a client of its
// own (a separate "process") on the env's prefix, and the counter of its
// client's commands.
func (e *env) backend(mode Mode, opts *Options) (*adapter, *counter) {
	e.t.Helper()
	cnt := &counter{}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = e.prefix
	}
	if o.ClientOption.InitAddress == nil {
		co := e.clientOption()
		co.DisableCache = o.ClientOption.DisableCache
		co.ClientName = o.ClientOption.ClientName
		o.ClientOption = co
	}
	if mode == PubSub {
		o.ClientOption.DisableCache = true
	}
	o.ClientBuilder = func(co rueidis.ClientOption) (rueidis.Client, error) {
		c, err := rueidis.NewClient(co)
		if err != nil {
			return nil, err
		}
		return rueidishook.WithHook(c, cnt), nil
	}
	b, err := concrete(New(&o))
	if err != nil {
		e.t.Fatal(err)
	}
	if b.mode != mode {
		e.t.Fatalf("Mode() = %v, want %v", b.mode, mode)
	}
	e.t.Cleanup(func() { _ = b.Close() })
	return b, cnt
}

// req, wt and mustAcquire are the shared tests' helpers.
var (
	req         = adaptertest.Req
	wt          = adaptertest.Wt
	mustAcquire = adaptertest.MustAcquire
)

// adapter is the env, with backends of the given mode, as the shared tests
// of internal/testenv/adaptertest see it.
func (e *env) adapter(mode Mode) adaptertest.Adapter {
	ks, err := keys.New(e.prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	ks = ks.OneServer() // one server: as the adapter's engine names the keys
	counters := map[*adaptertest.Log]*counter{}
	return adaptertest.Adapter{
		Backend: func(*testing.T) (backend.Backend, *adaptertest.Log) {
			b, c := e.backend(mode, nil)
			counters[&c.Log] = c
			return b, &c.Log
		},
		Replicated: func(_ *testing.T, n int, d time.Duration) backend.Backend {
			b, _ := e.backend(mode, &Options{WaitReplicas: n, WaitTimeout: d})
			return b
		},
		Keys: ks,
		Int: func(t *testing.T, args ...string) int64 {
			t.Helper()
			n, err := e.raw.Do(ctx, e.raw.B().Arbitrary(args...).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			return n
		},
		Tracking:   mode == Tracking,
		Subscribes: func(l *adaptertest.Log) []string { return counters[l].takeSubs() },
	}
}

// do runs one raw command and fails the test on error.
func (e *env) do(args ...string) rueidis.RedisResult {
	e.t.Helper()
	r := e.raw.Do(ctx, e.raw.B().Arbitrary(args...).Build())
	if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
		e.t.Fatalf("%v: %v", args, err)
	}
	return r
}
