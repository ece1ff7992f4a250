package rueidisbackend

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidishook"
	"go.uber.org/goleak"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redistest"
	"github.com/redislocker/lock/internal/scripts"
)

// TestMain runs the tests against the shared redis-server and then checks
// that no goroutine outlived them (every Backend and client is closed by
// its test's cleanup).
func TestMain(m *testing.M) {
	code := redistest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: goroutines left after the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
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
	return newEnvAt(t, redistest.Addr(t))
}

func newEnvAt(t *testing.T, addr string) *env {
	t.Helper()
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	return &env{t: t, addr: addr, raw: raw, prefix: redistest.Prefix(t)}
}

// clientOption is the ClientOption of the tests' clients.
func (e *env) clientOption() rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: []string{e.addr}, ForceSingleClient: true}
}

// counter is a rueidishook.Hook that records the commands a client
// sends, one round trip per Do and per DoMulti. A script call is one
// command, named after its script ("acquire", "heartbeat", ...); anything
// else is named after the command ("subscribe"). Connection setup and
// rueidis's own PINGs do not go through hooks. The commands of a dedicated
// client (the pub/sub connection) are recorded too.
//
// SUBSCRIBE and UNSUBSCRIBE (PubSub mode's own connection, which the
// supervisor drives on its own schedule) are kept apart, in subs: the step
// counts leave them out, as redisbackend's counts leave out its pub/sub
// connection.
type counter struct {
	mu    sync.Mutex
	trips [][]string
	subs  []string
}

var _ rueidishook.Hook = (*counter)(nil)

var scriptNames = func() map[string]string {
	m := map[string]string{}
	for _, s := range scripts.All() {
		m[s.SHA1] = s.Name
		m[s.Source] = s.Name
	}
	return m
}()

// cmdName names one command: its script for EVALSHA and EVAL.
func cmdName(cmd rueidis.Completed) string {
	args := cmd.Commands()
	name := strings.ToLower(args[0])
	if (name == "evalsha" || name == "eval") && len(args) > 1 {
		if n, ok := scriptNames[args[1]]; ok {
			return n
		}
	}
	return name
}

func (c *counter) note(cmds ...rueidis.Completed) {
	var trip []string
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		switch n := cmdName(cmd); n {
		case "subscribe", "unsubscribe":
			c.subs = append(c.subs, n)
		default:
			trip = append(trip, n)
		}
	}
	if len(trip) > 0 {
		c.trips = append(c.trips, trip)
	}
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

// takeTrips returns the round trips since the last take.
func (c *counter) takeTrips() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.trips
	c.trips = nil
	return t
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

// take returns the commands and round trips since the last take, and the
// commands' names.
func (c *counter) take() (cmds, trips int, names string) {
	t := c.takeTrips()
	var all []string
	for _, trip := range t {
		all = append(all, trip...)
	}
	return len(all), len(t), strings.Join(all, " ")
}

// modes are the two ways a Backend is made in the tests: New with
// tracking, and New with ClientOption.DisableCache (pub/sub).
var modes = []Mode{Tracking, PubSub}

// backend returns a new Backend of the given mode, with a client of its
// own (a separate "process") on the env's prefix, and the counter of its
// client's commands.
func (e *env) backend(mode Mode, opts *Options) (*Backend, *counter) {
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
	b, err := New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	if b.Mode() != mode {
		e.t.Fatalf("Mode() = %v, want %v", b.Mode(), mode)
	}
	e.t.Cleanup(func() { _ = b.Close() })
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

// none fails if a wake-up arrives within d: d is a measuring window, not
// a wait for something to happen.
func (w *wakes) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case x := <-w.ch:
		t.Fatalf("unexpected wake-up %+v", x)
	case <-time.After(d):
	}
}

// drain returns the wake-ups delivered so far.
func (w *wakes) drain() []backend.Wake {
	var out []backend.Wake
	for {
		select {
		case x := <-w.ch:
			out = append(out, x)
		default:
			return out
		}
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

func req(id, token string, wait bool) backend.AcquireRequest {
	return backend.AcquireRequest{ID: id, Token: token, TTL: 10 * time.Second, Wait: wait, WaiterTTL: 10 * time.Second}
}

func wt(id, token string) backend.Waiter { return backend.Waiter{ID: id, Token: token} }

func mustAcquire(t *testing.T, b backend.Backend, r backend.AcquireRequest) backend.Grant {
	t.Helper()
	g, err := b.Acquire(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	return g
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
