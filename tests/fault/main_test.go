package fault

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/redisserver"
	"github.com/redislocker/lock/redisbackend"
	"github.com/redislocker/lock/rueidisbackend"
)

var soak = flag.Bool("soak", false, "run the long versions of the randomized fault tests (minutes, not seconds)")

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		os.Exit(runChild(role)) // a re-executed test binary playing a lock client
	}
	// These tests start servers and check bounded delays: no other such
	// test binary runs beside them (the lock ends with the process).
	redisserver.HoldExclusive()
	goleak.VerifyTestMain(m)
}

// adapter is one Redis client library's adapter of the lock backend. The
// fault tests run once per entry; adding an adapter is one more entry.
type adapter struct {
	name string
	// newBackend returns a backend with a client of its own (a separate
	// "process") on addr, under prefix, and closes both at t's cleanup.
	newBackend func(t testing.TB, addr, prefix string, o clientOpts) backend.Backend
}

// clientOpts tunes the client an adapter makes.
type clientOpts struct {
	// noRetries turns off the client's own retries, so that a cut
	// connection surfaces as an error of the step.
	noRetries bool
}

var adapters = []adapter{
	{name: "go-redis", newBackend: newGoRedis},
	{name: "rueidis-tracking", newBackend: newRueidis(false)},
	{name: "rueidis-pubsub", newBackend: newRueidis(true)},
}

func adapterNamed(name string) (adapter, bool) {
	for _, a := range adapters {
		if a.name == name {
			return a, true
		}
	}
	return adapter{}, false
}

func newGoRedis(t testing.TB, addr, prefix string, o clientOpts) backend.Backend {
	opts := &redis.Options{
		Addr: addr,
		// Deadlines of the caller's ctx apply to the socket, so a step
		// through a stalled path ends when the lock's own timeouts say.
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
	}
	if o.noRetries {
		opts.MaxRetries = -1
	}
	client := redis.NewClient(opts)
	b, err := redisbackend.New(client, &redisbackend.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Close() // ErrClosed when a Locker closed it first
		_ = client.Close()
	})
	return b
}

// newRueidis returns the rueidis adapter's constructor, in tracking mode
// (client-side caching invalidations wake the waiters) or, with
// disableCache, in pub/sub mode. rueidis never retries a script (it
// writes), so noRetries changes nothing.
func newRueidis(disableCache bool) func(t testing.TB, addr, prefix string, o clientOpts) backend.Backend {
	return func(t testing.TB, addr, prefix string, o clientOpts) backend.Backend {
		b, err := rueidisbackend.New(&rueidisbackend.Options{
			ClientOption: rueidis.ClientOption{
				InitAddress:      []string{addr},
				DisableCache:     disableCache,
				ConnWriteTimeout: 2 * time.Second,
				Dialer:           net.Dialer{Timeout: time.Second},
			},
			Prefix: prefix,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() }) // closes its own client; ErrClosed after a Locker's Close
		return b
	}
}

// forEachAdapter runs f as one subtest per adapter, all at once: each
// starts a redis-server (and proxies, child processes) of its own, and the
// fault tests mostly wait, so that the adapters' runs share nothing but
// the CPU. They run in goroutines of their own rather than as parallel
// subtests, which -test.parallel (the number of CPUs) would hold to two at
// a time.
func forEachAdapter(t *testing.T, f func(t *testing.T, a adapter)) {
	var wg sync.WaitGroup
	for _, a := range adapters {
		wg.Go(func() { t.Run(a.name, func(t *testing.T) { f(t, a) }) })
	}
	wg.Wait()
}

// forEachEnv runs f as a subtest per adapter, each with an env of its own.
func forEachEnv(t *testing.T, f func(t *testing.T, e *env)) {
	forEachAdapter(t, func(t *testing.T, a adapter) { f(t, newEnv(t, a)) })
}

// env is one test's Redis server (owned by the test), key prefix and raw
// inspection client.
type env struct {
	t      *testing.T
	a      adapter
	srv    *redisserver.Server
	prefix string
	ks     keys.Keyspace
	raw    *redis.Client
	logs   *logRecorder
}

func newEnv(t *testing.T, a adapter) *env {
	t.Helper()
	srv := redisserver.StartT(t, redisserver.Options{})
	prefix := "ft:" + strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()) + ":"
	ks, err := keys.New(prefix)
	if err != nil {
		t.Fatal(err)
	}
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = raw.Close() })
	return &env{t: t, a: a, srv: srv, prefix: prefix, ks: ks.OneServer(), raw: raw, logs: &logRecorder{}}
}

// backend returns a new backend (own client) that reaches Redis at addr
// (the server, or a proxy in front of it).
func (e *env) backend(addr string, o clientOpts) backend.Backend {
	e.t.Helper()
	return e.a.newBackend(e.t, addr, e.prefix, o)
}

// locker returns a Locker over b, closed at the test's cleanup (before the
// backend's client), logging into e.logs.
func (e *env) locker(b backend.Backend, o lock.Options) *lock.Locker {
	e.t.Helper()
	o.Logger = slog.New(e.logs)
	l, err := lock.New(b, &o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = l.Close() })
	return l
}

// directLocker returns a Locker over a backend of its own that reaches
// the server with no proxy between.
func (e *env) directLocker(o lock.Options) *lock.Locker {
	e.t.Helper()
	return e.locker(e.backend(e.srv.Addr, clientOpts{}), o)
}

// hold acquires id with a direct Locker of its own (options o) and fails
// the test unless it is granted.
func (e *env) hold(o lock.Options, id string, ttl time.Duration) lock.Result {
	e.t.Helper()
	r, err := e.directLocker(o).Acquire(context.Background(), id, ttl, nil)
	if err != nil || !r.Acquired {
		e.t.Fatal(r, err)
	}
	return r
}

// keysLeft returns every key under the test's prefix, sorted, but for the
// keys of hash slots (fence keys, release records) that expire within
// their documented bound (keys.Keyspace.SlotKey): one with no TTL is
// state left. The
// prefix's wire marker is protocol metadata, not state: left out, if it
// expires within keys.WireTTL.
func (e *env) keysLeft() []string {
	e.t.Helper()
	ctx := context.Background()
	var left []string
	iter := e.raw.Scan(ctx, 0, e.ks.PrefixPattern(), 100).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if k == e.ks.Wire() {
			if pttl := e.raw.PTTL(ctx, k).Val(); pttl == -2 || pttl > 0 && pttl <= keys.WireTTL {
				continue
			}
		}
		if maxTTL, ok := e.ks.SlotKey(k); ok {
			pttl, err := e.raw.PTTL(ctx, k).Result()
			if err != nil {
				e.t.Fatal(err)
			}
			if pttl == -2 || pttl > 0 && pttl <= maxTTL {
				continue // gone since the SCAN, or expiring
			}
			k = fmt.Sprintf("%s (PTTL %v)", k, pttl)
		}
		left = append(left, k)
	}
	if err := iter.Err(); err != nil {
		e.t.Fatal(err)
	}
	sort.Strings(left)
	return left
}

// queued returns the number of queue entries of id.
func (e *env) queued(id string) int64 {
	n, err := e.raw.ZCard(context.Background(), e.ks.For(id).Queue).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// holder returns the token holding id, or "".
func (e *env) holder(id string) string {
	v, err := e.raw.Get(context.Background(), e.ks.For(id).Lock).Result()
	if err == redis.Nil {
		return ""
	}
	if err != nil {
		e.t.Fatal(err)
	}
	if tok, _, ok := keys.ParseLock(v); ok {
		return tok
	}
	return v
}

// loadSlack is what a loaded 2-core machine under the race detector may
// add to any timer, wake-up or round trip. Every bound on a delay below is
// made of what the test sets (TTLs, WaiterTimeouts, heartbeats) plus it.
const loadSlack = time.Second

// recv waits for a value on ch for at most d.
func recv[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("not within %v: %s", d, what)
		var zero T
		return zero
	}
}

// logRecorder is a slog.Handler that keeps the messages of the Lockers.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Level.String() + " " + rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	r.mu.Lock()
	r.msgs = append(r.msgs, b.String())
	r.mu.Unlock()
	return nil
}

// matching returns the messages that contain s.
func (r *logRecorder) matching(s string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.msgs {
		if strings.Contains(m, s) {
			out = append(out, m)
		}
	}
	return out
}

// ---- child processes: the test binary re-executed as one lock client ----

const (
	envRole    = "FAULTTEST_CHILD"
	envAdapter = "FAULTTEST_ADAPTER"
	envAddr    = "FAULTTEST_ADDR"
	envPrefix  = "FAULTTEST_PREFIX"
	envID      = "FAULTTEST_ID"
	envTTL     = "FAULTTEST_TTL"
	envWaiter  = "FAULTTEST_WAITER_TIMEOUT"
)

// child is a running child process and the lines it prints.
type child struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
}

// startChild re-executes the test binary as role, with vars added to its
// environment, and kills it at t's cleanup.
func (e *env) startChild(role string, vars map[string]string) *child {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envRole+"="+role, envAdapter+"="+e.a.name, envAddr+"="+e.srv.Addr, envPrefix+"="+e.prefix)
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	redisserver.SetDeathSignal(cmd)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 100), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		_ = cmd.Wait()
	}()
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill() // SIGKILL ends a stopped process too
		<-c.done
	})
	return c
}

// expect waits for the child's next line that starts with prefix (other
// lines are logged and skipped) and returns its fields after the prefix.
func (c *child) expect(t testing.TB, prefix string, d time.Duration) []string {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("child exited before printing %q", prefix)
			}
			if f := strings.Fields(l); len(f) > 0 && f[0] == prefix {
				return f[1:]
			}
			t.Logf("child: %s", l)
		case <-deadline:
			t.Fatalf("child printed no %q line within %v", prefix, d)
		}
	}
}

func (c *child) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to child: %v", sig, err)
	}
}

// stop SIGSTOPs the child and returns once the kernel shows it stopped:
// from then on it runs no code (no heartbeat, no extend) until cont.
func (c *child) stop(t testing.TB) {
	t.Helper()
	c.signal(t, syscall.SIGSTOP)
	if err := redisserver.WaitStopped(c.cmd.Process.Pid, redisserver.PauseTimeout); err != nil {
		t.Fatal(err)
	}
}

// cont resumes a stopped child.
func (c *child) cont(t testing.TB) {
	t.Helper()
	c.signal(t, syscall.SIGCONT)
}

// must fails t with err, unless it is nil.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// runChild is the body of a child process. It prints one line per event on
// stdout: "<event> <fields...>".
func runChild(role string) int {
	a, ok := adapterNamed(os.Getenv(envAdapter))
	if !ok {
		fmt.Fprintln(os.Stderr, "fault child: unknown adapter", os.Getenv(envAdapter))
		return 2
	}
	ct := &childT{}
	defer ct.cleanup()
	b := a.newBackend(ct, os.Getenv(envAddr), os.Getenv(envPrefix), clientOpts{})
	wt, _ := time.ParseDuration(os.Getenv(envWaiter))
	ttl, _ := time.ParseDuration(os.Getenv(envTTL))
	l, err := lock.New(b, &lock.Options{WaiterTimeout: wt, QueueTimeout: time.Minute,
		Logger: slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
			// Log lines start with "time=", never with an event name.
			Level: slog.LevelWarn,
		}))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault child:", err)
		return 2
	}
	defer l.Close()
	id := os.Getenv(envID)
	ctx := context.Background()
	say := func(f string, args ...any) { fmt.Printf(f+"\n", args...) }
	switch role {
	case "waiter":
		// Queue, and report the outcome; when granted, report the fence,
		// release at once and report that too.
		say("start")
		res, err := l.Acquire(ctx, id, ttl, nil)
		switch {
		case err != nil:
			say("error %v", strings.ReplaceAll(err.Error(), "\n", " "))
			return 0
		case !res.Acquired:
			say("notacquired")
			return 0
		}
		say("granted %d", res.Lease.Fence())
		_ = res.Lease.Release(ctx)
		say("released")
	case "holder":
		// Take the lock, report the fence and ValidUntil, and report when
		// Lost fires and what Extend and Release say then.
		res, err := l.Acquire(ctx, id, ttl, nil)
		if err != nil || !res.Acquired {
			say("error %v %v", res.Acquired, err)
			return 0
		}
		le := res.Lease
		say("granted %d %d", le.Fence(), le.ValidUntil().UnixNano())
		<-le.Lost()
		say("lost %d", time.Now().UnixNano())
		say("extend %s", errKind(le.Extend(ctx, ttl)))
		say("release %s", errKind(le.Release(ctx)))
	default:
		fmt.Fprintln(os.Stderr, "fault child: unknown role", role)
		return 2
	}
	return 0
}

func errKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, lock.ErrNotHeld):
		return "notheld"
	default:
		return "error"
	}
}

// childT is the testing.TB a child process gives the adapters: enough for
// their Fatal and Cleanup.
type childT struct {
	testing.TB
	cleanups []func()
}

func (c *childT) Helper()          {}
func (c *childT) Cleanup(f func()) { c.cleanups = append(c.cleanups, f) }
func (c *childT) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"fault child:"}, args...)...)
	os.Exit(3)
}
func (c *childT) Fatalf(f string, args ...any) { c.Fatal(fmt.Sprintf(f, args...)) }
func (c *childT) cleanup() {
	for i := len(c.cleanups) - 1; i >= 0; i-- {
		c.cleanups[i]()
	}
}
