package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidishook"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/redis/scripts"
	"github.com/redislocker/lock/internal/testenv/redisserver"
	"github.com/redislocker/lock/redisbackend"
	"github.com/redislocker/lock/rueidisbackend"
)

// pipelineCounter is a go-redis hook that counts, per node, the pipelines
// that carry scripts.
type pipelineCounter struct {
	addr string
	mu   *sync.Mutex
	n    map[string]int // node -> pipelines with EVALSHA or EVAL
	cmds map[string]int // node -> EVALSHA and EVAL commands in them
}

func (c pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (c pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		scripts := 0
		for _, cmd := range cmds {
			if n := cmd.Name(); n == "evalsha" || n == "eval" || n == "fcall" {
				scripts++
			}
		}
		if scripts > 0 {
			c.mu.Lock()
			c.n[c.addr]++
			c.cmds[c.addr] += scripts
			c.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// rueidisCounter counts rueidis's DoMulti calls (one per batch, which
// rueidis splits per node) and their commands.
type rueidisCounter struct {
	mu      sync.Mutex
	multis  int
	scripts int
}

func (c *rueidisCounter) Do(client rueidis.Client, ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	return client.Do(ctx, cmd)
}

func (c *rueidisCounter) DoMulti(client rueidis.Client, ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.mu.Lock()
	c.multis++
	c.scripts += len(multi)
	c.mu.Unlock()
	return client.DoMulti(ctx, multi...)
}

func (c *rueidisCounter) DoCache(client rueidis.Client, ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	return client.DoCache(ctx, cmd, ttl)
}

func (c *rueidisCounter) DoMultiCache(client rueidis.Client, ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	return client.DoMultiCache(ctx, multi...)
}

func (c *rueidisCounter) Receive(client rueidis.Client, ctx context.Context, subscribe rueidis.Completed, fn func(msg rueidis.PubSubMessage)) error {
	return client.Receive(ctx, subscribe, fn)
}

func (c *rueidisCounter) DoStream(client rueidis.Client, ctx context.Context, cmd rueidis.Completed) rueidis.RedisResultStream {
	return client.DoStream(ctx, cmd)
}

func (c *rueidisCounter) DoMultiStream(client rueidis.Client, ctx context.Context, multi ...rueidis.Completed) rueidis.MultiRedisResultStream {
	return client.DoMultiStream(ctx, multi...)
}

// evalshaCalls returns, per master, how often it ran a step's script:
// EVALSHA, or FCALL of the scripts' function library.
func (e *clusterEnv) evalshaCalls() map[string]int64 {
	e.t.Helper()
	out := map[string]int64{}
	for _, m := range e.masters {
		info, err := e.c.Do(ctx, m, "INFO", "commandstats")
		if err != nil {
			e.t.Fatal(err)
		}
		out[m] = redisserver.CommandStat(e.t, info.(string), "evalsha", "calls") +
			redisserver.CommandStat(e.t, info.(string), "fcall", "calls")
	}
	return out
}

// TestAcquireManyBatchedPerMaster: AcquireMany of ids on every master is
// one batched step: go-redis sends one pipeline per master (in parallel),
// rueidis one DoMulti that it splits per master; each master runs the
// acquire scripts of its own ids, and no other: one acquire_many per hash
// slot (and chunk of scripts.MaxAcquireBatch), with either adapter (rueidis
// in Tracking mode too: its client tracks its inbox keys only).
func TestAcquireManyBatchedPerMaster(t *testing.T) {
	e := newClusterEnv(t)
	byMaster := e.idsPerMaster(100)
	var ids []string
	perSlot := map[string]int{} // master -> scripts
	nSlot := 0
	for m, list := range byMaster {
		ids = append(ids, list...)
		slots := map[int]int{}
		for _, id := range list {
			slots[keys.SlotOf(id)]++
		}
		for _, n := range slots {
			perSlot[m] += (n + scripts.MaxAcquireBatch - 1) / scripts.MaxAcquireBatch
		}
		nSlot += perSlot[m]
	}
	acquireAll := func(t *testing.T, l *lock.Locker) {
		t.Helper()
		var leases []*lock.Lease
		for snap, err := range l.AcquireMany(ctx, ids, time.Minute, nil) {
			if err != nil {
				t.Fatal(err)
			}
			leases = append(leases, snap.Acquired...)
		}
		if len(leases) != len(ids) {
			t.Fatalf("%d leases for %d free ids", len(leases), len(ids))
		}
		releaseAll(t, leases)
	}
	checkServers := func(t *testing.T, before map[string]int64, want map[string]int) {
		t.Helper()
		after := e.evalshaCalls()
		for _, m := range e.masters {
			if d := after[m] - before[m]; d != int64(want[m]) {
				t.Errorf("master %s ran %d EVALSHA for the %d ids it serves, want %d", m, d, len(byMaster[m]), want[m])
			}
		}
	}
	t.Run("go-redis", func(t *testing.T) {
		ks := testKeys(t)
		cnt := pipelineCounter{mu: &sync.Mutex{}, n: map[string]int{}, cmds: map[string]int{}}
		client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: e.c.Addrs()})
		client.OnNewNode(func(rdb *redis.Client) {
			c := cnt
			c.addr = rdb.Options().Addr
			rdb.AddHook(c)
		})
		b, err := redisbackend.New(client, &redisbackend.Options{Prefix: ks.Prefix()})
		if err != nil {
			t.Fatal(err)
		}
		l, err := lock.New(b, &lock.Options{BatchTick: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = l.Close()
			client.Close()
		}()
		acquireAll(t, l) // loads the scripts on every master
		cnt.mu.Lock()
		clear(cnt.n)
		clear(cnt.cmds)
		cnt.mu.Unlock()
		ks2 := testKeys(t)
		b2, _ := redisbackend.New(client, &redisbackend.Options{Prefix: ks2.Prefix()})
		l2, err := lock.New(b2, &lock.Options{BatchTick: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer l2.Close()
		// Its first step checks the prefix's wire marker (one EVALSHA on
		// the marker's master): not part of the count.
		_ = b2.Release(ctx, "warm", "nobody")
		before := e.evalshaCalls()
		var leases []*lock.Lease
		for snap, err := range l2.AcquireMany(ctx, ids, time.Minute, nil) {
			if err != nil {
				t.Fatal(err)
			}
			leases = append(leases, snap.Acquired...)
		}
		cnt.mu.Lock()
		for _, m := range e.masters {
			if cnt.n[m] != 1 || cnt.cmds[m] != perSlot[m] {
				t.Errorf("master %s: %d pipelines with %d scripts, want 1 with %d", m, cnt.n[m], cnt.cmds[m], perSlot[m])
			}
		}
		cnt.mu.Unlock()
		checkServers(t, before, perSlot)
		releaseAll(t, leases)
	})
	t.Run("rueidis", func(t *testing.T) {
		ks := testKeys(t)
		cnt := &rueidisCounter{}
		b, err := rueidisbackend.New(&rueidisbackend.Options{
			ClientOption: rueidis.ClientOption{InitAddress: e.c.Addrs()},
			ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
				c, err := rueidis.NewClient(o)
				if err != nil {
					return nil, err
				}
				return rueidishook.WithHook(c, cnt), nil
			},
			Prefix: ks.Prefix(),
		})
		if err != nil {
			t.Fatal(err)
		}
		l, err := lock.New(b, &lock.Options{BatchTick: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		acquireAll(t, l) // loads the scripts on every master
		cnt.mu.Lock()
		cnt.multis, cnt.scripts = 0, 0
		cnt.mu.Unlock()
		before := e.evalshaCalls()
		var leases []*lock.Lease
		for snap, err := range l.AcquireMany(ctx, ids, time.Minute, nil) { // released above
			if err != nil {
				t.Fatal(err)
			}
			leases = append(leases, snap.Acquired...)
		}
		cnt.mu.Lock()
		if cnt.multis != 1 || cnt.scripts != nSlot {
			t.Errorf("%d DoMulti with %d commands, want 1 with %d", cnt.multis, cnt.scripts, nSlot)
		}
		cnt.mu.Unlock()
		checkServers(t, before, perSlot)
		releaseAll(t, leases)
	})
}

// serverCPU returns the CPU seconds (user + system) each server has used.
func serverCPU(tb testing.TB, addrs []string) []float64 {
	tb.Helper()
	out := make([]float64, len(addrs))
	for i, a := range addrs {
		info, err := (&Cluster{}).Do(ctx, a, "INFO", "cpu")
		if err != nil {
			tb.Fatal(err)
		}
		for _, line := range strings.Split(info.(string), "\n") {
			for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), f); ok {
					var x float64
					fmt.Sscanf(v, "%g", &x)
					out[i] += x
				}
			}
		}
	}
	return out
}

// releaseAll releases leases, 32 at a time.
func releaseAll(tb testing.TB, leases []*lock.Lease) {
	tb.Helper()
	ch := make(chan *lock.Lease)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for le := range ch {
				if err := le.Release(ctx); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, le := range leases {
		ch <- le
	}
	close(ch)
	wg.Wait()
	if first != nil {
		tb.Fatal(first)
	}
}

// BenchmarkAcquireMany measures AcquireMany of 10,000 free ids, one batched
// step, on one master and on the cluster's three masters (each master with
// one replica, both sides), through both adapters. The time per op is one
// whole AcquireMany; ns/id divides it by the ids. Releasing the leases is
// not timed. The masters' own CPU time (INFO cpu) during the AcquireMany
// calls is reported too: server-ms/op summed over the masters, and
// busiest-ms/op of the busiest master, which bounds the wall time when
// every master has a core of its own (on a machine with fewer cores than
// processes, the wall time shows the contention instead). Run:
//
//	go test -run '^$' -bench AcquireMany -benchtime 5x ./tests/cluster
func BenchmarkAcquireMany(b *testing.B) {
	const n = 10000
	single := StartReplicated(b, ReplicatedOptions{Replicas: 1})
	cluster := Shared(b)
	masters, err := cluster.Masters(ctx)
	if err != nil {
		b.Fatal(err)
	}
	deployments := []struct {
		name    string
		cluster bool
		addrs   []string
		masters []string
	}{
		{"1-master", false, []string{single.Master.Addr}, []string{single.Master.Addr}},
		{"3-masters", true, cluster.Addrs(), masters},
	}
	for _, d := range deployments {
		for _, adapter := range []string{"go-redis", "rueidis"} {
			b.Run(d.name+"/"+adapter, func(b *testing.B) {
				ks, _ := keys.New(prefix(b))
				var be backend.Backend
				if adapter == "go-redis" {
					var client redis.UniversalClient
					if d.cluster {
						client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: d.addrs})
					} else {
						client = redis.NewClient(&redis.Options{Addr: d.addrs[0]})
					}
					defer client.Close()
					rb, err := redisbackend.New(client, &redisbackend.Options{Prefix: ks.Prefix()})
					if err != nil {
						b.Fatal(err)
					}
					be = rb
				} else {
					rb, err := rueidisbackend.New(&rueidisbackend.Options{
						ClientOption: rueidis.ClientOption{InitAddress: d.addrs, ForceSingleClient: !d.cluster},
						Prefix:       ks.Prefix(),
					})
					if err != nil {
						b.Fatal(err)
					}
					be = rb
				}
				l, err := lock.New(be, &lock.Options{BatchTick: time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				ids := make([]string, n)
				run := func(round int) []*lock.Lease {
					for i := range ids {
						ids[i] = fmt.Sprint("many-", round, "-", i)
					}
					var leases []*lock.Lease
					for snap, err := range l.AcquireMany(ctx, ids, time.Minute, nil) {
						if err != nil {
							b.Fatal(err)
						}
						leases = append(leases, snap.Acquired...)
					}
					if len(leases) != n {
						b.Fatalf("%d leases for %d free ids", len(leases), n)
					}
					return leases
				}
				releaseAll(b, run(-1)) // loads the scripts, warms the connections
				used := make([]float64, len(d.masters))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					before := serverCPU(b, d.masters)
					b.StartTimer()
					leases := run(i)
					b.StopTimer()
					for j, c := range serverCPU(b, d.masters) {
						used[j] += c - before[j]
					}
					releaseAll(b, leases)
					b.StartTimer()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/id")
				sum, busiest := 0.0, 0.0
				for _, u := range used {
					sum += u
					busiest = max(busiest, u)
				}
				b.ReportMetric(sum*1000/float64(b.N), "server-ms/op")
				b.ReportMetric(busiest*1000/float64(b.N), "busiest-ms/op")
			})
		}
	}
}
