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
// Every Backend has a name of its own, process (16 random hex digits), and
// an inbox: "<prefix>inbox:<process>:", with a hash tag of one slot
// appended on Cluster (see Keys). New builds the client with CLIENT
// TRACKING ON BCAST PREFIX <prefix>inbox:<process>: NOLOOP. Redis then tells
// the connection of every write, by another connection, to a key under
// that prefix: the Backend's inbox keys, which no other process reads. The
// client tracks nothing else: no lock or queue key, so a lock's changes
// reach no process and the uncontended path costs no tracking at all. It
// has one connection per Redis node (PipelineMultiplex -1, auto-pipelining
// on, no blocking pool).
//
//   - Only the head's process is told: a queued waiter's record (key w)
//     names its inbox, and a step that wakes the head RPUSHes
//     "<n>:<enc(id)><payload>" to that inbox key (PEXPIRE 60 s). The
//     invalidation of the key makes the Backend drain it on a goroutine of
//     its own (LPOP with a count, all written keys in one round trip) and
//     deliver each message to the subscribers of the id it names, with
//     the head's token: Wake{ID, Token, Grant} for a direct hand-off (the
//     step granted the lock to the head: backend.HandOffer), Wake{ID,
//     Token} for a head that cannot take it (past its deadline, not purged
//     yet), or, from a grant that leaves a new head, Wake{ID, Token,
//     HolderTTL} (that head keeps a timer at the holder's TTL). Eight
//     processes waiting on one id get one message per hand-off, not eight.
//   - No missed wake-up: the message waits in the key until drained, so a
//     wake-up sent before the waiter's process looked is still read.
//     Subscribe only registers the callback (no command).
//   - Its own wake-ups: Redis (7.0) does not apply NOLOOP to a script's
//     writes in broadcasting mode, so a step of this Backend that wakes one
//     of its own waiters reaches it the same way (a test checks it, as a
//     later Redis could change it). The drain is a plain command, which
//     NOLOOP keeps from coming back: no loop.
//   - A lost connection or FLUSHALL: rueidis reports it as a nil
//     invalidation ("everything"). The Backend then PINGs through the client
//     (which dials a new tracking connection) until the server answers,
//     drains the inbox keys of its subscribed ids, and only then delivers
//     Wake{ID, All: true} for every subscribed id, so that every waiter
//     re-checks. The Backend watches the client's connections (it wraps
//     ClientOption's dialer, which it still calls) and leaves the Wake{All}
//     out when no listener was lost: when each connection that closed had
//     carried no command, or another connection to its node was tracking
//     before it closed and still is. A cluster client closes such spare
//     connections after its start-up; the drain delivers what the inboxes
//     hold either way.
//
// What the inbox does not report is what pub/sub does not report either:
// a lease that expires with no step (the head re-checks at the holder's
// TTL, which it was told), and a message lost with its key (a failover, an
// inbox key gone after 60 s unread). The head then finds out by its
// heartbeat (Ready), within WaiterTimeout/3.
//
// # PubSub mode (ClientOption.DisableCache, NewWithClient, or no tracking)
//
// Pub/sub is used with ClientOption.DisableCache, with NewWithClient, and
// when rueidis reports rueidis.ErrNoCache while New builds the tracking
// client (Redis < 6, or no RESP3, e.g. some proxies and managed services),
// or when the server's INFO names a Redis older than 6.2 (New then builds
// the client again with DisableCache). The scripts then
// PUBLISH the head's wake-up on its process's inbox channel (named as the
// inbox key above), which the Backend subscribes to on one dedicated
// connection from the client's pool, and routes to each id's subscribers.
// The Backend's first Subscribe returns once the server confirmed the
// SUBSCRIBE; later ones only register. The inbox stays subscribed until
// Close. One goroutine sends every SUBSCRIBE and UNSUBSCRIBE in order;
// when the connection breaks it takes a new one and subscribes again, and
// every subscribed id gets Wake{ID, All: true}. [Backend.Mode] tells which
// mode is in use.
//
// # Wire protocol
//
// As redisbackend (its package doc says it in full): the keys, the inbox
// messages and the scripts' arguments are wire protocol version 1, which
// may change between minor versions until the module's v1.0.0, with no
// compatibility for older versions. Processes of different wire versions
// must not share a prefix: before its first step a Backend checks the
// prefix's marker, "<prefix>wire" (a TTL of 2 minutes, set again by a
// check at most every 30 s while the Backend makes steps), and every step
// fails unsent, writing nothing, with an error that names both versions
// and the prefix while the marker holds another version. To upgrade, stop
// every process of the prefix and start the new ones once the marker
// expired, or use a new prefix.
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
// extend or grant of a longer lease. The payload of a wake-up, on an inbox
// after "<n>:<enc(id)>": "g<fence>,<ttl ms>,<µs>:<token>" (a hand-off: the
// step granted the lock to the head; µs is the server's clock then),
// ":<token>" (re-check) or "<ms>:<token>" (a new head of a lock held ms
// more). Per prefix: the wire marker, "<prefix>wire" (see Wire protocol).
// Per Backend, not per id: its inbox,
// "<prefix>inbox:<process>:", with "{<tag>}" (a hash tag of one slot)
// appended per slot on Cluster in Tracking mode or with ShardedPubSub: a
// channel in PubSub mode, a list key in Tracking mode that lives 60 s
// after its last write (drained at once while the Backend runs). Every key
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
//   - A contended acquisition in steady state: its enqueue and the
//     holder's release, which grants the lock to the head in the same
//     script (a direct hand-off, as in redisbackend's doc): 2; in Tracking
//     mode 3, with the drain of the inbox key (LPOP). A drain takes every
//     message waiting in the key, so wake-ups that arrive together (a
//     grant and the next head's notice) share one. A grant to a head whose
//     process died costs the queue that lease's TTL at most.
//   - Heartbeat: 1 command per id, all in one round trip; an idle waiter
//     sends nothing else (one batched round trip per WaiterTimeout/3).
//   - AcquireBatch: one acquire_many script per chunk of up to 64
//     requests, any ids on one server; on Cluster one per hash slot and
//     chunk. All in one round trip (one per master on Cluster).
//   - LeaveBatch: 1 command per request, one round trip.
//   - Subscribe: nothing in Tracking mode; in PubSub mode one SUBSCRIBE of
//     the inbox on the pub/sub connection, by the Backend's first Subscribe
//     (with ShardedPubSub on Cluster: one SSUBSCRIBE per slot's inbox).
//   - Nothing else: a holder's extend, a grant to another process or an
//     expiry sends no process anything.
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
// ClientOption.Sentinel.MasterSet; package tests/cluster runs a hand-off and
// a forced failover through it in Tracking mode. With WaitReplicas, the
// WAIT rides in the step's DoMulti, on rueidis's one connection to the
// master, which it holds while it waits.
//
// # Redis Cluster
//
// Give New (or the client of NewWithClient) the addresses of the nodes;
// rueidis sends each step to the master of the id's slot, follows MOVED
// and ASK, and splits a batch (DoMulti) into one round trip per master.
// In Tracking mode the client has one connection per node, each tracking
// the inbox prefix. A script may only write a key of its own slot, so the
// Backend has one inbox key per slot, and the node that serves the slot
// tells the Backend's connection to it. After a lost connection the
// Backend PINGs every master (CLUSTER SLOTS), each on its own connection,
// before it drains and wakes every waiter. In PubSub mode the classic
// SUBSCRIBE of the one inbox works on Cluster because every node forwards
// a PUBLISH to all the others. With Options.ShardedPubSub (Redis 7.0 or
// newer) the scripts send SPUBLISH, which stays on the id's master, to the
// inbox of the id's slot. Each slot's inbox is subscribed there with an
// SSUBSCRIBE (through client.Receive: rueidis's connection to that node,
// one goroutine per inbox), and again where its slot moves, with Wake{ID,
// All: true} for the slot's subscribed ids. Both modes, with and without ShardedPubSub,
// pass the conformance suite on a local cluster of three masters, and a
// slot migration under load (package tests/cluster).
package rueidisbackend
