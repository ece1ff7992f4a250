package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redislocker/lock/internal/testenv/redisserver"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// ReplicatedOptions shape a master with replicas and Sentinels.
type ReplicatedOptions struct {
	// Replicas is the number of replicas of the master. Default: 1.
	Replicas int
	// Sentinels is the number of Sentinels that monitor the master, with
	// a quorum of a majority of them. Default: 0.
	Sentinels int
	// Via, when set, is called with the master's address and returns the
	// address the replicas replicate from instead (a fault proxy in front
	// of the master, to cut the replication link).
	Via func(master string) string
}

// MasterName is the name the Sentinels of a Replicated know the master by.
const MasterName = "lockmaster"

// Replicated is a master with replicas (REPLICAOF) and Sentinels, started
// by StartReplicated.
type Replicated struct {
	Master    *Node
	Replicas  []*Node
	Sentinels []*Node

	via  string // what the replicas first replicate from (Options.Via)
	once sync.Once
}

// StartReplicated starts a master, its replicas and Sentinels for t, waits
// until every replica is in sync and every Sentinel knows the master and
// its replicas, and stops them all at t's cleanup. It skips (or fails with
// CI set) like Start when redis-server is missing; Sentinels run as
// redis-server --sentinel.
func StartReplicated(t testing.TB, o ReplicatedOptions) *Replicated {
	t.Helper()
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	bin, err := redisserver.Binary()
	if err != nil {
		fail(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	// The directory first: cleanups run last-registered first, so the
	// servers stop before it is removed (a Sentinel rewrites its config).
	dir := t.TempDir()
	r := &Replicated{}
	t.Cleanup(r.Stop)
	r.Master, err = startProcess(bin, filepath.Join(dir, "master"), nil)
	if err != nil {
		fail(t, err)
	}
	host, port, _ := strings.Cut(r.Master.Addr, ":")
	r.via = r.Master.Addr
	// Sentinels re-point a replica that replicates from another address
	// than the master's (+fix-slave-config) once failover-timeout has
	// passed since they first saw it: behind a proxy, only a timeout
	// longer than any test keeps the replica behind it.
	failoverTimeout := 3 * time.Second
	if o.Via != nil {
		r.via = o.Via(r.Master.Addr)
		failoverTimeout = time.Hour
	}
	vhost, vport, _ := strings.Cut(r.via, ":")
	for i := range o.Replicas {
		d := filepath.Join(dir, fmt.Sprint("replica", i))
		n, err := startProcess(bin, d, func(p int, logPath string) ([]string, error) {
			return append(redisserver.DefaultArgs(p, d, logPath), "--replicaof", vhost, vport), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		r.Replicas = append(r.Replicas, n)
	}
	for i := range o.Sentinels {
		d := filepath.Join(dir, fmt.Sprint("sentinel", i))
		n, err := startProcess(bin, d, func(p int, logPath string) ([]string, error) {
			conf := filepath.Join(d, "sentinel.conf")
			text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile %s\n"+
				"sentinel monitor %s %s %s %d\n"+
				"sentinel down-after-milliseconds %s 1000\n"+
				"sentinel failover-timeout %s %d\n"+
				"sentinel parallel-syncs %s 1\n",
				p, d, logPath, MasterName, host, port, o.Sentinels/2+1, MasterName, MasterName,
				failoverTimeout.Milliseconds(), MasterName)
			if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
				return nil, err
			}
			return []string{conf, "--sentinel"}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		r.Sentinels = append(r.Sentinels, n)
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// SentinelAddrs returns the addresses of the Sentinels.
func (r *Replicated) SentinelAddrs() []string {
	out := make([]string, len(r.Sentinels))
	for i, n := range r.Sentinels {
		out[i] = n.Addr
	}
	return out
}

// WaitSynced waits until the current master (as the first Sentinel names
// it, or Master without Sentinels) has every other live data node as a
// replica in sync (online on the master's side, link up on the replica's),
// and every Sentinel names that master and knows its replicas.
func (r *Replicated) WaitSynced(ctx context.Context) error {
	c := &Cluster{}
	return testkit.WaitFor(ctx, 10*time.Second, 10*time.Millisecond, func() error {
		master := r.Master.Addr
		if len(r.Sentinels) > 0 {
			m, err := r.SentinelMaster(ctx)
			if err != nil {
				return err
			}
			master = m
		}
		mInfo, err := c.doString(ctx, master, "INFO", "replication")
		if err != nil {
			return fmt.Errorf("master %s: %w", master, err)
		}
		if !strings.Contains(mInfo, "role:master") {
			return fmt.Errorf("%s is not a master yet", master)
		}
		synced := map[string]bool{}
		for _, n := range append([]*Node{r.Master}, r.Replicas...) {
			if n.Addr == master || n.exited() {
				continue
			}
			synced[n.Addr] = true
			info, err := c.doString(ctx, n.Addr, "INFO", "replication")
			if err != nil {
				return fmt.Errorf("replica %s: %w", n.Addr, err)
			}
			from := portOf(master)
			if master == r.Master.Addr {
				from = portOf(r.via)
			}
			if !strings.Contains(info, "master_port:"+from+"\r\n") || !strings.Contains(info, "master_link_status:up") {
				return fmt.Errorf("replica %s is not in sync with %s", n.Addr, master)
			}
			if !onlineOn(mInfo, n.Addr) {
				return fmt.Errorf("master %s does not list replica %s as online", master, n.Addr)
			}
		}
		if err := streaming(ctx, master, "x", r.liveReplicas(master)); err != nil {
			return err
		}
		for _, s := range r.Sentinels {
			got, err := c.Do(ctx, s.Addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName)
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", s.Addr, err)
			}
			if a, ok := got.([]any); !ok || len(a) != 2 || fmt.Sprint(a[0], ":", a[1]) != master {
				return fmt.Errorf("sentinel %s names master %v, want %s", s.Addr, got, master)
			}
			reps, err := c.Do(ctx, s.Addr, "SENTINEL", "REPLICAS", MasterName)
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", s.Addr, err)
			}
			list, _ := reps.([]any)
			if len(list) < r.liveReplicas(master) {
				return fmt.Errorf("sentinel %s knows %d replicas of %s", s.Addr, len(list), master)
			}
			// A Sentinel lists a replica as soon as the master's INFO names
			// it, but promotes only one it has had an INFO reply from:
			// until then SENTINEL FAILOVER answers NOGOODSLAVE.
			for _, e := range list {
				if why := unpromotable(e, synced); why != "" {
					return fmt.Errorf("sentinel %s: %s", s.Addr, why)
				}
			}
		}
		return nil
	})
}

// unpromotable returns why a Sentinel would not promote the replica that
// one entry of SENTINEL REPLICAS describes, or "" (also when the entry is
// not one of the synced replicas this check found in sync): flags other than
// "slave", or no INFO reply from it yet (info-refresh is then the time
// since the epoch).
func unpromotable(entry any, synced map[string]bool) string {
	kv, _ := entry.([]any)
	f := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		f[fmt.Sprint(kv[i])] = fmt.Sprint(kv[i+1])
	}
	if !synced[f["ip"]+":"+f["port"]] {
		return "" // a node that is stopped or not checked here
	}
	if f["flags"] != "slave" {
		return fmt.Sprintf("replica %s:%s has flags %q", f["ip"], f["port"], f["flags"])
	}
	if ms, err := strconv.ParseInt(f["info-refresh"], 10, 64); err != nil || ms > 30000 {
		return fmt.Sprintf("replica %s:%s: no recent INFO reply (info-refresh %q)", f["ip"], f["port"], f["info-refresh"])
	}
	return ""
}

// Failover asks the first Sentinel to fail the master over (SENTINEL
// FAILOVER) and returns once it has started one. It sends again while
// the Sentinel answers NOGOODSLAVE (its view of the replicas is older than
// the test's), for up to 10 s; INPROG (a failover of the Sentinels' own
// already runs) counts as started.
func (r *Replicated) Failover(ctx context.Context) error {
	return testkit.WaitFor(ctx, 10*time.Second, 10*time.Millisecond, func() error {
		_, err := (&Cluster{}).Do(ctx, r.Sentinels[0].Addr, "SENTINEL", "FAILOVER", MasterName)
		if err != nil && strings.Contains(err.Error(), "INPROG") {
			return nil
		}
		return err
	})
}

// SentinelMaster returns the master the first Sentinel names.
func (r *Replicated) SentinelMaster(ctx context.Context) (string, error) {
	got, err := (&Cluster{}).Do(ctx, r.Sentinels[0].Addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName)
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %w", r.Sentinels[0].Addr, err)
	}
	a, ok := got.([]any)
	if !ok || len(a) != 2 {
		return "", fmt.Errorf("sentinel %s: master %v", r.Sentinels[0].Addr, got)
	}
	return fmt.Sprint(a[0], ":", a[1]), nil
}

// Node returns the data node (master or replica) at addr, or nil.
func (r *Replicated) Node(addr string) *Node {
	for _, n := range append([]*Node{r.Master}, r.Replicas...) {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

func (r *Replicated) liveReplicas(master string) int {
	n := 0
	for _, x := range append([]*Node{r.Master}, r.Replicas...) {
		if x.Addr != master && !x.exited() {
			n++
		}
	}
	return n
}

// onlineOn reports whether a master's INFO replication lists the replica
// at addr with state=online (it has loaded the data and acknowledges).
func onlineOn(info, addr string) bool {
	host, port, _ := strings.Cut(addr, ":")
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "ip="+host+",port="+port+",") && strings.Contains(line, "state=online") {
			return true
		}
	}
	return false
}

func portOf(addr string) string {
	_, p, _ := strings.Cut(addr, ":")
	return p
}

// Stop kills every process (a paused one too). It is idempotent.
func (r *Replicated) Stop() {
	r.once.Do(func() {
		for _, n := range append(append([]*Node{r.Master}, r.Replicas...), r.Sentinels...) {
			if n != nil {
				_ = n.Resume()
				n.kill()
			}
		}
	})
}
