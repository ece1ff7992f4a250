package cluster

import (
	"strconv"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// TestShardedSubscriptions: with ShardedPubSub, a Backend subscribes the
// inbox of each slot it waits on, confirmed on the slot's master (an
// SPUBLISH to the inbox right after Subscribe arrives);
// one connection per master holds that master's inboxes; they are
// restored with Wake{All} after every pub/sub connection is killed, kept
// after the last cancel, and gone from every master after Close.
func TestShardedSubscriptions(t *testing.T) {
	for _, sb := range shardedBackends {
		t.Run(sb.name, func(t *testing.T) {
			e := newClusterEnv(t)
			name := uniqueName(t)
			ks := testKeys(t)
			b := sb.make(t, e.c.Addrs(), name, ks.Prefix())
			inbox := b.(interface{ Inbox(id string) string }).Inbox
			byMaster := e.idsPerMaster(3)
			inboxes := map[string]map[string]bool{} // master -> its inboxes
			w := map[string]*adaptertest.Wakes{}
			var cancels []func()
			for _, ids := range byMaster {
				for _, id := range ids {
					w[id] = adaptertest.NewWakes()
					cancel, err := b.Subscribe(ctx, id, w[id].Fn)
					if err != nil {
						t.Fatal(err)
					}
					cancels = append(cancels, cancel)
					if keys.Slot(inbox(id)) != keys.SlotOf(id) {
						t.Fatalf("inbox of %s %q: slot %d, want the id's %d", id, inbox(id), keys.Slot(inbox(id)), keys.SlotOf(id))
					}
					if n := e.raw.SPublish(ctx, inbox(id), adaptertest.InboxMsg(id, ":T-"+id)).Val(); n != 1 {
						t.Fatalf("SPUBLISH to the inbox right after Subscribe(%s) reached %d subscribers, want 1", id, n)
					}
					if x := w[id].Next(t); x != (backend.Wake{ID: id, Token: "T-" + id}) {
						t.Fatalf("wake of %s = %+v", id, x)
					}
				}
			}
			for m, ids := range byMaster {
				inboxes[m] = map[string]bool{}
				for _, id := range ids {
					inboxes[m][inbox(id)] = true
				}
			}
			// One connection per master holds that master's inboxes.
			checkSubs := func(when string) {
				t.Helper()
				for m, lines := range e.clientsNamed(name) {
					var subs []string
					for _, l := range lines {
						if n := field(l, "ssub"); n != "0" && n != "" {
							subs = append(subs, n)
						}
					}
					if want := strconv.Itoa(len(inboxes[m])); len(subs) != 1 || subs[0] != want {
						t.Errorf("%s: master %s: connections with shard channels: %v, want one with %s (its slots' inboxes)", when, m, subs, want)
					}
				}
			}
			checkSubs("after Subscribe")
			// Kill every pub/sub connection: every id re-checks, and
			// messages flow again.
			for _, m := range e.masters {
				if _, err := e.c.Do(ctx, m, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
					t.Fatal(err)
				}
			}
			killed := time.Now()
			for id := range w {
				w[id].NextMatching(t, "Wake{All} of "+id+" after the reconnect", func(x backend.Wake) bool { return x == backend.Wake{ID: id, All: true} })
			}
			t.Logf("every id re-checked %v after the kill", time.Since(killed))
			for id := range w {
				e.raw.SPublish(ctx, inbox(id), adaptertest.InboxMsg(id, ":again"))
				w[id].NextMatching(t, "a wake-up of "+id+" after the reconnect", func(x backend.Wake) bool { return x.Token == "again" })
			}

			for _, c := range cancels {
				c()
			}
			checkSubs("after the last cancel")
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, adaptertest.Deadline, "every inbox is unsubscribed after Close", func() bool {
				for _, lines := range e.clientsNamed(name) {
					for _, l := range lines {
						if n := field(l, "ssub"); n != "0" && n != "" {
							return false
						}
					}
				}
				return true
			})
		})
	}
}
