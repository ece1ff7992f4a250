package redisbackend

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// TestShardedOnOneServer: with ShardedPubSub on a client of one server,
// the scripts wake the head with SPUBLISH of its inbox, which the
// Backend's SSUBSCRIBE hears (a SUBSCRIBE subscriber does not), and a
// killed pub/sub connection is restored
// with Wake{All}. The cluster case is tested in
// Package cluster.
func TestShardedOnOneServer(t *testing.T) {
	srv := redisserver.StartT(t, redisserver.Options{})
	e := newEnvAt(t, srv.Addr)
	holder, _ := e.backend(&Options{ShardedPubSub: true})
	waiter, _ := e.backend(&Options{ShardedPubSub: true})
	classic := e.raw.Subscribe(ctx, waiter.Inbox("h"))
	defer classic.Close()
	if _, err := classic.Receive(ctx); err != nil { // the confirmation
		t.Fatal(err)
	}
	w := adaptertest.Subscribed(t, waiter, "h")
	if g, err := holder.Acquire(ctx, req("h", "H", false)); err != nil || !g.Acquired {
		t.Fatalf("holder: %+v, %v", g, err)
	}
	adaptertest.HandOff(t, w, holder, waiter, "h", "H", "W")
	inbox := waiter.Inbox("h")
	if n := e.raw.PubSubNumSub(ctx, inbox).Val()[inbox]; n != 1 {
		t.Fatalf("PUBSUB NUMSUB = %d: want only the test's classic subscriber", n)
	}
	if n := e.raw.PubSubShardNumSub(ctx, inbox).Val()[inbox]; n != 1 {
		t.Fatalf("PUBSUB SHARDNUMSUB = %d, want the Backend's one", n)
	}
	// What the test's classic subscriber got arrived before the PONG.
	if err := classic.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if m, err := classic.Receive(ctx); err != nil {
		t.Fatal(err)
	} else if _, pong := m.(*redis.Pong); !pong {
		t.Fatalf("a SUBSCRIBE subscriber of the inbox got %v, want nothing before its PONG", m)
	}
	if n, err := e.raw.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n < 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v", n, err)
	}
	w.Expect(t, "wake after the reconnect", backend.Wake{ID: "h", All: true})
	if err := waiter.Leave(ctx, "h", "W"); err != nil {
		t.Fatal(err)
	}
}
