// Package engine is the one Redis lock protocol under both Redis adapters
// (redisbackend on go-redis, rueidisbackend on rueidis), without their
// I/O. An adapter's step reads as one short chain: the adapter's method
// asks the [Engine] for the step's call (XCall: the script of package
// scripts, its KEYS and ARGV), sends it with its own client through a
// [Runner], and hands the reply to the Engine to parse (XReply).
//
// The Engine is built from a [Config]: values the adapter derives from its
// options with [ParsePrefix], [ParseLimits] and [ParseWait], which check
// them. It holds the scripts' constant arguments, formatted once, and
// where the Backend's wake-ups go. AcquireBatch builds one acquire_many
// call per chunk of requests (per hash slot on Redis Cluster).
//
// The Runner is what both adapters' sending shares; the adapter builds it
// with its client's [Sender] (and, for Config.Wait, [Replicas]). It checks
// the prefix's wire protocol version before the steps, sends a call with
// FCALL once it loaded the scripts' function library (a Sender that is a
// [Loader]), else with EVALSHA (EVALSHA also after a refused FCALL, EVAL
// after a NOSCRIPT reply), resends what Redis Cluster
// refused for now, sends a step once more after a broken round trip when
// the client never does, runs the WAIT of calls that ask for it, and
// classifies a failed round trip with the Sender's Classify.
package engine
