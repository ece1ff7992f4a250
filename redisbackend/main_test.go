package redisbackend

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

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
	return newEnvAt(t, redistest.Addr(t))
}

func newEnvAt(t *testing.T, addr string) *env {
	t.Helper()
	raw := newClient(addr)
	t.Cleanup(func() { raw.Close() })
	return &env{t: t, addr: addr, raw: raw, prefix: redistest.Prefix(t)}
}

func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr})
}

// counter is a go-redis hook that counts the commands a client sends: one
// per command (a script call is one), and one round trip per command sent
// alone or per pipeline. The pub/sub connection does not go through hooks.
// Connection setup (HELLO, CLIENT SETINFO, AUTH, SELECT, which go-redis
// sends through the hooks when it initialises a connection) is counted
// apart, in setup: it is per connection, not per step.
type counter struct {
	cmds, trips, setup atomic.Int64
	mu                 sync.Mutex
	names              []string
}

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
		if isSetup(cmd) {
			c.setup.Add(1)
			return next(ctx, cmd)
		}
		c.cmds.Add(1)
		c.trips.Add(1)
		c.note(cmd)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, cmd := range cmds {
			if isSetup(cmd) {
				c.setup.Add(1)
				continue
			}
			n++
			c.note(cmd)
		}
		if n > 0 {
			c.cmds.Add(int64(n))
			c.trips.Add(1)
		}
		return next(ctx, cmds)
	}
}

func (c *counter) note(cmd redis.Cmder) {
	c.mu.Lock()
	c.names = append(c.names, cmd.Name())
	c.mu.Unlock()
}

// take returns the commands and round trips since the last call, and the
// commands' names.
func (c *counter) take() (cmds, trips int64, names string) {
	c.mu.Lock()
	names = strings.Join(c.names, " ")
	c.names = nil
	c.mu.Unlock()
	return c.cmds.Swap(0), c.trips.Swap(0), names
}

// backend returns a new Backend, with its own client (a separate "process"),
// on the env's prefix, and the counter of its client's commands.
func (e *env) backend(opts *Options) (*Backend, *counter) {
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
	b, err := New(client, &o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = b.Close()
		client.Close()
	})
	return b, cnt
}

// wakes collects the wake-ups delivered to one subscriber.
type wakes struct {
	ch chan backend.Wake
}

func newWakes() *wakes { return &wakes{ch: make(chan backend.Wake, 1000)} }

func (w *wakes) fn(x backend.Wake) {
	select {
	case w.ch <- x:
	default:
		panic("test wake buffer full")
	}
}

// next returns the next wake-up, failing after a deadline.
func (w *wakes) next(t *testing.T) backend.Wake {
	t.Helper()
	select {
	case x := <-w.ch:
		return x
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up within 5s")
		return backend.Wake{}
	}
}

// until returns the wake-ups delivered before the first one with the
// given token (a marker published by the test), so that a test can state
// that nothing else arrived without sleeping.
func (w *wakes) until(t *testing.T, marker string) []backend.Wake {
	t.Helper()
	var got []backend.Wake
	for {
		x := w.next(t)
		if x.Token == marker {
			return got
		}
		got = append(got, x)
	}
}

// eventually waits for cond, failing with msg after a deadline.
func eventually(t *testing.T, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
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

// keysOf returns every key under the env's prefix, with its PTTL.
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
		out[k] = d
	}
	if err := iter.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func req(id, token string, wait bool) backend.AcquireRequest {
	return backend.AcquireRequest{ID: id, Token: token, TTL: 10 * time.Second, Wait: wait, WaiterTTL: 10 * time.Second}
}
