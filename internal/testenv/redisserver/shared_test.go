package redisserver_test

import (
	"strings"
	"testing"

	"github.com/redislocker/lock/internal/testenv/redisserver"
)

func TestAddrAnswersPing(t *testing.T) {
	addr := redisserver.SharedAddr(t)
	if err := redisserver.Ping(addr); err != nil {
		t.Fatalf("shared server %s: %v", addr, err)
	}
	if again := redisserver.SharedAddr(t); again != addr {
		t.Fatalf("SharedAddr returned %s, then %s: want one shared server", addr, again)
	}
}

func TestStartTAndClose(t *testing.T) {
	s := redisserver.StartT(t, redisserver.Options{})
	if err := redisserver.Ping(s.Addr); err != nil {
		t.Fatalf("private server %s: %v", s.Addr, err)
	}
	s.Close()
	if err := redisserver.Ping(s.Addr); err == nil {
		t.Fatalf("server %s still answers after Close", s.Addr)
	}
	s.Close() // idempotent
}

func TestPrefixIsUniqueAndBraceFree(t *testing.T) {
	a, b := redisserver.Prefix(t), redisserver.Prefix(t)
	if a == b {
		t.Fatalf("Prefix returned %q twice", a)
	}
	if strings.ContainsAny(a, "{}") {
		t.Fatalf("Prefix(%q) = %q contains a brace", t.Name(), a)
	}
}

// TestPersistent: a key without a TTL is reported, one with a TTL is not.
func TestPersistent(t *testing.T) {
	srv := redisserver.StartT(t, redisserver.Options{})
	if left, err := redisserver.Persistent(srv.Addr); err != nil || left != "" {
		t.Fatalf("empty server: %q, %v", left, err)
	}
	if _, err := srv.Do("SET", "ttl", "v", "PX", "60000"); err != nil {
		t.Fatal(err)
	}
	if left, err := redisserver.Persistent(srv.Addr); err != nil || left != "" {
		t.Fatalf("a key with a TTL: %q, %v; want nothing", left, err)
	}
	if _, err := srv.Do("SET", "forever", "v"); err != nil {
		t.Fatal(err)
	}
	if left, err := redisserver.Persistent(srv.Addr); err != nil || left != "1 forever" {
		t.Fatalf("a key without a TTL: %q, %v; want \"1 forever\"", left, err)
	}
}
