package harness

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestSecureServer: SecureServer speaks TLS only, verified against its
// own CA, and its ACL user, restricted by ACLRules, may use the keys and
// channels of the test prefixes and nothing else: no FUNCTION, no SCRIPT,
// no admin or dangerous command.
func TestSecureServer(t *testing.T) {
	tg := SecureServer(t)
	ctx := context.Background()
	user := redis.NewClient(&redis.Options{Addr: tg.Addrs[0], TLSConfig: tg.TLS, Username: tg.Username, Password: tg.Password})
	defer user.Close()
	if err := user.Set(ctx, "test:secure:k", "v", 0).Err(); err != nil {
		t.Fatalf("SET of a test key: %v", err)
	}
	if err := user.Del(ctx, "test:secure:k").Err(); err != nil {
		t.Fatalf("DEL of a test key: %v", err)
	}
	for _, cmd := range [][]any{
		{"GET", "other:k"},
		{"SET", "other:k", "v"},
		{"PUBLISH", "other:ch", "x"},
		{"SUBSCRIBE", "other:ch"},
		{"FUNCTION", "LOAD", "#!lua name=evil\nredis.register_function('f', function() return 1 end)"},
		{"FUNCTION", "FLUSH"},
		{"FCALL", "f", "0"},
		{"SCRIPT", "LOAD", "return 1"},
		{"SCRIPT", "FLUSH"},
		{"FLUSHALL"},
		{"FLUSHDB"},
		{"KEYS", "*"},
		{"CONFIG", "GET", "maxmemory"},
		{"INFO"},
		{"CLIENT", "LIST"},
		{"CLIENT", "KILL", "TYPE", "pubsub"},
		{"SHUTDOWN", "NOSAVE"},
		{"ACL", "LIST"},
		{"EVAL", "return redis.call('GET', 'other:k')", "0"},
		{"EVAL", "return redis.call('FLUSHALL')", "0"},
	} {
		err := user.Do(ctx, cmd...).Err()
		// A script's call is refused in words of its own.
		if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") && !strings.Contains(err.Error(), "The user executing the script can't") {
			t.Errorf("%q as %s: %v, want a refusal (NOPERM)", cmd, tg.Username, err)
		}
	}
	// What the suite's runs do not send (WaitReplicas, ShardedPubSub) the
	// server would let through (ACL DRYRUN, as the default user).
	admin := redis.NewClient(&redis.Options{Addr: tg.Addrs[0], TLSConfig: tg.TLS})
	defer admin.Close()
	for _, cmd := range [][]any{
		{"WAIT", "1", "100"},
		{"SSUBSCRIBE", "test:secure:inbox"},
		{"SUNSUBSCRIBE", "test:secure:inbox"},
		{"SPUBLISH", "test:secure:inbox", "x"},
		{"SUBSCRIBE", "test:secure:inbox"},
		{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "test:secure:inbox"},
		{"EVALSHA", "0123456789012345678901234567890123456789", "1", "test:secure:k"},
		{"LPOP", "test:secure:inbox", "0"},
	} {
		if r, err := admin.Do(ctx, append([]any{"ACL", "DRYRUN", tg.Username}, cmd...)...).Text(); err != nil || r != "OK" {
			t.Errorf("ACL DRYRUN %s %q: %q, %v; want OK", tg.Username, cmd, r, err)
		}
	}
	plain := redis.NewClient(&redis.Options{Addr: tg.Addrs[0], MaxRetries: -1, DialerRetries: 1})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Error("PING without TLS answered")
	}
	systemCAs := tg.TLS.Clone()
	systemCAs.RootCAs = nil // the system's, which do not know the server's CA
	unverified := redis.NewClient(&redis.Options{Addr: tg.Addrs[0], TLSConfig: systemCAs, MaxRetries: -1, DialerRetries: 1})
	defer unverified.Close()
	if err := unverified.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("PING over TLS with the system's CAs: %v, want a certificate error", err)
	}
}

// TestACLRulesDoc: README.md and docs/deployment.md show ACLRules for the
// default prefix, "lock:", as one ACL SETUSER command; docs/deployment.md
// shows the additions of ACLRulesCluster and ACLRulesBehindSentinel, and
// the Sentinels' user of ACLRulesSentinel, each as one ACL SETUSER command.
func TestACLRulesDoc(t *testing.T) {
	const readme, deployment = "../../../README.md", "../../../docs/deployment.md"
	space := regexp.MustCompile(`\s+`)
	text := map[string]string{}
	for _, path := range []string{readme, deployment} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text[path] = space.ReplaceAllString(string(b), " ")
	}
	for _, c := range []struct {
		name  string
		want  string
		paths []string
	}{
		{"ACLRules", "ACL SETUSER locker on >password " + strings.Join(ACLRules("lock:"), " "), []string{readme, deployment}},
		{"ACLRulesCluster", "ACL SETUSER locker " + strings.Join(ACLRulesCluster(), " ") + " ", []string{deployment}},
		{"ACLRulesBehindSentinel", "ACL SETUSER locker " + strings.Join(ACLRulesBehindSentinel(), " ") + " ", []string{deployment}},
		{"ACLRulesSentinel", "ACL SETUSER locker on >password " + strings.Join(ACLRulesSentinel(), " ") + " ", []string{deployment}},
	} {
		for _, path := range c.paths {
			if !strings.Contains(text[path], c.want) {
				t.Errorf("%s does not show the ACL rule of harness.%s; want:\n%s", path, c.name, c.want)
			}
		}
	}
}
