package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/harness"
	"github.com/redislocker/lock/internal/testenv/redisserver"
	"github.com/redislocker/lock/internal/testenv/testkit"
	"github.com/redislocker/lock/redisbackend"
	"github.com/redislocker/lock/rueidisbackend"
)

// aclUser is an ACL user of one test: a name no other test's user has.
type aclUser struct{ name, password string }

func newACLUser(t *testing.T) aclUser {
	return aclUser{name: uniqueName(t), password: "locker-secret"}
}

// create runs ACL SETUSER for u with rules on the node at addr (as the
// default user), and deletes u there at t's cleanup.
func (u aclUser) create(t *testing.T, addr string, rules []string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", u.name, "reset", "on", ">" + u.password}
	for _, r := range rules {
		args = append(args, r)
	}
	if _, err := (&Cluster{}).Do(ctx, addr, args...); err != nil {
		t.Fatalf("ACL SETUSER on %s: %v", addr, err)
	}
	t.Cleanup(func() { _, _ = (&Cluster{}).Do(ctx, addr, "ACL", "DELUSER", u.name) })
}

// requireLoggedIn fails t unless the node at addr has a connection of u:
// a client that ignored the credentials would run as the default user,
// whom no ACL LOG entry of u would show.
func (u aclUser) requireLoggedIn(t *testing.T, addr string) {
	t.Helper()
	list, err := (&Cluster{}).Do(ctx, addr, "CLIENT", "LIST")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(list.(string), " user="+u.name+" ") {
		t.Fatalf("%s has no connection of user %s", addr, u.name)
	}
}

// refusedForNow reports whether err is a refusal of a migrating slot
// (TRYAGAIN; with WaitReplicas the last refusal may be the source's ASK),
// or the end of the short context of a step that was refused until then.
func refusedForNow(err error) bool {
	return strings.Contains(err.Error(), "TRYAGAIN") || strings.HasPrefix(err.Error(), "ASK ") ||
		strings.Contains(err.Error(), ": ASK ") || errors.Is(err, context.DeadlineExceeded)
}

// aclAdapter makes Backends that log in as ACL users: redisbackend, or
// rueidisbackend in a Mode, with ShardedPubSub (on a cluster only) and
// WaitReplicas as set.
type aclAdapter struct {
	name    string
	rueidis bool
	mode    rueidisbackend.Mode // of rueidisbackend
	sharded bool
	wait    int
}

var aclAdapters = []aclAdapter{
	{name: "go-redis"},
	{name: "go-redis-sharded", sharded: true},
	{name: "go-redis-wait", wait: 1},
	{name: "rueidis-tracking", rueidis: true, mode: rueidisbackend.Tracking},
	{name: "rueidis-tracking-wait", rueidis: true, mode: rueidisbackend.Tracking, wait: 1},
	{name: "rueidis-pubsub", rueidis: true, mode: rueidisbackend.PubSub},
	{name: "rueidis-pubsub-sharded", rueidis: true, mode: rueidisbackend.PubSub, sharded: true},
}

// onCluster returns a Backend on the cluster at addrs, logged in as u.
func (a aclAdapter) onCluster(t *testing.T, addrs []string, u aclUser, prefix string) backend.Backend {
	if a.rueidis {
		return a.rueidisBackend(t, rueidis.ClientOption{InitAddress: addrs}, u, prefix)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Username: u.name, Password: u.password})
	return harness.GoRedisBackend(t, c, &redisbackend.Options{Prefix: prefix, ShardedPubSub: a.sharded, WaitReplicas: a.wait})
}

// onSentinel returns a Backend on the master set MasterName of the
// Sentinels at addrs, logged in to them as su and to the data nodes as u.
func (a aclAdapter) onSentinel(t *testing.T, addrs []string, su, u aclUser, prefix string) backend.Backend {
	if a.rueidis {
		co := rueidis.ClientOption{InitAddress: addrs, Sentinel: rueidis.SentinelOption{MasterSet: MasterName, Username: su.name, Password: su.password}}
		return a.rueidisBackend(t, co, u, prefix)
	}
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: addrs,
		SentinelUsername: su.name, SentinelPassword: su.password, Username: u.name, Password: u.password})
	return harness.GoRedisBackend(t, c, &redisbackend.Options{Prefix: prefix, WaitReplicas: a.wait})
}

// rueidisBackend returns a rueidisbackend on co logged in as u: New in
// Tracking mode, NewWithClient on a client built with DisableCache in
// PubSub mode (as the harness does). It fails t unless the Backend has
// a's mode: a refused CLIENT TRACKING makes New fall back to PubSub mode.
func (a aclAdapter) rueidisBackend(t *testing.T, co rueidis.ClientOption, u aclUser, prefix string) backend.Backend {
	co = harness.SmallRueidis(co)
	co.Username, co.Password = u.name, u.password
	o := rueidisbackend.Options{Prefix: prefix, ShardedPubSub: a.sharded, WaitReplicas: a.wait}
	var b backend.Backend
	if a.mode == rueidisbackend.Tracking {
		o.ClientOption = co
		b = harness.RueidisBackend(t, &o)
	} else {
		co.DisableCache = true
		client, err := rueidis.NewClient(co)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(client.Close) // registered first, so it runs after the Backend's
		if b, err = rueidisbackend.NewWithClient(client, &o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
	}
	if got := rueidisbackend.ModeOf(b); got != a.mode {
		t.Fatalf("ModeOf = %v, want %v", got, a.mode)
	}
	return b
}

// acquireSteps counts a Locker's acquire steps per id.
type acquireSteps struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *acquireSteps) Observe(e lock.Event) {
	if e.Kind == lock.EventStep && e.Step == "acquire" {
		s.mu.Lock()
		s.n[e.ID]++
		s.mu.Unlock()
	}
}

func (s *acquireSteps) of(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[id]
}

// aclWorkload runs, on two Lockers of Backends from newBackend (with
// WaitReplicas wait), a short workload: an acquire and release; a
// contended acquire whose waiter, seen queued with Inspect, is granted by
// hand-off (the holder's TTL is a minute: only the wake-up can grant it
// in time); Extend; AcquireMany over ids (of every master, on a cluster).
// It is not the whole suite: the scripts' own calls are those of one
// server, which TestConformanceSecure checks; what a deployment adds is
// what the clients send to find and follow its nodes, and each kind of
// connection (commands, pub/sub or tracking) the workload opens.
func aclWorkload(t *testing.T, newBackend func() backend.Backend, wait int, ids []string) {
	newLocker := func(o *lock.Options) *lock.Locker {
		l, err := lock.New(newBackend(), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	steps := &acquireSteps{n: map[string]int{}}
	holder, waiter := newLocker(nil), newLocker(&lock.Options{Observer: steps})

	// Acquire and release.
	r, err := holder.Acquire(ctx, "free", time.Minute, nil)
	if err != nil || !r.Acquired {
		t.Fatalf("Acquire of a free id: %+v, %v", r, err)
	}
	if err := r.Lease.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}

	// A contended acquire, granted by hand-off.
	h, err := holder.Acquire(ctx, "x", time.Minute, nil)
	if err != nil || !h.Acquired {
		t.Fatalf("holder: %+v, %v", h, err)
	}
	got := make(chan lock.Result, 1)
	go func() {
		res, err := waiter.Acquire(ctx, "x", time.Minute, &lock.AcquireOptions{QueueTimeout: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	testkit.Eventually(t, adaptertest.Deadline, "Inspect shows the waiter queued", func() bool {
		in, err := holder.Inspect(ctx, "x")
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		return in.Held && in.Fence == h.Lease.Fence() && in.QueueLen == 1
	})
	if err := h.Lease.Release(ctx); err != nil {
		t.Fatalf("Release with a waiter: %v", err)
	}
	var w lock.Result
	select {
	case w = <-got:
	case <-time.After(adaptertest.Deadline):
		t.Fatalf("the waiter was not granted within %v of the release (the holder's TTL was a minute)", adaptertest.Deadline)
	}
	if !w.Acquired || w.Lease.Fence() <= h.Lease.Fence() {
		t.Fatalf("waiter: %+v", w)
	}
	// A try, a step that queued it; then the hand-off granted it. With
	// WaitReplicas the wake-up carries the grant but the waiter takes it
	// with a step of its own, which waits for the replicas.
	if n, want := steps.of("x"), map[bool]int{true: 2, false: 3}[wait == 0]; n != want {
		t.Errorf("the waiter ran %d acquire steps, want %d", n, want)
	}

	// Extend.
	if err := w.Lease.Extend(ctx, 2*time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if in, err := waiter.Inspect(ctx, "x"); err != nil || !in.Held || in.TTL <= time.Minute {
		t.Fatalf("Inspect after Extend: %+v, %v", in, err)
	}
	if err := w.Lease.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}

	// AcquireMany.
	var leases []*lock.Lease
	for snap, err := range holder.AcquireMany(ctx, ids, time.Minute, nil) {
		if err != nil {
			t.Fatalf("AcquireMany: %v", err)
		}
		leases = append(leases, snap.Acquired...)
	}
	if len(leases) != len(ids) {
		t.Fatalf("AcquireMany granted %d of %d ids", len(leases), len(ids))
	}
	for _, le := range leases {
		if err := le.Release(ctx); err != nil {
			t.Fatalf("Release of %s: %v", le.ID(), err)
		}
	}
}

// TestACLCluster: both adapters, in every mode (sharded pub/sub and
// WaitReplicas too), run on the cluster logged in as an ACL user that
// has, on every node, harness.ACLRules of the test's prefix and
// harness.ACLRulesCluster: the workload of aclWorkload, with AcquireMany
// over ids of every master, and a step into a slot that migrates. No node
// logs a refusal (ACL LOG) of that user.
func TestACLCluster(t *testing.T) {
	e := newClusterEnv(t)
	e.c.RequireOwned(t) // it adds a user to every node
	u := newACLUser(t)
	ks := testKeys(t)
	rules := append(harness.ACLRules(ks.Prefix()), harness.ACLRulesCluster()...)
	for _, addr := range e.c.Addrs() {
		u.create(t, addr, rules)
	}
	var ids []string
	byMaster := e.idsPerMaster(2)
	for _, m := range e.masters {
		ids = append(ids, byMaster[m]...)
	}
	for _, a := range aclAdapters {
		t.Run(a.name, func(t *testing.T) {
			prefix := ks.Prefix() + a.name + ":"
			aclWorkload(t, func() backend.Backend { return a.onCluster(t, e.c.Addrs(), u, prefix) }, a.wait, ids)
			for _, m := range e.masters {
				u.requireLoggedIn(t, m)
			}
		})
	}
	// During a slot migration a client follows an ASK redirect with
	// ASKING: an acquire of an id of the moving slot, which has no key of
	// the prefix on the source, goes to the target, where the script is
	// refused with TRYAGAIN (not every key of the script is there yet).
	t.Run("slot-migration", func(t *testing.T) {
		const id = "moving"
		slot := keys.SlotOf(id)
		from := e.owner[slot]
		to := e.masters[0]
		if to == from {
			to = e.masters[1]
		}
		bs := make([]backend.Backend, len(aclAdapters))
		for i, a := range aclAdapters {
			bs[i] = a.onCluster(t, e.c.Addrs(), u, ks.Prefix()+a.name+":")
			// The first step checks the prefix's wire marker: before the move.
			if g, err := bs[i].Acquire(ctx, req(ids[0], "T")); err != nil || !g.Acquired {
				t.Fatalf("%s: Acquire before the move: %+v, %v", a.name, g, err)
			}
			if err := bs[i].Release(ctx, ids[0], "T"); err != nil {
				t.Fatal(err)
			}
		}
		asking := func() (int64, error) {
			info, err := e.c.Do(ctx, to, "INFO", "commandstats")
			if err != nil {
				return 0, err
			}
			return redisserver.CommandStat(t, info.(string), "asking", "calls"), nil
		}
		err := e.c.MoveSlot(ctx, slot, to, MoveHooks{Opened: func() error {
			for i, b := range bs {
				before, err := asking()
				if err != nil {
					return err
				}
				// The adapters resend a step refused with TRYAGAIN for
				// seconds: one or two refusals are enough here.
				sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				g, err := b.Acquire(sctx, req(id, "T"))
				cancel()
				switch {
				case err != nil && !refusedForNow(err):
					return fmt.Errorf("%s: Acquire of an id of the moving slot: %v, want TRYAGAIN", aclAdapters[i].name, err)
				case err == nil && g.Acquired:
					if err := b.Release(ctx, id, "T"); err != nil {
						return fmt.Errorf("%s: Release of an id of the moving slot: %v", aclAdapters[i].name, err)
					}
				case err == nil:
					return fmt.Errorf("%s: Acquire of a free id of the moving slot: %+v", aclAdapters[i].name, g)
				}
				if after, err := asking(); err != nil {
					return err
				} else if after == before {
					return fmt.Errorf("%s: the target ran no ASKING: the step was not redirected", aclAdapters[i].name)
				}
			}
			return nil
		}})
		if err != nil {
			t.Error(err)
		}
		if err := e.c.MoveSlot(ctx, slot, from, MoveHooks{}); err != nil {
			t.Fatalf("moving slot %d back: %v", slot, err)
		}
	})
	harness.CheckACLLogAt(t, nil, u.name, e.c.Addrs()...)
}

// TestACLSentinel: both adapters, in every mode (WaitReplicas too), run
// through a Sentinel, logged in to it as a user of
// harness.ACLRulesSentinel, and to the data nodes as one of
// harness.ACLRules of the test's prefix and harness.ACLRulesBehindSentinel
// (on the master and the replica): the workload of aclWorkload. Neither the
// Sentinel nor a data node logs a refusal of either user.
func TestACLSentinel(t *testing.T) {
	r := StartReplicated(t, ReplicatedOptions{Replicas: 1, Sentinels: 1})
	u, su := newACLUser(t), newACLUser(t)
	ks := testKeys(t)
	data := []string{r.Master.Addr, r.Replicas[0].Addr}
	for _, addr := range data {
		u.create(t, addr, append(harness.ACLRules(ks.Prefix()), harness.ACLRulesBehindSentinel()...))
	}
	su.create(t, r.Sentinels[0].Addr, harness.ACLRulesSentinel())
	for _, a := range aclAdapters {
		if a.sharded {
			continue // a cluster's
		}
		t.Run(a.name, func(t *testing.T) {
			prefix := ks.Prefix() + a.name + ":"
			aclWorkload(t, func() backend.Backend { return a.onSentinel(t, r.SentinelAddrs(), su, u, prefix) }, a.wait, []string{"m1", "m2", "m3"})
			u.requireLoggedIn(t, r.Master.Addr)
			su.requireLoggedIn(t, r.Sentinels[0].Addr)
		})
	}
	harness.CheckACLLogAt(t, nil, u.name, data...)
	harness.CheckACLLogAt(t, nil, su.name, r.SentinelAddrs()...)
}
