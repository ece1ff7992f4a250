// Package redisbackend is the go-redis v9 adapter of the lock package: a
// [backend.Backend] on one Redis deployment (a single server, Sentinel
// through a failover client, or Cluster), built from the Lua scripts of
// internal/scripts, which the rueidis adapter shares. It needs Redis 5 or
// newer.
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	b, err := redisbackend.New(client, nil) // prefix "lock:"
//	...
//	locker := lock.New(b, nil)
//	defer locker.Close() // closes b; close client after it
//
// # Keys
//
// Every key of an id shares one hash tag, so each step is one script on one
// slot (Redis Cluster works): "<prefix>{<enc(id)>}:<suffix>". enc escapes
// '%', '{' and '}' as %25, %7B, %7D (see internal/keys). The prefix, by
// default "lock:", may contain neither brace.
//
//	suffix  type    holds                                      TTL
//	lock    string  the holder's token                         the lease (SET PX / PEXPIRE, relative)
//	q       zset    waiter token -> ticket (queue order)       >= 3 x the longest WaiterTTL, set by enqueue and heartbeat
//	dl      zset    waiter token -> deadline (ms, server TIME)  same as q
//	n       hash    "fence", "ticket"; "rel": the last          none: the documented counters
//	                release's token (a resent release is
//	                answered as the first one was)
//	wake    -       pub/sub channel; payload: ":<head's token>"  -
//	                (re-check), or "<ms>:<head's token>" (a new
//	                head of a lock held ms more: a timer)
//
// The counters hash is the one key an id keeps for good: fences and tickets
// must never go backwards. Everything else expires: the lock with its lease,
// the queue sets at the latest three waiter TTLs after their last enqueue
// or heartbeat, and a set that empties is gone at once.
//
// # Steps and their cost
//
// Each step is one EVALSHA (plus one EVAL the first time a server lacks
// the script, after a restart or SCRIPT FLUSH), counted by the package's
// tests with a go-redis hook:
//
//   - Acquire, Release, Extend, Leave: 1 command each. Uncontended
//     Acquire + Release: 2 commands, also through lock.Locker.
//   - A contended acquisition in steady state: its enqueue, the holder's
//     Release and its grant: 3 commands.
//   - Heartbeat: 1 command per id (all the waiters of one id share it), all
//     ids pipelined in one round trip.
//   - AcquireBatch, LeaveBatch: 1 command per request, one round trip.
//   - Subscribe: nothing when this Backend already subscribes to the id,
//     else one SUBSCRIBE (SSUBSCRIBE with Options.ShardedPubSub) on the
//     shared pub/sub connection (on Cluster with ShardedPubSub, the
//     connection to the id's master); it returns once the server has
//     confirmed it.
//
// Each step purges at most Options.PurgeLimit expired waiters of its id (by
// the server's TIME); the queue holds at most Options.MaxWaiters waiters.
//
// # Wake-ups
//
// Only the head is woken: a PUBLISH on the id's channel with the head's
// token. A release sends it; so does a leave or purge that frees the lock
// or changes the head while the lock is free, and a heartbeat that finds
// the lock free with a head (the fallback for a lost message). A lease that
// expires publishes nothing; the core re-checks at the holder's TTL, which
// Acquire reports (at least 1 ms while the lock is held).
//
// Each Backend has one pub/sub connection, shared by all ids and
// reference-counted per id. go-redis pings it when quiet (every 30 s), and
// reconnects and re-subscribes when it breaks. Each re-confirmed channel is
// delivered as Wake{ID, All: true}, so that every local waiter re-checks.
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
// which stays on the id's master, and the Backend subscribes with SSUBSCRIBE
// there. It keeps one pub/sub connection per master that serves an id it
// waits on, each channel with an SSUBSCRIBE of its own (one SSUBSCRIBE may
// not span slots). The Backend rebuilds a connection that breaks: go-redis's
// own re-subscription sends every channel in one SSUBSCRIBE, which the
// cluster refuses across slots. A channel whose slot moves (the node sends
// "sunsubscribe", or answers MOVED) is subscribed again on its new master
// once the client's slot map has caught up. Every re-confirmation is a
// Wake{ID, All: true}. Package clustertest tests all of it on a local
// cluster of three masters, with slot migrations.
//
// # What Redis can and cannot promise
//
// One Redis server without persistence loses every lock, queue and fence
// counter on restart; with asynchronous replicas a failover can grant a lock
// twice and move fences backwards. Fences and tickets are exact up to 2^53.
//
// # Replicas, Sentinel and failover
//
// Replication is asynchronous: a master answers a grant before any replica
// has it. The master may die, and Sentinel or Redis Cluster promote a
// replica that never received the grant. The new master then hands the
// lock to someone else while the first holder still holds it. The fence
// counter's last increments are lost with it, so a fence can repeat
// (package clustertest shows both, with a replication link cut on purpose).
//
// Options.WaitReplicas narrows this: every grant and every Extend is
// followed, on the connection that ran it, by WAIT n timeout. A grant that
// fewer than n replicas acknowledged in time is released again and fails
// with ErrNotReplicated; an Extend fails and leaves the earlier, confirmed,
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
// clustertest runs a hand-off and a forced failover through it.
package redisbackend
