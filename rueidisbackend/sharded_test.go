package rueidisbackend

import (
	"testing"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/adaptertest"
	"github.com/redislocker/lock/internal/redistest"
)

// TestShardedOnOneServer: with ShardedPubSub in PubSub mode on one server,
// the scripts wake the head with SPUBLISH, which the Backend's SSUBSCRIBE
// hears, a killed connection is restored with Wake{All}, and the channel
// is unsubscribed after the last cancel. In Tracking mode the option only
// changes the command the scripts send. The cluster case is tested in
// package clustertest.
func TestShardedOnOneServer(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnvAt(t, srv.Addr)
	holder, _ := e.backend(Tracking, &Options{ShardedPubSub: true})
	waiter, _ := e.backend(PubSub, &Options{ShardedPubSub: true})
	ch := waiter.Inbox("h")
	w := adaptertest.NewWakes()
	cancel, err := waiter.Subscribe(ctx, "h", w.Fn)
	if err != nil {
		t.Fatal(err)
	}
	if g := mustAcquire(t, holder, req("h", "H", false)); !g.Acquired {
		t.Fatalf("holder: %+v", g)
	}
	if g := mustAcquire(t, waiter, req("h", "W", true)); !g.Queued {
		t.Fatalf("waiter: %+v", g)
	}
	if err := holder.Release(ctx, "h", "H"); err != nil {
		t.Fatal(err)
	}
	if x := w.Next(t); x != (backend.Wake{ID: "h", Token: "W"}) {
		t.Fatalf("wake after the release = %+v, want the head's token", x)
	}
	if n, _ := e.do("PUBSUB", "SHARDNUMSUB", ch).ToArray(); len(n) != 2 {
		t.Fatalf("PUBSUB SHARDNUMSUB = %v", n)
	} else if v, _ := n[1].AsInt64(); v != 1 {
		t.Fatalf("PUBSUB SHARDNUMSUB = %d, want the Backend's one", v)
	}
	e.do("CLIENT", "KILL", "TYPE", "pubsub")
	if x := w.Next(t); x != (backend.Wake{ID: "h", All: true}) {
		t.Fatalf("wake after the reconnect = %+v, want All", x)
	}
	if err := waiter.Leave(ctx, "h", "W"); err != nil {
		t.Fatal(err)
	}
	cancel()
	adaptertest.Eventually(t, "the shard channel is unsubscribed after the last cancel", func() bool {
		n, _ := e.do("PUBSUB", "SHARDNUMSUB", ch).ToArray()
		v, _ := n[1].AsInt64()
		return v == 0
	})
}
