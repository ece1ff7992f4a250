// Package redisbackend is the go-redis v9 adapter of the lock package: a
// [backend.Backend] on one Redis deployment (a single server, Sentinel or
// Cluster: anything a redis.UniversalClient talks to), built from the Lua
// scripts of internal/scripts, which the rueidis adapter shares.
//
// # Keys
//
// Every key of an id shares one hash tag, so each step is one script on one
// slot (Redis Cluster works): "<prefix>{<enc(id)>}:<suffix>", where enc
// escapes '%', '{' and '}' (see internal/keys) and the prefix, by default
// "lock:", may contain neither brace.
//
//	suffix  type    holds                                     TTL
//	lock    string  the holder's token                        the lease (PX, relative)
//	q       zset    waiter token -> ticket (queue order)      3 x the longest WaiterTTL, refreshed by enqueue and heartbeat
//	dl      zset    waiter token -> deadline (ms, server TIME) same as q
//	n       hash    "fence", "ticket" counters                none: a documented counter
//	wake    -       pub/sub channel; payload: the head's token
//
// The counters hash is the only key an id keeps for good: fences and
// tickets must never go backwards. Everything else expires: the lock with
// its lease, the queue sets once every waiter's deadline is far past, and
// empty sets vanish at once.
//
// # Steps and their cost
//
// Each step is one EVALSHA (an EVAL as well the first time a server does not
// know the script, after a restart or SCRIPT FLUSH):
//
//   - Acquire: 1 command. Uncontended Acquire + Release: 2 commands.
//   - Release, Extend, Leave: 1 command each.
//   - Heartbeat: 1 command per id, all ids in one pipelined round trip.
//   - AcquireBatch, LeaveBatch: 1 command per request, in one round trip.
//   - Subscribe: no command when this backend already subscribes to the id,
//     else one SUBSCRIBE on the shared pub/sub connection (not counted by the
//     client's hooks), and it waits for the server's confirmation.
//
// # Wake-ups
//
// A release, a leave or a purge that frees the lock or changes the head
// while the lock is free PUBLISHes the head's token on the id's channel, and
// so does a heartbeat that finds the lock free with a head (the fallback for
// a lost message). Each Backend has one pub/sub connection, shared and
// reference-counted per id. When go-redis reconnects it re-subscribes; every
// re-confirmed channel is delivered as Wake{ID, All: true} so that every
// local waiter re-checks. go-redis pings an idle pub/sub connection every few
// seconds to notice a dead connection.
//
// # What Redis can and cannot promise
//
// One Redis server without persistence loses every lock (and the fence
// counters) on restart; with asynchronous replicas a failover can grant a
// lock twice and move fences backwards. Fences are exact up to 2^53.
package redisbackend
