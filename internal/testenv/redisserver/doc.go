// Package redisserver is the one launcher of redis-server processes for
// the tests of this module and for the benchmark tool: a server on a free
// loopback port in a directory of its own, without persistence, that can
// be killed, shut down, restarted on the same port, paused (SIGSTOP) and
// resumed. The cluster and Sentinel tests (tests/cluster), the fault
// tests (tests/fault), the shared test server (internal/testenv/redistest)
// and the benchmark tool (benchmarks/, a nested module) start their
// processes here.
//
// The binary is the one the REDIS_SERVER variable names, or redis-server
// from PATH. On Linux every server dies with the process that started it,
// so a crashed test binary leaves no server behind.
//
// [Start] returns [ErrNoBinary] when no redis-server can be found; the
// tests' helper (redistest.Fail) then skips, or fails when the CI
// variable is set, so that CI never passes by skipping. [Exclusive] is
// the machine-wide lock that test binaries
// starting redis-servers hold for their whole run, so that they run one
// at a time whatever go test's -p is.
package redisserver
