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
// # Keys
//
// Every key of an id shares one hash tag, so each step is one script on one
// slot (Redis Cluster works): "<prefix>{<enc(id)>}:<suffix>". enc escapes
// '%', '{' and '}' as %25, %7B, %7D (see internal/redis/keys). The prefix, by
// default "lock:", may contain neither brace.
//
//	suffix  type    holds                                       TTL
//	lock    string  the holder's token                          the lease (SET NX PX / PEXPIRE, relative)
//	q       zset    waiter token -> ticket (the server's clock  >= 3 x the longest WaiterTTL, set by
//	                in µs, raised past the queue's last one)    enqueue and heartbeat; gone once empty
//	dl      zset    waiter token -> deadline (ms, server TIME)  as q
//	w       hash    waiter token -> "<lease ms>:<inbox>": the   as q
//	                lease TTL a queued waiter asked for, and
//	                where its wake-ups go (its process's inbox)
//	n       hash    "fence": the id's last fence; "rel": the    an hour, set by a grant about once per
//	                token of its last release (a resent         half hour of grants, and by an extend or
//	                release is answered as the first one was)   grant of a longer lease
//
// One more name per Backend, not per id: its inbox, "<prefix>inbox:<process>:"
// (process: 16 random hex digits, new for every Backend), with a hash tag
// of one slot appended, "{<tag>}", per slot with ShardedPubSub on Cluster.
// It is a pub/sub channel that only this Backend subscribes to; a message
// on it is "<n>:<enc(id)>" (n the length of enc(id)) followed by the
// payload: "g<fence>,<ttl ms>,<µs>:<head's token>" (a hand-off: the step
// granted the head the lock; µs is the server's clock then), "<ms>:<head's
// token>" (a new head of a lock held ms more: a timer), or ":<head's
// token>" (re-check). And one more name per prefix: its wire marker,
// "<prefix>wire" (see Wire protocol). No id's key starts like either ('{'
// follows the prefix in every id's key).
//
// Every key expires. The fence key n outlives the id's last grant by 30 to
// 60 minutes, and every lease. So memory per id returns to zero once the
// id has been idle that long: at most an hour after its last grant or
// extend (or the end of that lease, if later), and three waiter TTLs after
// its last waiter's last heartbeat. The wire marker lives 2 minutes after
// the last check of the prefix's last process.
//
// # Fences and the clock
//
// A fence is the server's clock (TIME) in microseconds at the grant,
// raised to the id's last fence + 1 when the clock is not past it. While
// the fence key lives, fences of the id strictly increase even if the
// clock steps back. After it expires, or when it is lost (a restart
// without persistence, FLUSHALL, a failover to a replica that missed the
// last grants), the next fence is the clock of the server that grants it.
// Assumption: that clock reads later than the clock of the server that
// issued the id's previous fence read when it issued it. It holds when the
// servers' clocks are synchronized (NTP) to within the time a restart or
// failover takes, and no clock steps back by more than that (or, while the
// fence key lives, by more than half an hour). If it fails, fences can go
// back by as much as the clock did. Queue tickets are the server's clock
// too, raised past the queue's last ticket: they increase while the queue
// exists.
//
// # Steps and their cost
//
// Each step is one EVALSHA (plus one EVAL the first time a server lacks
// the script, after a restart or SCRIPT FLUSH), counted by the package's
// tests with a go-redis hook:
//
//   - Acquire, Release, Extend, Leave: 1 command each. Uncontended
//     Acquire + Release: 2 commands, also through lock.Locker.
//   - A contended acquisition in steady state: its enqueue and the
//     holder's Release, which grants the lock to the head in the same
//     script (a direct hand-off, backend.HandOffer): 2 commands. The head's
//     process hears the grant on its inbox and returns from Acquire with no
//     command of its own.
//
// Direct hand-off: every script that finds the lock free with a live head
// queued (release, leave, heartbeat, acquire, force release) sets the lock
// to the head's token with the lease TTL of its record (w), takes the next
// fence, removes the head's entry, and sends the grant to the head's inbox;
// the next head is told the new lease's TTL. A head past its deadline is
// purged, not granted. A head whose process died after its last heartbeat
// may be granted: that lease ends at its TTL, and the next head, told that
// TTL, takes the lock then, so it costs the queue that TTL at most. With
// WaitReplicas, HandsOff reports false: the core then takes the grant's
// message as a plain wake-up and runs a step (a retried grant), which waits
// for the replicas before the lease is used.
//   - Heartbeat: 1 command per id (all the waiters of one id share it), all
//     ids pipelined in one round trip.
//   - AcquireBatch: one acquire_many script per chunk of up to 64
//     requests (scripts.MaxAcquireBatch, about 0.65 ms of the server's
//     time each), any ids on one server; on Cluster one per hash slot and
//     chunk. All in one round trip (one per master on Cluster).
//   - LeaveBatch: 1 command per request, one round trip.
//   - Subscribe: the Backend's first one sends one SUBSCRIBE of its inbox
//     on its pub/sub connection and returns once the server confirmed it;
//     every later one is a local registration, with no command. With
//     Options.ShardedPubSub on Cluster: one SSUBSCRIBE per slot's inbox,
//     on the connection to the slot's master, the first time an id of
//     that slot is subscribed. The inbox stays subscribed until Close.
//
// Each step purges at most Options.PurgeLimit expired waiters of its id (by
// the server's TIME); the queue holds at most Options.MaxWaiters waiters.
//
// # Wake-ups
//
// Only the head is woken, and only in its own process: a queued waiter's
// record (key w) names its Backend's inbox, and the scripts PUBLISH the
// wake-up there (SPUBLISH with Options.ShardedPubSub), naming the id and
// the head's token. Eight processes waiting on one id so receive one
// message per hand-off, not eight. A release sends it; so does a leave or
// purge that frees the lock or changes the head while the lock is free, a
// grant that leaves a new head behind it ("<ms>:<token>": the head keeps a
// timer at the holder's TTL), and a heartbeat that finds the lock free
// with a head (the fallback for a lost message). A lease that expires
// publishes nothing; the core re-checks at the holder's TTL, which Acquire
// reports (at least 1 ms while the lock is held). Every waiter's record
// names an inbox; a wake-up the inbox refuses is dropped, as a lost
// message is, and the waiter learns from its next heartbeat.
//
// Each Backend has one pub/sub connection and one inbox, shared by all
// ids: the Backend routes each message to the subscribers of the id it
// names. go-redis pings the connection when quiet (every 30 s), and
// reconnects and re-subscribes when it breaks. Then every subscribed id is
// delivered Wake{ID, All: true}, so that every local waiter re-checks.
//
// # Wire protocol
//
// The keys, the inbox messages and the scripts' arguments are wire
// protocol version 1 (keys.WireVersion, in internal/redis/keys).
// Until the module's v1.0.0 it may change between minor versions, with no
// compatibility for an older version's keys or processes: processes of
// different wire versions must not share a prefix. Before its first step
// (New does no I/O) a Backend runs one script on the prefix's marker,
// "<prefix>wire": absent, it is set to the Backend's version with a TTL of
// 2 minutes; holding that version, its TTL is set again; holding another,
// nothing is written and the step fails unsent, with an error (matched by
// lock.ErrBackend) that says "wire protocol version N found under prefix
// P, this process speaks M: upgrade every process of the prefix together
// or use another prefix". Every later step checks again until the marker
// holds the Backend's version. A Backend checks again before its first
// step 30 s or more after its last check that passed: one round trip more
// per 30 s while it is active, none per acquire. The marker so lives while
// some process of the prefix makes a step at least every 90 s, and no step
// runs while the marker could hold another version. To upgrade, stop every
// process of the prefix and start the new ones once the marker expired
// (2 minutes after their last check, or DEL it), or use a new prefix.
//
// # Redis Cluster
//
// Every step is one script on the id's slot, so a *redis.ClusterClient
// needs nothing more: go-redis sends each step to the slot's master and
// follows MOVED and ASK. It splits a pipeline of AcquireBatch, LeaveBatch or
// Heartbeat into one pipeline per master, sent in parallel. The
// default wake-ups are classic pub/sub, which works on Cluster because
// every node forwards a PUBLISH to every other node: simple, but each
// wake-up costs every node of the cluster.
//
// With Options.ShardedPubSub (Redis 7.0 or newer) the scripts send SPUBLISH,
// which stays on the id's master: a script may only send to a channel of
// its own slot, so the Backend has one inbox per slot (its name carries a
// hash tag of that slot) and subscribes with SSUBSCRIBE there. It keeps
// one pub/sub connection per master that serves an id it waits on, each
// inbox with an SSUBSCRIBE of its own (one SSUBSCRIBE may not span
// slots). The Backend rebuilds a connection that breaks: go-redis's
// own re-subscription sends every channel in one SSUBSCRIBE, which the
// cluster refuses across slots. A channel whose slot moves (the node sends
// "sunsubscribe", or answers MOVED) is subscribed again on its new master
// once the client's slot map has caught up. Every re-confirmation is a
// Wake{ID, All: true} for each subscribed id of the slot. package tests/cluster tests all of it on a local
// cluster of three masters, with slot migrations.
//
// # What Redis can and cannot promise
//
// One Redis server without persistence loses every lock and queue on
// restart; fences go on above every earlier one under the clock assumption
// above. With asynchronous replicas a failover can grant a lock twice (the
// new holder's fence is then above the lost grant's, under the same
// assumption). Fences are exact up to 2^53 (about 285 years of
// microseconds since 1970).
//
// # Replicas, Sentinel and failover
//
// Replication is asynchronous: a master answers a grant before any replica
// has it. The master may die, and Sentinel or Redis Cluster promote a
// replica that never received the grant. The new master then hands the
// lock to someone else while the first holder still holds it (package
// tests/cluster shows it, with a replication link cut on purpose). The id's
// fence key may be lost with it; the new grant's fence is then the
// promoted replica's clock, above the lost grant's fence under the clock
// assumption (see Fences and the clock), so a resource that checks fences
// turns the older holder away.
//
// Options.WaitReplicas narrows this: every grant and every Extend is
// followed, on the connection that ran it, by WAIT n timeout. A grant that
// fewer than n replicas acknowledged in time is released again and fails
// with backend.ErrNotReplicated; an Extend fails and leaves the earlier, confirmed,
// expiry standing. A confirmed grant survives the failover of its master
// to a replica that acknowledged it. It is not consensus. With more
// replicas than n, a failover may promote one that did not acknowledge. A
// replica that restarts without persistence forgets what it acknowledged.
// The promoted replica measures the rest of each lease by its own clock.
// It costs the replicas' round trip on every Acquire (granted or
// not) and Extend, and up to the timeout while replicas lag or are gone.
// Where two holders at once would be a disaster, check the fence at the
// resource as well.
//
// A failover client (redis.NewFailoverClient) is a *redis.Client: it
// finds the master through Sentinel and follows a failover; package
// tests/cluster runs a hand-off and a forced failover through it.
package redisbackend
