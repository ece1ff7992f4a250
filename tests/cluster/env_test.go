package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/harness"
	"github.com/redislocker/lock/redisbackend"
	"github.com/redislocker/lock/rueidisbackend"
)

// testKeys returns a keyspace under a prefix unique to the test.
func testKeys(t testing.TB) keys.Keyspace {
	t.Helper()
	ks, err := keys.New(prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// sharedCluster is the shared cluster, as a harness's target.
func sharedCluster(t *testing.T) harness.Target {
	return harness.Cluster(Shared(t).Addrs())
}

// clusterEnv is one test's view of the shared cluster: a raw cluster
// client and the slot owners.
type clusterEnv struct {
	t       *testing.T
	c       *Cluster
	raw     *redis.ClusterClient
	masters []string
	owner   map[int]string // slot -> master address
}

func newClusterEnv(t *testing.T) *clusterEnv {
	t.Helper()
	c := Shared(t)
	raw := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { raw.Close() })
	e := &clusterEnv{t: t, c: c, raw: raw}
	e.refresh()
	return e
}

// refresh reads the slot owners again.
func (e *clusterEnv) refresh() {
	e.t.Helper()
	nodes, err := e.c.Topology(ctx, "")
	if err != nil {
		e.t.Fatal(err)
	}
	e.owner = map[int]string{}
	e.masters = nil
	for _, n := range nodes {
		if !n.Master() || len(n.Slots) == 0 {
			continue
		}
		e.masters = append(e.masters, n.Addr)
		for _, r := range n.Slots {
			for s := r[0]; s <= r[1]; s++ {
				e.owner[s] = n.Addr
			}
		}
	}
}

// idsPerMaster returns perMaster ids for each master: ids[master] lists
// ids whose slot that master serves.
func (e *clusterEnv) idsPerMaster(perMaster int) map[string][]string {
	out := map[string][]string{}
	for i := 0; ; i++ {
		done := true
		for _, m := range e.masters {
			if len(out[m]) < perMaster {
				done = false
			}
		}
		if done {
			return out
		}
		id := fmt.Sprint("id-", i)
		m := e.owner[keys.SlotOf(id)]
		if len(out[m]) < perMaster {
			out[m] = append(out[m], id)
		}
	}
}

// clientsNamed returns, per master, the CLIENT LIST lines of the
// connections named name.
func (e *clusterEnv) clientsNamed(name string) map[string][]string {
	e.t.Helper()
	out := map[string][]string{}
	for _, m := range e.masters {
		list, err := e.c.Do(ctx, m, "CLIENT", "LIST")
		if err != nil {
			e.t.Fatal(err)
		}
		for _, l := range strings.Split(list.(string), "\n") {
			if strings.Contains(l, " name="+name+" ") {
				out[m] = append(out[m], l)
			}
		}
	}
	return out
}

// field returns the value of key in a CLIENT LIST line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// uniqueName returns a client name no other test's connections carry.
func uniqueName(t *testing.T) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "clustertest-" + hex.EncodeToString(b[:])
}

// goRedisCluster returns a redisbackend on a cluster client of its own
// whose connections carry name (none when empty), closed at the test's end.
func goRedisCluster(t *testing.T, addrs []string, name string, o redisbackend.Options) backend.Backend {
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ClientName: name})
	return harness.GoRedisBackend(t, client, &o)
}

// rueidisCluster returns a rueidisbackend on the cluster whose connections
// carry name (none when empty), in Tracking mode unless noCache, closed at
// the test's end.
func rueidisCluster(t *testing.T, addrs []string, name string, noCache bool, o rueidisbackend.Options) backend.Backend {
	o.ClientOption = rueidis.ClientOption{InitAddress: addrs, ClientName: name, DisableCache: noCache}
	return harness.RueidisBackend(t, &o)
}

// shardedBackends are the two sharded listeners: redisbackend on a cluster
// client, rueidisbackend in PubSub mode. Each returns a Backend whose
// connections carry name, under prefix.
var shardedBackends = []struct {
	name string
	make func(t *testing.T, addrs []string, name, prefix string) backend.Backend
}{
	{"go-redis", func(t *testing.T, addrs []string, name, prefix string) backend.Backend {
		return goRedisCluster(t, addrs, name, redisbackend.Options{Prefix: prefix, ShardedPubSub: true})
	}},
	{"rueidis", func(t *testing.T, addrs []string, name, prefix string) backend.Backend {
		return rueidisCluster(t, addrs, name, true, rueidisbackend.Options{Prefix: prefix, ShardedPubSub: true})
	}},
}

// adapters are the ways a process reaches the cluster in the migration
// test: each returns a new Backend (a separate "process") on the cluster.
var adapters = []struct {
	name string
	make func(t *testing.T, addrs []string, prefix string) backend.Backend
}{
	{"go-redis", func(t *testing.T, addrs []string, prefix string) backend.Backend {
		return goRedisCluster(t, addrs, "", redisbackend.Options{Prefix: prefix})
	}},
	{"go-redis-sharded", func(t *testing.T, addrs []string, prefix string) backend.Backend {
		return goRedisCluster(t, addrs, "", redisbackend.Options{Prefix: prefix, ShardedPubSub: true})
	}},
	{"rueidis-tracking", func(t *testing.T, addrs []string, prefix string) backend.Backend {
		return rueidisCluster(t, addrs, "", false, rueidisbackend.Options{Prefix: prefix})
	}},
	{"rueidis-pubsub-sharded", func(t *testing.T, addrs []string, prefix string) backend.Backend {
		return rueidisCluster(t, addrs, "", true, rueidisbackend.Options{Prefix: prefix, ShardedPubSub: true})
	}},
}

// idsInOneSlot returns n ids whose keys share one slot.
func idsInOneSlot(base string, n int) []string {
	ids := []string{base + "-0"}
	slot := keys.SlotOf(ids[0])
	for i := 1; len(ids) < n; i++ {
		if id := fmt.Sprint(base, "-", i); keys.SlotOf(id) == slot {
			ids = append(ids, id)
		}
	}
	return ids
}
