package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/testkit"
	"github.com/redislocker/lock/rueidisbackend"
)

// TestTrackingOnCluster: a Tracking-mode Backend on a cluster has one
// connection per master, with tracking on, and its steps run on that
// connection (the one whose invalidations it hears), tracking in
// broadcasting mode; a release on any master wakes exactly that id,
// naming the head, through the inbox key of the id's slot on that master;
// a killed connection to one master wakes every waiter with Wake{All}
// once every master answers again.
func TestTrackingOnCluster(t *testing.T) {
	e := newClusterEnv(t)
	name := uniqueName(t)
	ks := testKeys(t)
	newBackend := func(name string) backend.Backend {
		b := rueidisCluster(t, e.c.Addrs(), name, false, rueidisbackend.Options{Prefix: ks.Prefix()})
		if m := rueidisbackend.ModeOf(b); m != rueidisbackend.Tracking {
			t.Fatalf("ModeOf = %v", m)
		}
		return b
	}
	waiter := newBackend(name)
	holder := newBackend(name + "-holder")
	byMaster := e.idsPerMaster(2)
	w := map[string]*adaptertest.Wakes{}
	for _, ids := range byMaster {
		for _, id := range ids {
			w[id] = adaptertest.NewWakes()
			if _, err := waiter.Subscribe(ctx, id, w[id].Fn); err != nil {
				t.Fatal(err)
			}
			r := backend.AcquireRequest{ID: id, Token: "H", TTL: time.Minute}
			if g, err := holder.Acquire(ctx, r); err != nil || !g.Acquired {
				t.Fatalf("holder %s: %+v, %v", id, g, err)
			}
			r = backend.AcquireRequest{ID: id, Token: "W", TTL: time.Minute, Wait: true, WaiterTTL: time.Minute}
			if g, err := waiter.Acquire(ctx, r); err != nil || !g.Queued {
				t.Fatalf("waiter %s: %+v, %v", id, g, err)
			}
		}
	}
	// One connection per master runs the steps, and it tracks: right
	// after a heartbeat of waiters on every master, each master has
	// exactly one connection of the Backend whose last command is the
	// heartbeat's EVALSHA, with tracking on. (Checked until it holds:
	// right after the client starts, rueidis may still close a spare
	// connection of its start, and the Backend PINGs every master once for
	// it.)
	var all []backend.Waiter
	for _, list := range byMaster {
		for _, id := range list {
			all = append(all, backend.Waiter{ID: id, Token: "W"})
		}
	}
	ids := map[string]string{} // master -> client id of the waiter's connection
	var lone string            // a master to which the Backend has that connection only
	testkit.Until(t, adaptertest.Deadline, func() string {
		lone = ""
		if _, err := waiter.Heartbeat(ctx, all, time.Minute); err != nil {
			t.Fatal(err)
		}
		clients := e.clientsNamed(name)
		for _, m := range e.masters {
			// The steps run on one connection per master, and it tracks.
			// rueidis may keep a second, idle connection to the node it
			// started from (its last command is a keep-alive PING): it
			// runs no step, so it tracks nothing.
			var steps []string
			for _, line := range clients[m] {
				switch cmd := field(line, "cmd"); cmd {
				case "evalsha", "fcall", "lpop": // the steps, the drain of an inbox key
					steps = append(steps, line)
				case "ping", "cluster", "hello", "client":
				default:
					return fmt.Sprintf("master %s: a connection of the Backend ran %q, want only the steps' evalsha or fcall or an idle PING:\n%s",
						m, cmd, strings.Join(clients[m], "\n"))
				}
			}
			switch {
			case len(steps) != 1:
				return fmt.Sprintf("master %s: %d connections of the Backend ran steps, want 1:\n%s", m, len(steps), strings.Join(clients[m], "\n"))
			case !strings.Contains(field(steps[0], "flags"), "t") || !strings.Contains(field(steps[0], "flags"), "B"):
				return fmt.Sprintf("master %s: connection flags %q lack t and B (tracking, broadcasting)", m, field(steps[0], "flags"))
			}
			ids[m] = field(steps[0], "id")
			if len(clients[m]) == 1 && lone == "" {
				lone = m
			}
		}
		if lone == "" {
			return "every master still has a spare connection of the Backend besides the steps' one"
		}
		return ""
	})
	// A release on each master hands off exactly its id. (rueidis reports
	// the close of any tracking connection as "invalidate everything",
	// also of one it closes itself: seen right after a cluster client
	// starts. Each is a Wake{All}, a spare re-check; those are not
	// counted here.)
	for _, m := range e.masters {
		id := byMaster[m][0]
		if err := holder.Release(ctx, id, "H"); err != nil {
			t.Fatal(err)
		}
		w[id].NextMatching(t, "the grant by hand-off of "+id+" after its release", func(x backend.Wake) bool { return adaptertest.IsGrant(x, id, "W") })
		for other := range w {
			for _, x := range w[other].Drain() {
				if other != id && !x.All {
					t.Fatalf("releasing %s woke %s: %+v", id, other, x)
				}
			}
		}
	}
	// Kill the waiter's only connection to one master: every id
	// re-checks. (A spare connection to the same node that tracked all
	// along would have heard every write: then no Wake{All} is due.)
	m := lone
	if _, err := e.c.Do(ctx, m, "CLIENT", "KILL", "ID", ids[m]); err != nil {
		t.Fatal(err)
	}
	for id := range w {
		w[id].NextMatching(t, "Wake{All} of "+id+" after the lost connection", func(x backend.Wake) bool { return x == backend.Wake{ID: id, All: true} })
	}
	for _, ids := range byMaster {
		for _, id := range ids {
			_ = waiter.Leave(ctx, id, "W")
			_ = holder.Release(ctx, id, "H")
		}
	}
}
