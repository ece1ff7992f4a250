package harness

import (
	"context"
	"crypto/tls"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// ACLRules are the rules of an ACL user that can run Backends of both
// Redis adapters, in every mode, under key prefix prefix and nothing
// more (they run the scripts with EVALSHA: add "+function|load" and
// "+fcall" for Redis 7 functions, which cost the server less): `ACL SETUSER <name> on ><password> <rules>`. README.md and
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
// no rule. docs/deployment.md says the same for users. On Redis Cluster
// add ACLRulesCluster; through Sentinel, ACLRulesBehindSentinel on the
// data nodes and a user of ACLRulesSentinel on the Sentinels.
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
// The one denial it accepts is FUNCTION LOAD (see LoadDenial). Call it
// from the test that runs the suite on SecureServer, before the suite.
func CheckACLLog(t *testing.T) {
	tg := SecureServer(t)
	t.Cleanup(func() { CheckACLLogAt(t, tg.TLS, "", tg.Addrs...) })
}

// LoadDenial reports whether an ACL LOG entry (reason, object) is the
// denial of FUNCTION LOAD: a Backend tries it once to load the scripts'
// function library, and a user of ACLRules, which does not allow it,
// gets EVALSHA instead (docs/deployment.md).
func LoadDenial(reason, object string) bool {
	return reason == "command" && object == "function|load"
}

// CheckACLLogAt fails t when a server at addrs (over TLS when tlsConfig
// is set, as the default user) has logged a denial (ACL LOG) of user, or
// of any user when user is "", other than the FUNCTION LOAD of each
// Backend (LoadDenial).
func CheckACLLogAt(t testing.TB, tlsConfig *tls.Config, user string, addrs ...string) {
	t.Helper()
	for _, addr := range addrs {
		admin := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: tlsConfig, MaxRetries: -1}) // the default user
		entries, err := admin.ACLLog(context.Background(), 100).Result()
		admin.Close()
		if err != nil {
			t.Fatalf("ACL LOG of %s: %v", addr, err)
		}
		for _, e := range entries {
			if (user == "" || e.Username == user) && !LoadDenial(e.Reason, e.Object) {
				t.Errorf("%s denied %s: %s %q (%s), %d times", addr, e.Username, e.Reason, e.Object, e.Context, e.Count)
			}
		}
	}
}

// ACLRulesCluster are the rules a user of ACLRules needs, in addition, on
// every node of a Redis Cluster: `ACL SETUSER <name> <rules>` after the
// user's ACLRules (docs/deployment.md shows it; TestACLRulesDoc). The
// clients read the slot map with CLUSTER SLOTS (go-redis; rueidis before
// Redis 8) or CLUSTER SHARDS (rueidis on Redis 8 and newer), go-redis asks
// for COMMAND (the commands' key positions), and both follow an ASK
// redirect of a migrating slot with ASKING. READONLY is not needed: the
// adapters read from masters only. cluster.TestACLCluster runs both
// adapters, in every mode, so on a cluster, through a slot migration.
func ACLRulesCluster() []string {
	return []string{"+cluster|slots", "+cluster|shards", "+command", "+asking"}
}

// ACLRulesBehindSentinel are the rules a user of ACLRules needs, in
// addition, on the master and replicas that Sentinels watch: rueidis asks
// the node a Sentinel names for its ROLE before it uses it (go-redis does
// not). docs/deployment.md shows them (TestACLRulesDoc).
func ACLRulesBehindSentinel() []string { return []string{"+role"} }

// ACLRulesSentinel are the rules of the clients' user on each Sentinel
// (go-redis's FailoverOptions.SentinelUsername, rueidis's
// SentinelOption.Username), a user of the Sentinel's own ACL: `ACL SETUSER
// <name> on ><password> <rules>` (docs/deployment.md; TestACLRulesDoc).
// The clients ask for the master's address (SENTINEL
// GET-MASTER-ADDR-BY-NAME) and the other Sentinels (SENTINEL SENTINELS),
// and subscribe to the Sentinel's events: go-redis to +switch-master and
// +replica-reconf-done, rueidis to +sentinel, +slave, +sdown, -sdown,
// +switch-master and +reboot; they send PING (health checks), and
// rueidis in Tracking mode CLIENT TRACKING on its Sentinel connections
// too. cluster.TestACLSentinel
// runs both adapters, in every mode, so through a Sentinel.
func ACLRulesSentinel() []string {
	return []string{
		"resetchannels", "&+switch-master", "&+replica-reconf-done",
		"&+sentinel", "&+slave", "&+sdown", "&-sdown", "&+reboot",
		"-@all", "+sentinel|get-master-addr-by-name", "+sentinel|sentinels",
		"+subscribe", "+unsubscribe", "+ping", "+client|tracking",
	}
}
