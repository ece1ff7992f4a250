package redisbackend

import (
	"testing"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/adaptertest"
	"github.com/redislocker/lock/internal/redistest"
)

// TestShardedOnOneServer: with ShardedPubSub on a client of one server,
// the scripts wake the head with SPUBLISH, which the Backend's SSUBSCRIBE
// hears (a SUBSCRIBE subscriber does not), and a killed pub/sub
// connection is restored with Wake{All}. The cluster case is tested in
// package clustertest.
func TestShardedOnOneServer(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnvAt(t, srv.Addr)
	holder, _ := e.backend(&Options{ShardedPubSub: true})
	waiter, _ := e.backend(&Options{ShardedPubSub: true})
	classic := e.raw.Subscribe(ctx, waiter.keyNames("h").Channel)
	defer classic.Close()
	if _, err := classic.Receive(ctx); err != nil { // the confirmation
		t.Fatal(err)
	}
	w := adaptertest.NewWakes()
	cancel, err := waiter.Subscribe(ctx, "h", w.Fn)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	if g, err := holder.Acquire(ctx, req("h", "H", false)); err != nil || !g.Acquired {
		t.Fatalf("holder: %+v, %v", g, err)
	}
	if g, err := waiter.Acquire(ctx, req("h", "W", true)); err != nil || !g.Queued {
		t.Fatalf("waiter: %+v, %v", g, err)
	}
	if err := holder.Release(ctx, "h", "H"); err != nil {
		t.Fatal(err)
	}
	if x := w.Next(t); x != (backend.Wake{ID: "h", Token: "W"}) {
		t.Fatalf("wake after the release = %+v, want the head's token", x)
	}
	if n := e.raw.PubSubNumSub(ctx, waiter.keyNames("h").Channel).Val()[waiter.keyNames("h").Channel]; n != 1 {
		t.Fatalf("PUBSUB NUMSUB = %d: want only the test's classic subscriber", n)
	}
	if n := e.raw.PubSubShardNumSub(ctx, waiter.keyNames("h").Channel).Val()[waiter.keyNames("h").Channel]; n != 1 {
		t.Fatalf("PUBSUB SHARDNUMSUB = %d, want the Backend's one", n)
	}
	if n, err := e.raw.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n < 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v", n, err)
	}
	if x := w.Next(t); x != (backend.Wake{ID: "h", All: true}) {
		t.Fatalf("wake after the reconnect = %+v, want All", x)
	}
	if err := waiter.Leave(ctx, "h", "W"); err != nil {
		t.Fatal(err)
	}
}
