package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/faultproxy"
	"github.com/redislocker/lock/internal/testenv/harness"
	"github.com/redislocker/lock/internal/testenv/testkit"
	"github.com/redislocker/lock/redisbackend"
	"github.com/redislocker/lock/rueidisbackend"
)

// waitAdapter makes Backends with the WAIT option (WaitReplicas) on a
// deployment given by its addresses, and names the adapter's
// ErrNotReplicated.
type waitAdapter struct {
	name          string
	notReplicated error
	// single makes a Backend on a master (or, with sentinels, the master
	// set MasterName they monitor).
	single func(t *testing.T, master string, sentinels []string, prefix string, replicas int) backend.Backend
	// cluster makes a Backend on a cluster.
	cluster func(t *testing.T, addrs []string, prefix string, replicas int) backend.Backend
}

var waitAdapters = []waitAdapter{
	{
		name:          "go-redis",
		notReplicated: backend.ErrNotReplicated,
		single: func(t *testing.T, master string, sentinels []string, prefix string, replicas int) backend.Backend {
			var client *redis.Client
			if len(sentinels) > 0 {
				client = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: sentinels})
			} else {
				client = redis.NewClient(&redis.Options{Addr: master})
			}
			return harness.GoRedisBackend(t, client, &redisbackend.Options{Prefix: prefix, WaitReplicas: replicas})
		},
		cluster: func(t *testing.T, addrs []string, prefix string, replicas int) backend.Backend {
			return goRedisCluster(t, addrs, "", redisbackend.Options{Prefix: prefix, WaitReplicas: replicas})
		},
	},
	{
		name:          "rueidis",
		notReplicated: backend.ErrNotReplicated,
		single: func(t *testing.T, master string, sentinels []string, prefix string, replicas int) backend.Backend {
			co := rueidis.ClientOption{InitAddress: []string{master}, ForceSingleClient: true}
			if len(sentinels) > 0 {
				co = rueidis.ClientOption{InitAddress: sentinels, Sentinel: rueidis.SentinelOption{MasterSet: MasterName}}
			}
			return harness.RueidisBackend(t, &rueidisbackend.Options{ClientOption: co, Prefix: prefix, WaitReplicas: replicas})
		},
		cluster: func(t *testing.T, addrs []string, prefix string, replicas int) backend.Backend {
			return rueidisCluster(t, addrs, "", false, rueidisbackend.Options{Prefix: prefix, WaitReplicas: replicas})
		},
	},
}

// nodeGet reads key on the node at addr; readonly sends READONLY first
// (a cluster replica answers reads only after it).
func nodeGet(t *testing.T, addr, key string, readonly bool) string {
	t.Helper()
	o := &redis.Options{Addr: addr, PoolSize: 1}
	if readonly {
		o.OnConnect = func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }
	}
	c := redis.NewClient(o)
	defer c.Close()
	v, err := c.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatalf("GET %s on %s: %v", key, addr, err)
	}
	return v
}

func req(id, token string) backend.AcquireRequest {
	return backend.AcquireRequest{ID: id, Token: token, TTL: time.Minute}
}

// TestWaitReplicas: with WaitReplicas 1 on a master with one replica, a
// grant returns only once the replica has it (it is there right after);
// with the replica paused, Acquire, AcquireBatch and Extend fail with the
// adapter's ErrNotReplicated (also through a Locker, matching
// lock.ErrBackend) and a failed grant is released again; WaitReplicas 2
// with one replica never confirms.
func TestWaitReplicas(t *testing.T) {
	r := StartReplicated(t, ReplicatedOptions{Replicas: 1})
	replica := r.Replicas[0]
	for _, a := range waitAdapters {
		t.Run(a.name, func(t *testing.T) {
			ks := testKeys(t)
			b := a.single(t, r.Master.Addr, nil, ks.Prefix(), 1)
			g, err := b.Acquire(ctx, req("a", "A"))
			if err != nil || !g.Acquired {
				t.Fatalf("Acquire with the replica up: %+v, %v", g, err)
			}
			if v, _, _ := keys.ParseLock(nodeGet(t, replica.Addr, ks.For("a").Lock, false)); v != "A" {
				t.Fatalf("right after a confirmed grant the replica holds %q, want the token", v)
			}
			if err := b.Extend(ctx, "a", "A", time.Minute); err != nil {
				t.Fatalf("Extend with the replica up: %v", err)
			}
			if err := replica.Pause(); err != nil {
				t.Fatal(err)
			}
			paused := true
			resume := func() {
				if paused {
					paused = false
					if err := replica.Resume(); err != nil {
						t.Fatal(err)
					}
				}
			}
			defer resume()
			if g, err := b.Acquire(ctx, req("b", "B")); !errors.Is(err, a.notReplicated) {
				t.Fatalf("Acquire with the replica paused: %+v, %v; want ErrNotReplicated", g, err)
			}
			if v := nodeGet(t, r.Master.Addr, ks.For("b").Lock, false); v != "" {
				t.Fatalf("an unconfirmed grant was left held on the master: %q", v)
			}
			if err := b.Extend(ctx, "a", "A", time.Minute); !errors.Is(err, a.notReplicated) {
				t.Fatalf("Extend with the replica paused: %v; want ErrNotReplicated", err)
			}
			if _, ok := b.(backend.ExtendBatcher); !ok {
				t.Fatalf("%T is not a backend.ExtendBatcher", b)
			}
			errs, err := fallback.ExtendBatch(ctx, b, []backend.ExtendRequest{{ID: "a", Token: "A", TTL: time.Minute}, {ID: "a", Token: "X", TTL: time.Minute}})
			if err != nil || len(errs) != 2 || !errors.Is(errs[0], a.notReplicated) || !errors.Is(errs[1], backend.ErrNotHeld) {
				t.Fatalf("ExtendBatch with the replica paused: %v, %v; want [ErrNotReplicated ErrNotHeld]", errs, err)
			}
			res, err := fallback.AcquireBatch(ctx, b, []backend.AcquireRequest{req("c", "C"), req("a", "X")})
			if err != nil {
				t.Fatal(err)
			}
			if !errors.Is(res[0].Err, a.notReplicated) {
				t.Fatalf("AcquireBatch's grant with the replica paused: %+v; want ErrNotReplicated", res[0])
			}
			if res[1].Err != nil || res[1].Acquired {
				t.Fatalf("AcquireBatch's request of a held id: %+v; want not acquired, no error", res[1])
			}
			if v := nodeGet(t, r.Master.Addr, ks.For("c").Lock, false); v != "" {
				t.Fatalf("an unconfirmed batch grant was left held: %q", v)
			}
			l, err := lock.New(a.single(t, r.Master.Addr, nil, ks.Prefix(), 1), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			lres, err := l.TryAcquire(ctx, "d", time.Minute)
			if !errors.Is(err, a.notReplicated) || !errors.Is(err, lock.ErrBackend) || lres.Acquired {
				t.Fatalf("Locker.TryAcquire with the replica paused: %+v, %v; want an error matching ErrNotReplicated and lock.ErrBackend", lres, err)
			}
			resume()
			if err := r.WaitSynced(ctx); err != nil {
				t.Fatal(err)
			}
			lres, err = l.TryAcquire(ctx, "d", time.Minute)
			if err != nil || !lres.Acquired {
				t.Fatalf("Locker.TryAcquire with the replica back: %+v, %v", lres, err)
			}
			if err := lres.Lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			two := a.single(t, r.Master.Addr, nil, ks.Prefix(), 2)
			if g, err := two.Acquire(ctx, req("e", "E")); !errors.Is(err, a.notReplicated) {
				t.Fatalf("WaitReplicas 2 with one replica: %+v, %v; want ErrNotReplicated", g, err)
			}
			if err := b.Release(ctx, "a", "A"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWaitReplicasOnCluster: on the cluster (one replica per master), a
// batch of grants on every master is confirmed per master, each grant on
// its master's replica right after; with one replica paused, the grants on
// its master fail with ErrNotReplicated and are released, the others
// stand.
func TestWaitReplicasOnCluster(t *testing.T) {
	e := newClusterEnv(t)
	e.c.RequireOwned(t)
	byMaster := e.idsPerMaster(2)
	for _, a := range waitAdapters {
		t.Run(a.name, func(t *testing.T) {
			ks := testKeys(t)
			b := a.cluster(t, e.c.Addrs(), ks.Prefix(), 1)
			var reqs []backend.AcquireRequest
			master := map[string]string{} // id -> master
			for m, ids := range byMaster {
				for _, id := range ids {
					reqs = append(reqs, req(id, "T"))
					master[id] = m
				}
			}
			res, err := fallback.AcquireBatch(ctx, b, reqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				id := reqs[i].ID
				if r.Err != nil || !r.Acquired {
					t.Fatalf("%s: %+v", id, r)
				}
				reps, err := e.c.ReplicasOf(ctx, master[id])
				if err != nil || len(reps) != 1 {
					t.Fatalf("replicas of %s: %v, %v", master[id], reps, err)
				}
				if v, _, _ := keys.ParseLock(nodeGet(t, reps[0], ks.For(id).Lock, true)); v != "T" {
					t.Fatalf("%s: right after a confirmed grant its master's replica holds %q", id, v)
				}
				if err := b.Release(ctx, id, "T"); err != nil {
					t.Fatal(err)
				}
			}
			// Pause the replica of one master, briefly (well below the
			// cluster's node timeout, so no failover starts).
			m := e.masters[0]
			reps, _ := e.c.ReplicasOf(ctx, m)
			var paused *Node
			for _, n := range e.c.Nodes {
				if n.Addr == reps[0] {
					paused = n
				}
			}
			if err := paused.Pause(); err != nil {
				t.Fatal(err)
			}
			res, err = fallback.AcquireBatch(ctx, b, reqs)
			if rerr := paused.Resume(); rerr != nil {
				t.Fatal(rerr)
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				id := reqs[i].ID
				if master[id] == m {
					if !errors.Is(r.Err, a.notReplicated) {
						t.Errorf("%s on the master whose replica was paused: %+v; want ErrNotReplicated", id, r)
					}
					if v := nodeGet(t, m, ks.For(id).Lock, false); v != "" {
						t.Errorf("%s: an unconfirmed grant was left held", id)
					}
					continue
				}
				if r.Err != nil || !r.Acquired {
					t.Errorf("%s on another master: %+v; want granted", id, r)
				}
				_ = b.Release(ctx, id, "T")
			}
			if err := e.c.WaitHealthy(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSentinel runs both adapters through Sentinel (go-redis's failover
// client, rueidis's sentinel client) with WaitReplicas 1: a hand-off
// between two processes (the waiter is woken); then a forced failover
// (SENTINEL FAILOVER): the confirmed lease survives it (nobody else is
// granted the id on the promoted replica), its holder extends and
// releases it on the new master, and the next grant's fence is higher.
func TestSentinel(t *testing.T) {
	for _, a := range waitAdapters {
		t.Run(a.name, func(t *testing.T) {
			r := StartReplicated(t, ReplicatedOptions{Replicas: 1, Sentinels: 3})
			ks := testKeys(t)
			newLocker := func() *lock.Locker {
				l, err := lock.New(a.single(t, "", r.SentinelAddrs(), ks.Prefix(), 1), &lock.Options{WaiterTimeout: 30 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				return l
			}
			holder, other := newLocker(), newLocker()
			// A hand-off: the waiter is woken by the release.
			h, err := holder.Acquire(ctx, "x", time.Minute, nil)
			if err != nil || !h.Acquired {
				t.Fatalf("holder: %+v, %v", h, err)
			}
			got := make(chan lock.Result, 1)
			go func() {
				res, err := other.Acquire(ctx, "x", time.Minute, nil)
				if err != nil {
					t.Error(err)
				}
				got <- res
			}()
			eventuallyQueued(t, r.Master.Addr, ks.For("x").Queue, 1)
			released := time.Now()
			if err := h.Lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			w := <-got
			if !w.Acquired || !w.WasInUse || w.Lease.Fence() <= h.Lease.Fence() {
				t.Fatalf("waiter: %+v (fence %d after %d)", w, w.Lease.Fence(), h.Lease.Fence())
			}
			if d := time.Since(released); d > 3*time.Second {
				t.Fatalf("the waiter took %v after the release (heartbeats every 10 s): not woken", d)
			}
			// Failover with a confirmed lease held.
			old, err := r.SentinelMaster(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Failover(ctx); err != nil {
				t.Fatal(err)
			}
			var promoted string
			testkit.Eventually(t, adaptertest.Deadline, "the Sentinels promote the replica", func() bool {
				promoted, err = r.SentinelMaster(ctx)
				return err == nil && promoted != old
			})
			// The Sentinels turn the old master into a replica of the new
			// one when they next look at it (up to 10 s); do it now, as
			// they will, so that WAIT has a replica to count.
			host, port, _ := strings.Cut(promoted, ":")
			if _, err := (&Cluster{}).Do(ctx, old, "REPLICAOF", host, port); err != nil {
				t.Fatal(err)
			}
			if err := r.WaitSynced(ctx); err != nil {
				t.Fatal(err)
			}
			var try lock.Result
			testkit.Eventually(t, adaptertest.Deadline, "a TryAcquire answers on the new master", func() bool {
				try, err = holder.TryAcquire(ctx, "x", time.Minute)
				return err == nil
			})
			if try.Acquired {
				t.Fatalf("after the failover the id was granted again: %+v", try)
			}
			testkit.Eventually(t, adaptertest.Deadline, "the holder extends its lease on the new master", func() bool {
				return w.Lease.Extend(ctx, time.Minute) == nil
			})
			if err := w.Lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			n, err := holder.TryAcquire(ctx, "x", time.Minute)
			if err != nil || !n.Acquired || n.Lease.Fence() <= w.Lease.Fence() {
				t.Fatalf("after the release on the new master: %+v, %v (fence after %d)", n, err, w.Lease.Fence())
			}
			_ = n.Lease.Release(ctx)
		})
	}
}

// TestFailoverRisk shows the risk the README states, and what WaitReplicas
// changes: the replication link is cut (a proxy between the replica and
// the master drops what the master sends), a process is granted a lock,
// the master dies and the replica is promoted. Without WAIT the grant is
// lost and another process is granted the same id while the first still
// holds it; with WaitReplicas 1 the first grant failed (ErrNotReplicated)
// instead, so nobody held it unconfirmed.
func TestFailoverRisk(t *testing.T) {
	for _, a := range waitAdapters {
		for _, replicas := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/WaitReplicas=%d", a.name, replicas), func(t *testing.T) {
				var link *faultproxy.Proxy
				r := StartReplicated(t, ReplicatedOptions{Replicas: 1, Sentinels: 3, Via: func(master string) string {
					link = faultproxy.Start(t, master)
					return link.Addr()
				}})
				ks := testKeys(t)
				first := a.single(t, "", r.SentinelAddrs(), ks.Prefix(), replicas)
				link.Blackhole(faultproxy.Down, true) // the replica hears nothing more
				g, err := first.Acquire(ctx, req("x", "FIRST"))
				r.Master.Kill()
				// Known unreplicated: with its master dead the replica can
				// get nothing more, and it has no lock key. It replicated
				// through the cut link to the end (the Sentinels were told
				// not to re-point it at the master).
				replica := r.Replicas[0].Addr
				info, ierr := (&Cluster{}).Do(ctx, replica, "INFO", "replication")
				if ierr != nil {
					t.Fatal(ierr)
				}
				if _, port, _ := strings.Cut(link.Addr(), ":"); !strings.Contains(fmt.Sprint(info), "master_port:"+port+"\r\n") {
					t.Fatalf("the replica no longer replicates through the cut link (port %s): %s", port, info)
				}
				if v := nodeGet(t, replica, ks.For("x").Lock, false); v != "" {
					t.Fatalf("the replica got the grant through the cut link (%d bytes dropped): lock key %q", link.Stats().Dropped[faultproxy.Down], v)
				}
				if replicas == 1 {
					if !errors.Is(err, a.notReplicated) {
						t.Fatalf("grant with the replica paused: %+v, %v; want ErrNotReplicated", g, err)
					}
				} else if err != nil || !g.Acquired {
					t.Fatalf("grant with the replica paused, no WAIT: %+v, %v", g, err)
				}
				// The Sentinels may have started a failover of their own
				// (the master is down): INPROG is as good.
				if err := r.Failover(ctx); err != nil {
					t.Fatal(err)
				}
				testkit.Eventually(t, adaptertest.Deadline, "the Sentinels promote the replica", func() bool {
					m, err := r.SentinelMaster(ctx)
					return err == nil && m == replica
				})
				second := a.single(t, "", r.SentinelAddrs(), ks.Prefix(), 0)
				var g2 backend.Grant
				testkit.Eventually(t, adaptertest.Deadline, "the new master answers", func() bool {
					g2, err = second.Acquire(ctx, req("x", "SECOND"))
					return err == nil
				})
				if replicas == 0 && !g2.Acquired {
					t.Fatalf("the lost grant did not show: the id is held on the new master (%+v)", g2)
				}
				if replicas == 0 {
					t.Logf("as documented: without WAIT a grant the replica never got was lost in the failover, and the id was granted twice (fences %d and %d)", g.Fence, g2.Fence)
				}
				if replicas == 1 && !g2.Acquired {
					t.Fatalf("with WAIT the failed first grant should have left the id free: %+v", g2)
				}
			})
		}
	}
}

// eventuallyQueued waits until the queue key on addr has n entries.
func eventuallyQueued(t *testing.T, addr, key string, n int64) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	testkit.Eventually(t, adaptertest.Deadline, fmt.Sprintf("%d waiter(s) queued", n), func() bool { return c.ZCard(ctx, key).Val() >= n })
}
