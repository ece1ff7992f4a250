// Package redisserver gives the tests of this module, and the benchmark
// tool, their Redis servers.
//
// It is the one launcher of redis-server processes ([Start]): a server on
// a free loopback port in a directory of its own, without persistence, that
// can be killed, shut down, restarted on the same port, paused (SIGSTOP)
// and resumed. The cluster and Sentinel helpers of the cluster tests start
// their processes here. The binary is the one the REDIS_SERVER variable
// names, or redis-server from PATH. On Linux every server dies with the
// process that started it, so a crashed test binary leaves no server
// behind.
//
// For tests: [SharedAddr] is the server one test binary shares (the one
// REDIS_ADDR names, or one it starts), with [Prefix] giving each test keys
// of its own; [SharedTLS] is the binary's shared server that speaks TLS
// only ([Options.TLS], with a CA of its own that [WriteCA] writes);
// [StartT] starts a test's private server. They skip a test when no
// redis-server can be found, or fail it when the CI variable is
// set, so that CI never passes by skipping. [Exclusive] is the
// machine-wide lock that test binaries starting redis-servers hold for
// their whole run ([Main] takes it), so that they run one at a time
// whatever go test's -p is. [Miniredis] is an in-process imitation of
// Redis whose key TTLs follow the wall clock.
package redisserver
