package redisserver

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// Shared server of this test binary, started by the first call to
// SharedAddr.
var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// Shared TLS server of this test binary, started by the first call to
// SharedTLS.
var (
	sharedTLSOnce sync.Once
	sharedTLS     *Server
	sharedTLSErr  error
)

// SharedTLS returns the TLS server ([Options.TLS]) shared by the tests of
// this binary, started on first use with the extra redis-server flags
// args (the first call's: ACL users, say). It is always one this binary
// starts, also when REDIS_ADDR is set, and [Main] stops it as it does
// SharedAddr's. A missing binary skips t, or fails it when CI is set.
func SharedTLS(t testing.TB, args ...string) *Server {
	t.Helper()
	sharedTLSOnce.Do(func() { sharedTLS, sharedTLSErr = Start(Options{TLS: true, Args: args}) })
	if sharedTLSErr != nil {
		Fail(t, sharedTLSErr)
	}
	return sharedTLS
}

// SharedAddr returns the address of the Redis server shared by the tests
// of this binary: REDIS_ADDR when set, otherwise a redis-server started on
// first use (without persistence, on a free loopback port). A package that
// uses it calls [Main] from its TestMain, which stops the server after the
// tests (it is also killed if the test process dies, on Linux). Tests never
// flush a server they did not start: they use their own ids and key
// prefixes (see [Prefix]).
func SharedAddr(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return addr
	}
	sharedOnce.Do(func() { shared, sharedErr = Start(Options{}) })
	if sharedErr != nil {
		Fail(t, sharedErr)
	}
	return shared.Addr
}

// External reports whether the tests use a server they did not start
// (REDIS_ADDR is set). Such a server must not be flushed or reconfigured.
func External() bool { return os.Getenv("REDIS_ADDR") != "" }

// Main takes the machine-wide lock of the test binaries that start
// redis-servers ([HoldExclusive]), runs the tests, stops the shared
// servers (SharedAddr's and SharedTLS's), if it started them, and releases
// the lock. Use it as:
// func TestMain(m *testing.M) { os.Exit(redisserver.Main(m)) }.
//
// After tests that passed, it fails the binary when a key without a TTL
// is left on a shared server it started: every key the library writes
// must expire (H2), also the ones a test left behind.
func Main(m *testing.M) int {
	HoldExclusive()
	code := m.Run()
	for _, s := range []*Server{shared, sharedTLS} {
		if s == nil {
			continue
		}
		if code == 0 {
			if left, err := persistent(s); err != nil || left != "" {
				fmt.Fprintf(os.Stderr, "redisserver: after the tests, keys without a TTL on the shared server %s: %q (err %v)\n", s.Addr, left, err)
				code = 1
			}
		}
		s.Close()
	}
	if held != nil {
		held() // the servers are gone: the next test binary may start its own
	}
	return code
}

// NoLeaks returns code, what a TestMain's run returned, or 1 when the
// tests passed but goroutines outlived them (goleak.Find with opts). Use
// it as os.Exit(redisserver.NoLeaks(redisserver.Main(m))).
func NoLeaks(code int, opts ...goleak.Option) int {
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: goroutines left after the tests:", err)
			return 1
		}
	}
	return code
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
	return persistentReply(Command(addr, "EVAL", persistentScript, "0"))
}

// persistent is Persistent of s (over TLS on a TLS server).
func persistent(s *Server) (string, error) {
	return persistentReply(s.Do("EVAL", persistentScript, "0"))
}

// persistentReply reads the reply of persistentScript.
func persistentReply(line string, err error) (string, error) {
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(line, "+") {
		return "", fmt.Errorf("redisserver: unexpected reply %q", line)
	}
	return line[1:], nil
}
