package scripts

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// The package's tests share one server (redisserver.SharedAddr); benchmarks and tests
// that count the server's work start their own. This file holds how a test
// reaches a server, names its keys, runs scripts and reads INFO.

func TestMain(m *testing.M) { os.Exit(redisserver.Main(m)) }

// client returns a client of the shared test server.
func client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: redisserver.SharedAddr(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

// ownClient starts a server for tb alone and returns a client of it.
func ownClient(tb testing.TB) *redis.Client {
	srv := redisserver.StartT(tb, redisserver.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	tb.Cleanup(func() { c.Close() })
	return c
}

// testKeys returns the test's keyspace on the shared server (suffix tells
// two of one test apart). Its keys are deleted when the test ends.
func testKeys(t testing.TB, c *redis.Client, suffix string) keys.Keyspace {
	t.Helper()
	ks, err := keys.New(redisserver.Prefix(t) + suffix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanup(t, c, ks) })
	return ks
}

// cleanup deletes every key of the keyspaces.
func cleanup(t testing.TB, c *redis.Client, kss ...keys.Keyspace) {
	ctx := context.Background()
	for _, ks := range kss {
		iter := c.Scan(ctx, 0, ks.PrefixPattern(), 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	}
}

// testInbox returns the inbox address the tests' requesters on ks give:
// the classic pub/sub inbox channel of a process named "t" (keys.Inbox),
// which a test subscribes to when it looks at wake-ups.
func testInbox(ks keys.Keyspace) string {
	return InboxAddress(InboxClassic, ks.Inbox("t", -1))
}

// opsScripts runs the test's scripts on the keys of one id.
type opsScripts struct {
	t     *testing.T
	c     *redis.Client
	id    string
	ks    keys.Keyspace
	k     keys.ID
	inbox string // the requesters' inbox channel (testInbox)
}

// newOps returns the scripts' runner for id, on the test's keys of the
// shared server.
func newOps(t *testing.T, id string) *opsScripts {
	c := client(t)
	ks := testKeys(t, c, "")
	return &opsScripts{t: t, c: c, id: id, ks: ks, k: ks.For(id), inbox: ks.Inbox("t", -1)}
}

// kill makes token's waiter record say that its deadline has passed (as
// if its process stopped heartbeating long ago); nothing purges it.
func (o *opsScripts) kill(token string) {
	o.t.Helper()
	ctx := context.Background()
	w, ok := keys.ParseWaiter(o.c.HGet(ctx, o.k.Waiters, token).Val())
	if !ok {
		o.t.Fatalf("kill(%s): no waiter record", token)
	}
	w.Deadline = 1
	if err := o.c.HSet(ctx, o.k.Waiters, token, w.String()).Err(); err != nil {
		o.t.Fatal(err)
	}
}

// deadline returns token's deadline in its waiter record, or 0 when it
// has none.
func (o *opsScripts) deadline(token string) int64 {
	w, _ := keys.ParseWaiter(o.c.HGet(context.Background(), o.k.Waiters, token).Val())
	return w.Deadline
}

// releaseCall returns the KEYS and ARGV of release of token on id, as the
// engine builds them: the release records of the id's slot for the
// current period of the local clock and the one before, and the release's
// mark.
func releaseCall(cs Consts, ks keys.Keyspace, id, token string) (k, a []string) {
	p := keys.Period(time.Now())
	kid := ks.For(id)
	return cs.Release(kid, token, keys.ReleaseMark(id, token), ks.Released(kid.Slot, p), ks.Released(kid.Slot, p-1))
}

// releaseCall returns the KEYS and ARGV of release of token on the
// test's id (see releaseCall).
func (o *opsScripts) releaseCall(cs Consts, token string) (k, a []string) {
	return releaseCall(cs, o.ks, o.id, token)
}

// lockOwner splits v, a lock key's value, "<fence>:<token>"; ok is false
// for a value of another shape ("" is no key).
func lockOwner(v string) (token string, fence uint64, ok bool) {
	f, tok, found := strings.Cut(v, ":")
	n, err := strconv.ParseUint(f, 10, 64)
	if !found || err != nil {
		return "", 0, false
	}
	return tok, n, true
}

// holder returns the owner token and fence of the test's id's lock, or
// "" and 0 when it is free. It fails the test on a value of another shape.
func (o *opsScripts) holder() (token string, fence uint64) {
	o.t.Helper()
	v, err := o.c.Get(context.Background(), o.k.Lock).Result()
	if err == redis.Nil {
		return "", 0
	}
	if err != nil {
		o.t.Fatal(err)
	}
	token, fence, ok := lockOwner(v)
	if !ok {
		o.t.Fatalf("lock value %q, want \"<fence>:<token>\"", v)
	}
	return token, fence
}

// acquireCall returns the KEYS and ARGV of acquire for req, with the
// test's inbox.
func (o *opsScripts) acquireCall(cs Consts, req backend.AcquireRequest) (k, a []string) {
	return cs.Acquire(o.k, req, InboxAddress(InboxClassic, o.inbox))
}

// eval runs s with EVAL (FCALL with viaFCall).
func (o *opsScripts) eval(s Script, k, a []string) *redis.Cmd {
	if viaFCall {
		return fcall(context.Background(), o.c, s, k, a)
	}
	return o.c.Eval(context.Background(), s.Source, k, anys(a)...)
}

// viaFCall makes the tests' helpers (evalsha, run, opsScripts.eval) run
// the scripts as functions of Lib (see TestFunctionsRunTheScenarios).
var viaFCall bool

// fcall runs s as its function of Lib, loading Lib first when the server
// lacks it.
func fcall(ctx context.Context, c *redis.Client, s Script, k, a []string) *redis.Cmd {
	cmd := c.FCall(ctx, s.Function, k, anys(a)...)
	if cmd.Err() != nil && strings.HasPrefix(cmd.Err().Error(), "ERR Function not found") {
		if err := c.FunctionLoad(ctx, Lib.Source).Err(); err != nil && !strings.Contains(err.Error(), "already exists") {
			cmd.SetErr(err)
			return cmd
		}
		cmd = c.FCall(ctx, s.Function, k, anys(a)...)
	}
	return cmd
}

// evalsha runs s by its SHA1, loading it first when the server lacks it
// (or as its function of Lib, with viaFCall).
func evalsha(ctx context.Context, c *redis.Client, s Script, k, a []string) *redis.Cmd {
	if viaFCall {
		return fcall(ctx, c, s, k, a)
	}
	cmd := c.EvalSha(ctx, s.SHA1, k, anys(a)...)
	if cmd.Err() != nil && strings.HasPrefix(cmd.Err().Error(), "NOSCRIPT") {
		cmd = c.Eval(ctx, s.Source, k, anys(a)...)
	}
	return cmd
}

// run runs s and fails the test on an error.
func run(t testing.TB, c *redis.Client, s Script, k, a []string) *redis.Cmd {
	t.Helper()
	cmd := evalsha(context.Background(), c, s, k, a)
	if err := cmd.Err(); err != nil {
		t.Fatalf("%s: %v", s.Name, err)
	}
	return cmd
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// info returns the fields of the INFO sections, by name.
func info(tb testing.TB, c *redis.Client, sections ...string) map[string]string {
	tb.Helper()
	s, err := c.Info(context.Background(), sections...).Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := make(map[string]string)
	for _, line := range strings.Split(s, "\n") {
		if name, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[name] = v
		}
	}
	return out
}

// cmdstat returns field (calls, usec) of a commandstats value
// ("calls=3,usec=10,...").
func cmdstat(v, field string) int64 {
	for _, f := range strings.Split(v, ",") {
		if s, ok := strings.CutPrefix(f, field+"="); ok {
			n, _ := strconv.ParseInt(s, 10, 64)
			return n
		}
	}
	return 0
}

// scriptUsec returns the server's total µs in EVALSHA, EVAL and FCALL and
// the number of those calls (INFO commandstats).
func scriptUsec(tb testing.TB, c *redis.Client) (usec, calls int64) {
	tb.Helper()
	stats := info(tb, c, "commandstats")
	for _, name := range []string{"cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall"} {
		usec += cmdstat(stats[name], "usec")
		calls += cmdstat(stats[name], "calls")
	}
	return usec, calls
}

// serverStats reads the server's totals: commands called (every command
// in INFO commandstats but INFO itself, so a script's inner commands
// count) and CPU time (used_cpu_user + used_cpu_sys) in µs.
func serverStats(tb testing.TB, c *redis.Client) (calls int64, cpuUsec float64) {
	tb.Helper()
	for name, v := range info(tb, c, "commandstats", "cpu") {
		switch {
		case strings.HasPrefix(name, "cmdstat_") && name != "cmdstat_info":
			calls += cmdstat(v, "calls")
		case name == "used_cpu_user" || name == "used_cpu_sys":
			s, _ := strconv.ParseFloat(v, 64)
			cpuUsec += s * 1e6
		}
	}
	return calls, cpuUsec
}

// usedMemory returns the server's used_memory (INFO memory).
func usedMemory(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	n, err := strconv.ParseInt(info(t, c, "memory")["used_memory"], 10, 64)
	if err != nil {
		t.Fatal("INFO memory: used_memory: ", err)
	}
	return n
}
