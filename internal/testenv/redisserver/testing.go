package redisserver

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// HoldExclusive takes the machine-wide lock of [Exclusive] for the rest of
// the process's life (the kernel releases it at exit). A TestMain that does
// not use Main calls it first.
func HoldExclusive() {
	release, err := Exclusive()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redisserver: running without the machine-wide lock:", err)
		return
	}
	held = release
}

// held is the release of the lock HoldExclusive took, which Main calls
// at its end. Kept here, the lock's file stays reachable: it would
// otherwise be closed, and the lock dropped mid-run, when the garbage
// collector finalizes it.
var held func()

// PrefixRoot begins every prefix of [Prefix]: an ACL user of the tests'
// servers may be limited to the keys and channels that begin with it.
const PrefixRoot = "test:"

// Parallel sets -test.parallel to n unless the command line gives it: a
// TestMain calls it before m.Run (or Main). The default, the number of
// CPUs, would hold the parallel tests of a package to two at a time on a
// 2-core machine, while the Redis adapters' packages have up to four
// conformance runs that mostly wait on timers (about 4 s of the test
// process's CPU in a 30 s run under -race): two rounds of them instead of
// one.
func Parallel(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			fmt.Fprintln(os.Stderr, "redisserver: -test.parallel:", err)
		}
	}
}

// Prefix returns a key prefix unique to this call, so that tests on a shared
// server never see each other's keys. It begins with PrefixRoot.
func Prefix(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := strings.NewReplacer("{", "(", "}", ")", " ", "_").Replace(t.Name())
	return PrefixRoot + name + ":" + hex.EncodeToString(b[:]) + ":"
}

// StartT starts a private redis-server of options o for t (Dir defaults
// to t.TempDir()) and closes it at t's cleanup. Use it for tests that must
// own the server (to flush its scripts, kill, restart or pause it);
// everything else should share SharedAddr. A missing binary skips t, or
// fails it when CI is set ([Fail]).
func StartT(t testing.TB, o Options) *Server {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	s, err := Start(o)
	if err != nil {
		Fail(t, err)
	}
	t.Cleanup(s.Close)
	return s
}

// Fail ends t for err, an error of starting servers: with [Unavailable]
// when a binary is missing ([ErrNoBinary]), else with Fatal.
func Fail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoBinary) {
		Unavailable(t, err)
	}
	t.Fatal(err)
}

// Unavailable skips t for want of a server, or fails it when the CI
// variable is set, with err as the reason.
func Unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("no Redis server (CI is set, so this fails instead of skipping): %v", err)
	}
	t.Skipf("no Redis server, skipping (set REDIS_ADDR, or install redis-server or set REDIS_SERVER): %v", err)
}

// CommandStat returns field ("calls", "usec", ...) of command cmd in info,
// the text of INFO commandstats: 0 when the server has not run cmd. A
// value that is no number fails tb.
func CommandStat(tb testing.TB, info, cmd, field string) int64 {
	tb.Helper()
	for _, line := range strings.Split(info, "\n") {
		stats, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(f, field+"="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					tb.Fatalf("commandstats %q: %v", line, err)
				}
				return n
			}
		}
	}
	return 0
}
