package harness

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// ACLRules are the rules of an ACL user that can run Backends of both
// Redis adapters, in every mode, under key prefix prefix and nothing
// more: `ACL SETUSER <name> on ><password> <rules>`. README.md and
// docs/deployment.md show them for the default prefix (TestACLRulesDoc).
//
// The keys and channels are the prefix's. The scripts' commands come with
// @read and @write (a script's calls are checked like the user's own
// commands), less @dangerous and @admin, and less FUNCTION (whose LOAD,
// DELETE, FLUSH and RESTORE are in @write); TIME and the publishes are
// the scripts' too. Then the commands the adapters send themselves:
// EVALSHA and EVAL (never SCRIPT or FUNCTION), the subscriptions of the
// pub/sub modes, PUNSUBSCRIBE and DISCARD (rueidis's clean-up of a
// pub/sub connection), CLIENT TRACKING (rueidisbackend's Tracking mode),
// WAIT (Options.WaitReplicas), PING (health checks). HELLO and AUTH need
// no rule. docs/deployment.md says the same for users.
func ACLRules(prefix string) []string {
	return []string{
		"resetkeys", "~" + prefix + "*",
		"resetchannels", "&" + prefix + "*",
		"-@all", "+@read", "+@write", "-@dangerous", "-@admin", "-function",
		"+evalsha", "+eval", "+time", "+publish", "+spublish",
		"+subscribe", "+unsubscribe", "+ssubscribe", "+sunsubscribe", "+punsubscribe", "+discard",
		"+client|tracking", "+wait", "+ping",
	}
}

// The ACL user of SecureServer.
const (
	ACLUser     = "locker"
	ACLPassword = "locker-secret"
)

// SecureServer is the Target of the test binary's shared TLS server
// (redisserver.SharedTLS), on which every client, the harness's own
// included, verifies the server's certificate and logs in as ACLUser,
// whom ACLRules of redisserver.PrefixRoot (the root of every test's
// prefix) restrict.
func SecureServer(t *testing.T) Target {
	args := append([]string{"--user", ACLUser, "on", ">" + ACLPassword}, ACLRules(redisserver.PrefixRoot)...)
	s := redisserver.SharedTLS(t, args...)
	return Target{Addrs: []string{s.Addr}, TLS: s.TLSConfig(), Username: ACLUser, Password: ACLPassword}
}

// CheckACLLog fails t, at its cleanup, when the server of SecureServer
// logged a denial (ACL LOG): a command, key or channel that ACLRules do
// not allow, even one whose error the adapter got on without (as
// rueidisbackend did with INFO, which it asked for the server's version).
// Call it
// from the test that runs the suite on SecureServer, before the suite.
func CheckACLLog(t *testing.T) {
	tg := SecureServer(t)
	t.Cleanup(func() {
		admin := redis.NewClient(&redis.Options{Addr: tg.Addrs[0], TLSConfig: tg.TLS}) // the default user
		defer admin.Close()
		entries, err := admin.ACLLog(context.Background(), 100).Result()
		if err != nil {
			t.Fatalf("ACL LOG: %v", err)
		}
		for _, e := range entries {
			t.Errorf("the server denied %s: %s %q (%s), %d times", e.Username, e.Reason, e.Object, e.Context, e.Count)
		}
	})
}
