package rueidisbackend

import (
	"testing"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/redisserver"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// TestShardedOnOneServer: with ShardedPubSub in PubSub mode on one server,
// the scripts wake the head with SPUBLISH of its process's inbox channel,
// which the Backend's one SSUBSCRIBE hears; a killed connection is
// restored with Wake{All}; the inbox
// stays subscribed after the last cancel and is left on Close. A Tracking
// mode holder's release sends the SPUBLISH too: the waiter's record names
// its inbox. The cluster case is tested in package tests/cluster.
func TestShardedOnOneServer(t *testing.T) {
	srv := redisserver.StartT(t, redisserver.Options{})
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
	adaptertest.HandOff(t, w, holder, waiter, "h", "H", "W")
	if n, _ := e.do("PUBSUB", "SHARDNUMSUB", ch).ToArray(); len(n) != 2 {
		t.Fatalf("PUBSUB SHARDNUMSUB = %v", n)
	} else if v, _ := n[1].AsInt64(); v != 1 {
		t.Fatalf("PUBSUB SHARDNUMSUB = %d, want the Backend's one", v)
	}
	e.do("CLIENT", "KILL", "TYPE", "pubsub")
	w.Expect(t, "wake after the reconnect", backend.Wake{ID: "h", All: true})
	if err := waiter.Leave(ctx, "h", "W"); err != nil {
		t.Fatal(err)
	}
	cancel()
	shardNumSub := func(ch string) int64 {
		n, _ := e.do("PUBSUB", "SHARDNUMSUB", ch).ToArray()
		v, _ := n[1].AsInt64()
		return v
	}
	if n := shardNumSub(ch); n != 1 {
		t.Fatalf("the inbox has %d subscribers after the last cancel, want 1: it is kept while the Backend lives", n)
	}
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, adaptertest.Deadline, "the inbox is unsubscribed on Close", func() bool { return shardNumSub(ch) == 0 })
}
