// Package rueidisbackend is the rueidis adapter of the lock package: a
// [backend.Backend] on one Redis deployment, built from the same Lua
// scripts as redisbackend (internal/scripts), whose waiters are woken by
// client-side-caching invalidations (CLIENT TRACKING) or, with caching
// off, by pub/sub. It needs Redis 5 or newer; tracking needs Redis 6 or
// newer with RESP3.
//
//	b, err := rueidisbackend.New(rueidisbackend.Options{
//		ClientOption: rueidis.ClientOption{InitAddress: []string{"localhost:6379"}},
//	})
//	...
//	locker, err := lock.New(b, nil)
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
// New builds the client with CLIENT TRACKING ON NOLOOP (default mode: every
// key a command reads is tracked). It has one connection per Redis node
// (PipelineMultiplex -1, auto-pipelining on, no blocking pool): every step
// runs on the connection whose invalidations the Backend hears.
//
//   - No missed wake-up: the acquire script reads the lock key in the same
//     atomic step as a failed try, on that connection. From its reply on,
//     any change of the key by another connection (release, expiry, a new
//     grant, an extend) is pushed to the connection after that reply. The
//     core subscribes before that step, so Subscribe only registers the
//     callback (no command) and the push finds it.
//   - Which ids: an invalidation names keys; the lock key of a subscribed id
//     becomes Wake{ID: id} (no token: an invalidation cannot name the head,
//     so the core wakes its earliest local waiter of the id). Queue keys,
//     which the scripts also read, and ids nobody here waits on are
//     ignored. Waiters of other ids are never woken.
//   - NOLOOP: the connection is not told of its own writes, so a holder's
//     extend or release never comes back to it (no self-wake loop; a test
//     counts exactly one command per extend). But Redis also stops tracking
//     a key for the connection that wrote it. The Backend never depends on
//     hearing its own writes. The acquire script (on a grant) and the
//     extend script read the key again after writing it, so it stays
//     tracked: the expiry of the Backend's own lease still reaches its own
//     waiters. That read (one PTTL on the server) is made in Tracking mode
//     only; in PubSub mode the scripts skip it. After its own Release it wakes its own waiters of the id
//     itself (Wake{ID}); after a Leave that removed something, all of them
//     (Wake{ID, All: true}: the leaver may be the earliest one). On Redis
//     before 7.0.5, scripts ignore NOLOOP: the Backend then hears its own
//     writes, which costs at most one extra re-check per write while this
//     Backend has waiters of the id, never a loop.
//   - A lost connection or FLUSHALL: rueidis reports it as a nil
//     invalidation ("everything"). The Backend then PINGs through the client
//     (which dials a new tracking connection) until the server answers, and
//     only then delivers Wake{ID, All: true} for every subscribed id, so
//     that every waiter re-checks, and tracks again, on the new connection.
//
// A grant changes the lock key, so every waiting process re-checks: the
// next head learns it is the head, and the holder's TTL, from that step,
// and keeps a timer for a lease that ends without a release.
//
// What tracking does not report: a change of the queue's head by a Leave
// or a purge, the lock being free (a head that leaves or dies right after
// a release) or held (the new head then keeps no timer at the holder's
// TTL). The next head finds out by its own heartbeat (Ready), within
// WaiterTimeout/3 (plus WaiterTimeout for a dead head to be purged), as
// with a lost pub/sub message. And every change of the lock key wakes one waiter per process
// that waits on the id, including a holder's extend: one extra step per
// waiting process per extend, where pub/sub wakes the head only.
//
// # PubSub mode (ClientOption.DisableCache, NewWithClient, or no tracking)
//
// Pub/sub is used with ClientOption.DisableCache, with NewWithClient, and
// when rueidis reports rueidis.ErrNoCache while New builds the tracking
// client (Redis < 6, or no RESP3, e.g. some proxies and managed services;
// New then builds the client again with DisableCache). The Backend then
// hears the scripts' PUBLISH of the head's token on one dedicated
// connection from the client's pool, shared by every id and
// reference-counted per channel. Subscribe
// returns once the server confirmed the SUBSCRIBE. One goroutine sends
// every SUBSCRIBE and UNSUBSCRIBE in order; when the connection breaks it
// takes a new one and subscribes again, and each re-confirmed channel
// becomes Wake{ID, All: true}. [Backend.Mode] tells which mode is in use.
//
// # Keys
//
// As redisbackend (its package doc has the table, and the fences'
// clock assumption): every key of an id shares one hash tag, so each step
// is one script on one slot (Cluster works). The keys are
// "<prefix>{<enc(id)>}:<suffix>" with these suffixes. lock: the holder's
// token; TTL = the lease, relative PX. q and dl: the queue and its
// deadlines; at least 3 x the longest WaiterTimeout, gone once empty. w:
// the queued waiters' records ("<lease ms>:<inbox>"), as q. n:
// "fence", the id's last fence, and "rel", the last release's token; an
// hour, set by a grant about once per half hour of grants, and by an
// extend or grant of a longer lease. wake: the pub/sub channel. Every key
// expires: memory per id returns to zero at most an hour after the id's
// last grant or extend (or the end of that lease, if later). A fence is
// the server's clock (TIME) in µs, raised past the id's last fence while
// the n key lives. The prefix, by default "lock:", may not contain '{' or
// '}'.
//
// # Steps and their cost
//
// Each step is one EVALSHA (EVAL once more when the server lost the
// script), counted by the package's tests with a rueidishook hook, the same
// in both modes and as in redisbackend:
//
//   - Acquire, Release, Extend, Leave: 1 command each. Uncontended
//     Acquire + Release through lock.Locker: 2.
//   - A contended acquisition in steady state: its enqueue, the holder's
//     release and its grant: 3.
//   - Heartbeat: 1 command per id, all in one round trip; an idle waiter
//     sends nothing else (one batched round trip per WaiterTimeout/3).
//   - AcquireBatch: in PubSub mode one acquire_many script per chunk of
//     up to 64 requests, any ids on one server; on Cluster one per hash
//     slot and chunk. In Tracking mode one acquire script per request:
//     Redis makes a tracking client's script on n ids cost the server
//     about n^2. All in one round trip (one per master on Cluster).
//   - LeaveBatch: 1 command per request, one round trip.
//   - Subscribe: nothing in Tracking mode; in PubSub mode one SUBSCRIBE on
//     the pub/sub connection for an id not yet subscribed.
//   - A waiting process in Tracking mode also re-checks (1 command) on each
//     change of the lock key by another process: a grant ahead of it, a
//     release, an extend, an expiry.
//
// rueidis never resends a write, and a connection that broke while idle is
// often noticed only by the next command on it. So a step that failed on
// a broken connection is sent once more. Every step is idempotent by
// token; a resent Release is answered as the first one was, through the
// fence key's "rel" field.
//
// # What Redis can and cannot promise; replicas and failover
//
// As in redisbackend, whose package doc says it in full: one server
// without persistence loses every lock and queue on restart; a failover
// to an asynchronous replica can grant a lock twice. Fences go on above
// every earlier one across both, under the clock assumption stated there.
// Options.WaitReplicas narrows the failover risk (WAIT after every grant
// and Extend), without making Redis strongly consistent.
//
// With Sentinel, give New the Sentinels' addresses and
// ClientOption.Sentinel.MasterSet; package clustertest runs a hand-off and
// a forced failover through it in Tracking mode. With WaitReplicas, the
// WAIT rides in the step's DoMulti, on rueidis's one connection to the
// master, which it holds while it waits.
//
// # Redis Cluster
//
// Give New (or the client of NewWithClient) the addresses of the nodes;
// rueidis sends each step to the master of the id's slot, follows MOVED
// and ASK, and splits a batch (DoMulti) into one round trip per master.
// In Tracking mode the client has one connection per node, with tracking
// on. Each step runs on the connection of its id's master, so the key a
// failed try reads is tracked on the connection that hears its
// invalidations (package clustertest checks it with CLIENT LIST). After a
// lost connection the Backend PINGs every master (CLUSTER SLOTS), each on
// its own connection, before it wakes every waiter. In PubSub mode the
// classic SUBSCRIBE works on Cluster because every node forwards a PUBLISH
// to all the others. With Options.ShardedPubSub (Redis 7.0 or newer) the
// scripts send SPUBLISH, which stays on the id's master. Each id is
// subscribed there with an SSUBSCRIBE (through client.Receive: rueidis's
// connection to that node, one goroutine per id), and again where its
// slot moves, with Wake{ID, All: true}. Both modes, with and without ShardedPubSub,
// pass the conformance suite on a local cluster of three masters, and a
// slot migration under load (package clustertest).
package rueidisbackend
