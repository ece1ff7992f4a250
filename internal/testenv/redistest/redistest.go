// Package redistest gives tests a Redis server: the one REDIS_ADDR names,
// or a redis-server it starts itself (internal/testenv/redisserver) on a free
// loopback port, without persistence.
//
// When no redis-server binary can be found (PATH, or the REDIS_SERVER
// variable naming the binary), tests are skipped with the reason, except when
// the CI variable is set: then they fail, so that CI never passes by skipping.
//
// Tests never flush a server they did not start: they use their own ids and
// key prefixes (see [Prefix]).
package redistest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// Shared server of this test binary, started by the first call to Addr.
var (
	sharedOnce sync.Once
	shared     *redisserver.Server
	sharedErr  error
)

// Addr returns the address of the Redis server shared by the tests of this
// binary: REDIS_ADDR when set, otherwise a redis-server started on first
// use. A package that uses it calls [Main] from its TestMain, which stops
// the server after the tests (it is also killed if the test process dies,
// on Linux).
func Addr(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return addr
	}
	sharedOnce.Do(func() { shared, sharedErr = redisserver.Start(redisserver.Options{}) })
	if sharedErr != nil {
		Fail(t, sharedErr)
	}
	return shared.Addr
}

// External reports whether the tests use a server they did not start
// (REDIS_ADDR is set). Such a server must not be flushed or reconfigured.
func External() bool { return os.Getenv("REDIS_ADDR") != "" }

// Main takes the machine-wide lock of the test binaries that start
// redis-servers ([redisserver.Exclusive]), runs the tests and then stops
// the shared server, if one was started. Use it as:
// func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }.
//
// After tests that passed, it fails the binary when a key without a TTL
// is left on the shared server it started: every key the library writes
// must expire (H2), also the ones a test left behind.
func Main(m *testing.M) int {
	Exclusive()
	code := m.Run()
	if shared != nil {
		if code == 0 {
			if left, err := Persistent(shared.Addr); err != nil || left != "" {
				fmt.Fprintf(os.Stderr, "redistest: after the tests, keys without a TTL on the shared server: %q (err %v)\n", left, err)
				code = 1
			}
		}
		shared.Close()
	}
	return code
}

// NoLeaks returns code, what a TestMain's run returned, or 1 when the
// tests passed but goroutines outlived them (goleak.Find with opts). Use
// it as os.Exit(redistest.NoLeaks(redistest.Main(m))).
func NoLeaks(code int, opts ...goleak.Option) int {
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: goroutines left after the tests:", err)
			return 1
		}
	}
	return code
}

// CommandStat returns field ("calls", "usec", ...) of command cmd in info,
// the text of INFO commandstats: 0 when the server has not run cmd. A
// value that is no number fails tb.
func CommandStat(tb testing.TB, info, cmd, field string) int64 {
	tb.Helper()
	for _, line := range strings.Split(info, "\n") {
		stats, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(f, field+"="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					tb.Fatalf("commandstats %q: %v", line, err)
				}
				return n
			}
		}
	}
	return 0
}

// persistentScript lists (up to 10 of) the keys that have no TTL, as one
// status line: "<count> <key> <key> ...", or "" when there are none.
const persistentScript = `local out, n, cur = {}, 0, '0'
repeat
  local r = redis.call('SCAN', cur, 'COUNT', 1000)
  cur = r[1]
  for _, k in ipairs(r[2]) do
    if redis.call('PTTL', k) == -1 then
      n = n + 1
      if #out < 10 then out[#out + 1] = k end
    end
  end
until cur == '0'
if n == 0 then return redis.status_reply('') end
return redis.status_reply(n .. ' ' .. table.concat(out, ' '))`

// Persistent reports the keys without a TTL on the server at addr: their
// count and up to ten of them, or "" when every key expires.
func Persistent(addr string) (string, error) {
	line, err := redisserver.Command(addr, "EVAL", persistentScript, "0")
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(line, "+") {
		return "", fmt.Errorf("redistest: unexpected reply %q", line)
	}
	return line[1:], nil
}

// Exclusive takes the machine-wide lock for the rest of the process's life
// (the kernel releases it at exit). A TestMain that does not use Main calls
// it first.
func Exclusive() {
	if _, err := redisserver.Exclusive(); err != nil {
		fmt.Fprintln(os.Stderr, "redistest: running without the machine-wide lock:", err)
	}
}

// Prefix returns a key prefix unique to this call, so that tests on a shared
// server never see each other's keys.
func Prefix(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := strings.NewReplacer("{", "(", "}", ")", " ", "_").Replace(t.Name())
	return "test:" + name + ":" + hex.EncodeToString(b[:]) + ":"
}

// Server is a private redis-server of one test.
type Server struct {
	*redisserver.Server
}

// Stop kills the server and waits for it to exit. It is idempotent.
func (s Server) Stop() { s.Close() }

// Start starts a private redis-server for t and stops it at t's cleanup.
// Use it for tests that must own the server (e.g. to flush its scripts or
// restart it); everything else should share Addr.
func Start(t testing.TB) Server {
	t.Helper()
	return Server{Launch(t, redisserver.Options{})}
}

// Launch starts a private redis-server of options o for t (Dir defaults to
// t.TempDir()) and closes it at t's cleanup: a test that kills, restarts or
// pauses its server uses the returned one's methods.
func Launch(t testing.TB, o redisserver.Options) *redisserver.Server {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	s, err := redisserver.Start(o)
	if err != nil {
		Fail(t, err)
	}
	t.Cleanup(s.Close)
	return s
}

// Fail ends t for err, an error of starting servers: with [Unavailable]
// when a binary is missing ([redisserver.ErrNoBinary]), else with Fatal.
func Fail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, redisserver.ErrNoBinary) {
		Unavailable(t, err)
	}
	t.Fatal(err)
}

// Unavailable skips t for want of a server, or fails it when the CI
// variable is set, with err as the reason.
func Unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("no Redis server (CI is set, so this fails instead of skipping): %v", err)
	}
	t.Skipf("no Redis server, skipping (set REDIS_ADDR, or install redis-server or set REDIS_SERVER): %v", err)
}
