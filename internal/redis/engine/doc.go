// Package engine is the one Redis step layer under both Redis adapters
// (redisbackend on go-redis, rueidisbackend on rueidis). It validates the
// options they share and builds each step from the scripts of package
// scripts, with the constant arguments formatted once per Backend
// (scripts.Consts; [Config.WithTracking] for a client-side-caching
// connection). AcquireBatch sends one acquire_many script per chunk of
// requests (per hash slot on Redis Cluster). It sends a step with EVALSHA
// (EVAL after a NOSCRIPT reply), parses the replies and classifies errors.
// It resends what Redis Cluster refused for now, and runs the WAIT of
// Options.WaitReplicas.
//
// An adapter supplies only a [Client]: run scripts in one round trip,
// classify a client error, tell whether it talks to a cluster, and (for
// WaitReplicas) [Replicas]: find a key's master and run scripts followed
// by WAIT on its connection. It embeds [Steps] for the backend steps and
// adds its own wake-ups (Subscribe) and Close.
package engine
