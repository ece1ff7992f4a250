package adaptertest

import (
	"strings"
	"sync"
	"testing"

	"github.com/redislocker/lock/internal/redis/scripts"
)

// Log records the commands a client sends, one entry per round trip. The
// adapter's test hook calls Note with the names [Name] gives.
type Log struct {
	mu    sync.Mutex
	trips [][]string
}

// Note records one round trip of the named commands; an empty one is not
// recorded.
func (l *Log) Note(trip ...string) {
	if len(trip) == 0 {
		return
	}
	l.mu.Lock()
	l.trips = append(l.trips, trip)
	l.mu.Unlock()
}

// TakeTrips returns the round trips since the last take.
func (l *Log) TakeTrips() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.trips
	l.trips = nil
	return t
}

// Count returns how many commands named name l saw since the last take,
// without taking them.
func (l *Log) Count(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, trip := range l.trips {
		for _, c := range trip {
			if c == name {
				n++
			}
		}
	}
	return n
}

// Take returns the commands and round trips since the last take, and the
// commands' names.
func (l *Log) Take() (cmds, trips int, names string) {
	t := l.TakeTrips()
	var all []string
	for _, trip := range t {
		all = append(all, trip...)
	}
	return len(all), len(t), strings.Join(all, " ")
}

// ExpectCost fails unless l saw exactly cmds commands in trips round trips
// since the last take.
func ExpectCost(t testing.TB, l *Log, what string, cmds, trips int) {
	t.Helper()
	gotCmds, gotTrips, names := l.Take()
	t.Logf("%s: %d commands in %d round trips (%s)", what, gotCmds, gotTrips, names)
	if gotCmds != cmds || gotTrips != trips {
		t.Fatalf("%s cost %d commands in %d round trips (%s), want %d in %d", what, gotCmds, gotTrips, names, cmds, trips)
	}
}

var scriptNames = func() map[string]string {
	m := map[string]string{}
	for _, s := range scripts.All() {
		m[s.SHA1] = s.Name
		m[s.Source] = s.Name
		m[s.Function] = s.Name
	}
	return m
}()

// Name names a command for a [Log] from its name and first argument: an
// EVALSHA or FCALL by its script ("acquire"), an EVAL by "eval:" and its
// script (the NOSCRIPT fallback), anything else by its lower-case name.
func Name(cmd, arg string) string {
	cmd = strings.ToLower(cmd)
	if s, ok := scriptNames[arg]; ok {
		switch cmd {
		case "evalsha", "fcall":
			return s
		case "eval":
			return "eval:" + s
		}
	}
	return cmd
}
