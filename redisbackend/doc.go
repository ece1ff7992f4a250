// Package redisbackend is the go-redis v9 adapter of the lock package: a
// [backend.Backend] on one Redis deployment (a single server, Sentinel
// through a failover client, or Cluster), built from the Lua scripts of
// internal/redis/scripts, which the rueidis adapter shares. It needs Redis 5 or
// newer.
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	defer client.Close()
//	b, err := redisbackend.New(client, nil) // prefix "lock:"
//	if err != nil {
//		log.Fatal(err)
//	}
//	locker, err := lock.New(b, nil)
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer locker.Close() // closes b; the deferred client.Close runs after it
//
// Keys, wake-up payloads, the direct hand-off, fences and their clock
// assumption, what each operation costs, and the wire protocol are one
// page, docs/protocol.md in the repository, shared with rueidisbackend;
// docs/deployment.md says what holds on each deployment.
//
// # Wake-ups
//
// Each Backend has one pub/sub connection and one inbox channel, shared by
// all ids: its first Subscribe sends one SUBSCRIBE and returns once the
// server confirmed it; later ones are local registrations. The scripts
// PUBLISH a wake-up to the inbox of the head's process only, and the
// Backend routes each message to the subscribers of the id it names.
// go-redis pings the connection when quiet (every 30 s), and reconnects
// and re-subscribes when it breaks; then every subscribed id is delivered
// Wake{ID, All: true}, so that every local waiter re-checks.
//
// # Redis Cluster
//
// Every step is one script on the id's slot, so a *redis.ClusterClient
// needs nothing more: go-redis sends each step to the slot's master and
// follows MOVED and ASK, and splits a batch into one pipeline per master,
// sent in parallel. Classic pub/sub works on Cluster because every node
// forwards a PUBLISH to every other node, at the cost of every node.
//
// With Options.ShardedPubSub (Redis 7.0 or newer) the scripts SPUBLISH to
// one inbox per slot, on the id's master. The Backend keeps one pub/sub
// connection per master that serves an id it waits on, each inbox with an
// SSUBSCRIBE of its own (one SSUBSCRIBE may not span slots), and rebuilds
// a broken connection itself: go-redis's own re-subscription sends
// every channel in one SSUBSCRIBE, which the cluster refuses across slots.
// A channel whose slot moves (the node sends "sunsubscribe", or answers
// MOVED) is subscribed again on its new master once the client's slot map
// has caught up, with Wake{ID, All: true} for each subscribed id of the
// slot. Package tests/cluster tests all of it on a local cluster of three
// masters, with slot migrations.
//
// # Sentinel, replicas and the wire marker
//
// A failover client (redis.NewFailoverClient) is a *redis.Client: it finds
// the master through Sentinel and follows a failover. Replication is
// asynchronous, so a failover can grant a lock twice; Options.WaitReplicas
// narrows that risk without closing it (docs/deployment.md).
//
// Before its first step, and again at most every 30 s while it makes steps,
// a Backend checks the prefix's wire marker, "<prefix>wire": processes of
// different wire protocol versions must not share a prefix, and a step
// under a marker of another version fails unsent (docs/protocol.md says how
// to upgrade).
package redisbackend
