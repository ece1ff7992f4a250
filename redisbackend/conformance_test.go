package redisbackend_test

import (
	"testing"

	"github.com/redislocker/lock/internal/testenv/harness"
	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// TestConformance runs the shared suite against a real redis-server: the
// one REDIS_ADDR names, or one this test binary starts. Every harness gets
// its own key prefix, every backend its own client (a separate "process").
func TestConformance(t *testing.T) {
	t.Parallel() // beside the other runs of the suite: each property has keys of its own
	harness.RunGoRedis(t, harness.SharedServer, nil)
}

// TestConformanceSecure runs the suite over TLS, logged in as an ACL user
// that may touch only the keys and channels of the test prefixes and run
// only the commands of harness.ACLRules: no FUNCTION, no SCRIPT, no
// admin command (harness.SecureServer).
func TestConformanceSecure(t *testing.T) {
	t.Parallel() // beside the other runs of the suite: each property has keys of its own
	harness.CheckACLLog(t)
	harness.RunGoRedis(t, harness.SecureServer, nil)
}

// TestConformanceMiniredis runs the suite against miniredis, an in-process
// imitation of Redis, as the quick start does when no Redis is at hand.
//
// What miniredis cannot do, and what the harness does about it:
//   - It does not expire keys in real time: a TTL only runs down when the
//     test calls FastForward. Left like that, three properties fail:
//     conservative-validity (a 150 ms lease never ends, so nobody else is
//     ever granted the id), no-lost-wakeup case (b) (a lease that expires
//     without a release never frees the lock) and no-state-left (the lock
//     key of an expired lease stays). The harness therefore moves miniredis's
//     clock with the wall clock (redisserver.Miniredis: FastForward when a
//     command's bytes arrive, and every 2 ms). A TTL then ends no earlier
//     than its length after the command that set it arrived, and at most
//     one tick late when nobody asks: on the safe side of every property,
//     and all properties run. Exact expiry timing (S2's bound) is only proven by
//     TestConformance on a real server.
//   - TIME follows the wall clock, so waiter deadlines (L3) need nothing.
//   - Its Lua is gopher-lua, not Redis's Lua 5.1; the scripts run on both.
//   - It cannot kill connections (CLIENT KILL): the harness closes the
//     backend's pub/sub connection on the client's side instead
//     (internal/testenv/harness), as for a real server.
func TestConformanceMiniredis(t *testing.T) {
	t.Parallel() // beside the other runs of the suite: each property has keys of its own
	harness.RunGoRedis(t, func(t *testing.T) harness.Target {
		srv, err := redisserver.StartMiniredis()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
		return harness.Server(srv.Addr())
	}, nil)
}
