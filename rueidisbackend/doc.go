// Package rueidisbackend is the rueidis adapter of the lock package: a
// [backend.Backend] on one Redis deployment, built from the same Lua
// scripts as redisbackend (internal/redis/scripts), whose waiters are woken by
// client-side-caching invalidations of a per-process inbox key (CLIENT
// TRACKING in broadcasting mode) or, with caching off, by pub/sub on a
// per-process inbox channel. It needs Redis 5 or newer; tracking needs
// Redis 6.2 or newer (LPOP with a count) with RESP3.
//
//	b, err := rueidisbackend.New(&rueidisbackend.Options{
//		ClientOption: rueidis.ClientOption{InitAddress: []string{"localhost:6379"}},
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	locker, err := lock.New(b, nil)
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer locker.Close() // closes b, which closes the client it built
//
// # Why the Backend builds its client
//
// rueidis attaches the invalidation callback (ClientOption.OnInvalidations)
// and the tracking mode when a client is built. So a Backend that wakes
// waiters by invalidations builds its own client, like rueidislock does:
// [New] takes a rueidis.ClientOption and an optional ClientBuilder (to wrap
// the client with hooks or tracing). [NewWithClient] takes a client you
// built and keep; it cannot track, so it uses pub/sub.
//
// # Tracking mode (the default of New)
//
// New builds the client with CLIENT TRACKING ON BCAST PREFIX
// <prefix>inbox:<process>: NOLOOP: the client tracks nothing but this
// Backend's own inbox keys, which no other process reads, so a lock's
// changes reach no process and the uncontended path costs no tracking. A
// step that wakes a waiter of this process RPUSHes the message to its inbox
// key; the key's invalidation makes the Backend drain it (LPOP with a
// count, on a goroutine of its own) and deliver each message to the
// subscribers of the id it names. Subscribe only registers the callback
// (no command): a wake-up sent before the process looked waits in the key.
// The client has one connection per Redis node (PipelineMultiplex -1,
// auto-pipelining on, no blocking pool). Do not use a Backend's client for
// client-side caching of your own: it tracks only the inbox prefix
// (Options.ClientOption lists the fields New sets).
//
// A lost connection or FLUSHALL is a nil invalidation ("everything"): the
// Backend then PINGs through the client (on Cluster, every master) until
// the server answers, drains the inbox keys of its subscribed ids, and
// delivers Wake{ID, All: true} for every subscribed id, so that every
// waiter re-checks. It watches the client's connections (it wraps
// ClientOption's dialer, which it still calls) and leaves the Wake{All}
// out when no listener was lost: when each connection that closed had
// carried no command, or another connection to its node was tracking
// before it closed and still is, such as the spare connections a cluster
// client closes after its start-up.
//
// # PubSub mode
//
// Pub/sub is used with ClientOption.DisableCache, with NewWithClient, and
// when rueidis reports rueidis.ErrNoCache while New builds the tracking
// client (Redis < 6, or no RESP3, e.g. some proxies and managed services),
// or when the server's INFO names a Redis older than 6.2 (New then builds
// the client again with DisableCache). The scripts then PUBLISH to the
// process's inbox channel, which the Backend subscribes to on one
// dedicated connection from the client's pool. The Backend's first
// Subscribe returns once the server confirmed the SUBSCRIBE; later ones
// only register. One goroutine sends every SUBSCRIBE and UNSUBSCRIBE in
// order; when the connection breaks it takes a new one and subscribes
// again, and every subscribed id gets Wake{ID, All: true}. [ModeOf] tells
// which mode a Backend uses.
//
// # Resent steps
//
// rueidis never resends a write, and a connection that broke while idle is
// often noticed only by the next command on it. So a step that failed on
// a broken connection is sent once more. Every step is idempotent by
// token; a resent Release is answered as the first one was.
//
// # Deployments
//
// Keys, wake-up payloads, the direct hand-off, fences and their clock
// assumption, what each operation costs in each mode, and the wire
// protocol (with its per-prefix marker, "<prefix>wire", checked before a
// Backend's first step) are one page, docs/protocol.md in the repository,
// shared with redisbackend; docs/deployment.md says what holds on each
// deployment, and how far Options.WaitReplicas narrows the failover risk.
//
// With Sentinel, give New the Sentinels' addresses and
// ClientOption.Sentinel.MasterSet; package tests/cluster runs a hand-off and
// a forced failover through it in Tracking mode. With WaitReplicas, the
// WAIT rides in the step's DoMulti, on rueidis's one connection to the
// master, which it holds while it waits.
//
// On Redis Cluster give New (or the client of NewWithClient) the addresses
// of the nodes; rueidis sends each step to the master of the id's slot,
// follows MOVED and ASK, and splits a batch (DoMulti) into one round trip
// per master. A script may only write a key of its own slot, so in
// Tracking mode the Backend has one inbox key per slot. In PubSub mode the
// classic SUBSCRIBE of the one inbox works on Cluster; with
// Options.ShardedPubSub (Redis 7.0 or newer) each slot's inbox is
// subscribed with an SSUBSCRIBE on its master (through client.Receive, one
// goroutine per inbox), and again where its slot moves, with Wake{ID, All:
// true} for the slot's subscribed ids. Both modes, with and without
// ShardedPubSub, pass the conformance suite on a local cluster of three
// masters, and a slot migration under load (package tests/cluster).
package rueidisbackend
