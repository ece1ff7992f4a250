// The local Redis Cluster of these tests: redis-server
// processes started with --cluster-enabled on free loopback ports in a
// temporary directory, joined by `redis-cli --cluster create`, without
// persistence, and stopped (killed, directory removed) at the end.
//
// [Shared] starts one cluster per test binary on first use (3 masters, one
// replica each) and [Main] stops it after the tests; [Start] starts a
// private one. REDIS_CLUSTER_ADDRS (comma-separated host:port of the nodes
// of a running cluster) makes Shared use that cluster instead; tests that
// reconfigure a cluster (slot migration) call [Cluster.RequireOwned] and
// skip on one they did not start.
//
// When redis-server or redis-cli cannot be found (PATH, or the variables
// REDIS_SERVER and REDIS_CLI naming the binaries), tests are skipped with
// the reason, except when the CI variable is set: then they fail, so that
// CI never passes by skipping.

package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/redisserver"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// Options shape a cluster.
type Options struct {
	// Masters is the number of masters. Default: 3 (the fewest Redis
	// Cluster accepts).
	Masters int
	// Replicas is the number of replicas per master. Default: 0.
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a node may be
	// unreachable before it counts as failing. Default: 3s.
	NodeTimeout time.Duration
}

// Node is one redis-server of a cluster. Those this package started have
// a process (kill, pause, resume); those of REDIS_CLUSTER_ADDRS do not.
type Node struct {
	Addr string // host:port of clients

	proc *redisserver.Server // nil for a node of an external cluster
}

// Cluster is a running Redis Cluster.
type Cluster struct {
	// Nodes are the nodes in the order they were created; which of them
	// are masters is the cluster's business (see Masters).
	Nodes []*Node

	opts     Options // the shape WaitHealthy waits for
	external bool
	dir      string
	rmDir    bool
	once     sync.Once
}

// Shared cluster of this test binary, started by the first call to Shared.
var (
	sharedOnce sync.Once
	shared     *Cluster
	sharedErr  error
)

// SharedOptions are the options of the Shared cluster: three masters with
// one replica each.
var SharedOptions = Options{Masters: 3, Replicas: 1}

// Shared returns the cluster shared by the tests of this binary:
// REDIS_CLUSTER_ADDRS when set, otherwise a cluster of SharedOptions
// started on first use. A package that uses it calls [Main] from its
// TestMain.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	sharedOnce.Do(func() {
		if env := os.Getenv("REDIS_CLUSTER_ADDRS"); env != "" {
			c := &Cluster{external: true}
			for _, a := range strings.Split(env, ",") {
				c.Nodes = append(c.Nodes, &Node{Addr: strings.TrimSpace(a)})
			}
			shared = c
			return
		}
		var dir string
		dir, sharedErr = os.MkdirTemp("", "rediscluster-")
		if sharedErr != nil {
			return
		}
		shared, sharedErr = start(SharedOptions, dir, true)
	})
	if sharedErr != nil {
		fail(t, sharedErr)
	}
	return shared
}

// Main takes the machine-wide lock of the test binaries that start
// redis-servers (see redisserver.Exclusive), runs the tests and then stops
// the shared cluster, if one was started. Use it as: func TestMain(m *testing.M) { os.Exit(Main(m)) }.
func Main(m *testing.M) int {
	redisserver.HoldExclusive()
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	return code
}

// Start starts a private cluster for t and stops it at t's cleanup.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	c, err := start(o, t.TempDir(), false)
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(c.Stop)
	return c
}

// RequireOwned skips t when the cluster is one this package did not start
// (REDIS_CLUSTER_ADDRS): it must not be reconfigured.
func (c *Cluster) RequireOwned(t testing.TB) {
	t.Helper()
	if c.external {
		t.Skip("rediscluster: the cluster of REDIS_CLUSTER_ADDRS is not reconfigured by tests")
	}
}

// Addrs returns the addresses of every node.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Stop kills every node, waits for them to exit and removes the directory
// of a cluster it created. It is idempotent; it does nothing to an external
// cluster.
func (c *Cluster) Stop() {
	c.once.Do(func() {
		for _, n := range c.Nodes {
			n.kill()
		}
		if c.rmDir {
			_ = os.RemoveAll(c.dir)
		}
	})
}

func (n *Node) kill() {
	if n.proc != nil {
		n.proc.Close()
	}
}

// Kill kills the node's process and waits for it to exit.
func (n *Node) Kill() { n.kill() }

// Pause stops the node's process (SIGSTOP) and returns once the kernel
// shows it stopped: it answers nothing, and a replica acknowledges
// nothing, until Resume.
func (n *Node) Pause() error {
	if n.proc == nil {
		return fmt.Errorf("rediscluster: node %s was not started here", n.Addr)
	}
	return n.proc.Pause()
}

// Resume continues a paused node's process (SIGCONT).
func (n *Node) Resume() error {
	if n.proc == nil {
		return fmt.Errorf("rediscluster: node %s was not started here", n.Addr)
	}
	return n.proc.Resume()
}

func (n *Node) exited() bool { return n.proc != nil && !n.proc.Running() }

// fail ends t for err, an error of starting a cluster: a skip (or, with
// CI set, a failure) when a binary is missing.
func fail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, redisserver.ErrNoBinary) {
		err = fmt.Errorf("%w (install redis-server and redis-cli, or set REDIS_CLUSTER_ADDRS)", err)
	}
	redisserver.Fail(t, err)
}

// startTimeout bounds the whole start of a cluster.
const startTimeout = 30 * time.Second

func start(o Options, dir string, rmDir bool) (c *Cluster, err error) {
	if o.Masters == 0 {
		o.Masters = 3
	}
	if o.Masters < 3 {
		return nil, fmt.Errorf("rediscluster: %d masters: Redis Cluster needs at least 3", o.Masters)
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = 3 * time.Second
	}
	server, err := redisserver.Binary()
	if err != nil {
		return nil, err
	}
	cli, err := redisserver.LookBinary("REDIS_CLI", "redis-cli")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c = &Cluster{opts: o, dir: dir, rmDir: rmDir}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	for i := range o.Masters * (1 + o.Replicas) {
		n, err := startNode(server, filepath.Join(dir, fmt.Sprint("node", i)), o.NodeTimeout)
		if err != nil {
			return c, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", fmt.Sprint(o.Replicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return c, fmt.Errorf("redis-cli --cluster create: %v: %s", err, redisserver.Tail(string(out)))
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return c, err
	}
	return c, nil
}

func startNode(bin, dir string, nodeTimeout time.Duration) (*Node, error) {
	return startProcess(bin, dir, func(port int, logPath string) ([]string, error) {
		bus, err := redisserver.FreePort()
		if err != nil {
			return nil, err
		}
		_ = os.Remove(filepath.Join(dir, "nodes.conf")) // from a failed attempt
		return append(redisserver.DefaultArgs(port, dir, logPath),
			"--cluster-port", fmt.Sprint(bus), // explicit: port+10000 may be taken or out of range
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", // relative to --dir
			"--cluster-node-timeout", fmt.Sprint(nodeTimeout.Milliseconds()),
		), nil
	})
}

// startProcess starts bin with the arguments argv returns, in dir, on a
// free port, with redisserver.Start (nil argv: a plain server).
func startProcess(bin, dir string, argv func(port int, logPath string) ([]string, error)) (*Node, error) {
	p, err := redisserver.Start(redisserver.Options{Binary: bin, Dir: dir, Argv: argv})
	if err != nil {
		return nil, err
	}
	return &Node{Addr: p.Addr, proc: p}, nil
}

// client returns a client of one node, without redirects: the admin
// commands are meant for that node. The caller closes it.
func client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 5 * time.Second, PoolSize: 1})
}

// streaming checks that the master at addr streams its writes to at least
// replicas replicas: it writes a key that expires at once (of the given
// hash tag, so that a cluster master serves it) and WAITs for them. After
// a diskless full sync a master shows the replica online but sends it
// nothing until the replica's first acknowledgement, up to a second
// later: WAIT would count it out until then.
func streaming(ctx context.Context, addr, tag string, replicas int) error {
	c := client(addr)
	defer c.Close()
	pipe := c.Pipeline()
	pipe.Set(ctx, "rediscluster:{"+tag+"}:synced", 1, time.Millisecond)
	w := pipe.Do(ctx, "WAIT", replicas, 50)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	if n, _ := w.Int(); n < replicas {
		return fmt.Errorf("%s: %d of %d replicas acknowledge writes", addr, n, replicas)
	}
	return nil
}

// Do runs one command on the node at addr (no redirects) and returns its
// reply.
func (c *Cluster) Do(ctx context.Context, addr string, args ...any) (any, error) {
	cl := client(addr)
	defer cl.Close()
	return cl.Do(ctx, args...).Result()
}

func (c *Cluster) doString(ctx context.Context, addr string, args ...any) (string, error) {
	cl := client(addr)
	defer cl.Close()
	return cl.Do(ctx, args...).Text()
}

// WaitHealthy waits until every node reports cluster_state:ok, every
// node sees the same slot owners for all 16384 slots and the cluster's
// shape (masters, replicas per master), and every replica's link to its
// master is up (so that WAIT can be answered).
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	return testkit.WaitFor(ctx, 10*time.Second, 10*time.Millisecond, func() error {
		var first map[int]string
		for _, n := range c.Nodes {
			info, err := c.doString(ctx, n.Addr, "CLUSTER", "INFO")
			if err != nil {
				return fmt.Errorf("%s: %w", n.Addr, err)
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster_state is not ok", n.Addr)
			}
			nodes, err := c.nodesOf(ctx, n.Addr)
			if err != nil {
				return err
			}
			owners := map[int]string{}
			covered := 0
			replicas := map[string]int{}
			for _, x := range nodes {
				if x.Replica() {
					replicas[x.MasterID]++
				}
				if x.Replica() && x.MasterLinkDown() {
					return fmt.Errorf("%s: replica %s has no link to its master", n.Addr, x.Addr)
				}
				for _, r := range x.Slots {
					for s := r[0]; s <= r[1]; s++ {
						owners[s] = x.Addr
						covered++
					}
				}
			}
			if covered != 16384 {
				return fmt.Errorf("%s: sees %d of 16384 slots", n.Addr, covered)
			}
			masters := 0
			for _, x := range nodes {
				if x.Master() && len(x.Slots) > 0 {
					masters++
					if c.opts.Masters > 0 && replicas[x.ID] != c.opts.Replicas {
						return fmt.Errorf("%s: sees %d replicas of %s, want %d", n.Addr, replicas[x.ID], x.Addr, c.opts.Replicas)
					}
				}
			}
			if c.opts.Masters > 0 && masters != c.opts.Masters {
				return fmt.Errorf("%s: sees %d masters with slots, want %d", n.Addr, masters, c.opts.Masters)
			}
			if c.opts.Replicas > 0 {
				for _, x := range nodes {
					if x.Master() && len(x.Slots) > 0 && x.Addr == n.Addr {
						if err := streaming(ctx, n.Addr, tagOf(x.Slots[0][0]), c.opts.Replicas); err != nil {
							return err
						}
					}
				}
			}
			if first == nil {
				first = owners
			} else if !mapsEqual(first, owners) {
				return fmt.Errorf("%s: sees other slot owners than %s", n.Addr, c.Nodes[0].Addr)
			}
			if role, err := c.doString(ctx, n.Addr, "INFO", "replication"); err != nil {
				return err
			} else if strings.Contains(role, "role:slave") && !strings.Contains(role, "master_link_status:up") {
				return fmt.Errorf("%s: replica not in sync with its master", n.Addr)
			}
		}
		return nil
	})
}

// tagOf returns a hash tag whose slot is slot.
func tagOf(slot int) string {
	for i := 0; ; i++ {
		if t := fmt.Sprint("t", i); keys.Slot(t) == slot {
			return t
		}
	}
}

func mapsEqual(a, b map[int]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// NodeInfo is one line of CLUSTER NODES.
type NodeInfo struct {
	ID       string
	Addr     string // host:port
	Flags    []string
	MasterID string   // of a replica; "" for a master
	Link     string   // "connected" or "disconnected"
	Slots    [][2]int // slot ranges served (masters), without migration markers
}

// Replica reports whether the node is a replica.
func (n NodeInfo) Replica() bool { return slices.Contains(n.Flags, "slave") }

// Master reports whether the node is a master.
func (n NodeInfo) Master() bool { return slices.Contains(n.Flags, "master") }

// MasterLinkDown reports whether the node is marked failing or its link is
// down.
func (n NodeInfo) MasterLinkDown() bool {
	return n.Link != "connected" || slices.Contains(n.Flags, "fail") || slices.Contains(n.Flags, "fail?")
}

// Topology returns CLUSTER NODES as seen by the node at addr (the first
// node when addr is "").
func (c *Cluster) Topology(ctx context.Context, addr string) ([]NodeInfo, error) {
	if addr == "" {
		addr = c.Nodes[0].Addr
	}
	return c.nodesOf(ctx, addr)
}

func (c *Cluster) nodesOf(ctx context.Context, addr string) ([]NodeInfo, error) {
	text, err := c.doString(ctx, addr, "CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER NODES: %w", addr, err)
	}
	var out []NodeInfo
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n := NodeInfo{ID: f[0], Flags: strings.Split(f[2], ","), Link: f[7]}
		n.Addr, _, _ = strings.Cut(f[1], "@")
		n.Flags = slices.DeleteFunc(n.Flags, func(s string) bool { return s == "myself" })
		if f[3] != "-" {
			n.MasterID = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") { // [slot->-id] or [slot-<-id]: migration markers
				continue
			}
			lo, hi, ok := strings.Cut(s, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				continue
			}
			b := a
			if ok {
				if b, err = strconv.Atoi(hi); err != nil {
					continue
				}
			}
			n.Slots = append(n.Slots, [2]int{a, b})
		}
		out = append(out, n)
	}
	return out, nil
}

// Masters returns the addresses of the masters, as the first node sees
// them, in the order of their first slot.
func (c *Cluster) Masters(ctx context.Context) ([]string, error) {
	nodes, err := c.Topology(ctx, "")
	if err != nil {
		return nil, err
	}
	type m struct {
		addr  string
		first int
	}
	var ms []m
	for _, n := range nodes {
		if n.Master() && len(n.Slots) > 0 {
			ms = append(ms, m{n.Addr, n.Slots[0][0]})
		}
	}
	slices.SortFunc(ms, func(a, b m) int { return a.first - b.first })
	out := make([]string, len(ms))
	for i, x := range ms {
		out[i] = x.addr
	}
	return out, nil
}

// SlotOwner returns the address of the master that serves slot, as the
// first node sees it.
func (c *Cluster) SlotOwner(ctx context.Context, slot int) (string, error) {
	nodes, err := c.Topology(ctx, "")
	if err != nil {
		return "", err
	}
	for _, n := range nodes {
		for _, r := range n.Slots {
			if r[0] <= slot && slot <= r[1] {
				return n.Addr, nil
			}
		}
	}
	return "", fmt.Errorf("rediscluster: no node serves slot %d", slot)
}

// ReplicasOf returns the addresses of the replicas of the master at addr.
func (c *Cluster) ReplicasOf(ctx context.Context, addr string) ([]string, error) {
	nodes, err := c.Topology(ctx, "")
	if err != nil {
		return nil, err
	}
	var id string
	for _, n := range nodes {
		if n.Addr == addr {
			id = n.ID
		}
	}
	if id == "" {
		return nil, fmt.Errorf("rediscluster: no node %s", addr)
	}
	var out []string
	for _, n := range nodes {
		if n.MasterID == id {
			out = append(out, n.Addr)
		}
	}
	return out, nil
}

func (c *Cluster) nodeID(ctx context.Context, addr string) (string, error) {
	return c.doString(ctx, addr, "CLUSTER", "MYID")
}

// MoveHooks let a test act at each stage of MoveSlot. A hook's error does
// not stop the move (a slot left open would stall its keys for good): the
// move is finished and the first hook error returned.
type MoveHooks struct {
	// Opened runs once the slot is IMPORTING on the target and MIGRATING
	// on the source, before any key moves.
	Opened func() error
	// Moved runs after each key moved (MIGRATE of one key).
	Moved func(key string) error
	// Closing runs after the last key moved, before SETSLOT NODE.
	Closing func() error
}

// MoveSlot moves slot from its master to the master at to, the way
// redis-cli --cluster reshard does: CLUSTER SETSLOT IMPORTING on the
// target and MIGRATING on the source, MIGRATE of every key (one key per
// MIGRATE, so that a test sees every partial state), then CLUSTER
// SETSLOT NODE on the target, the source and every other master. Keys that
// clients write to the source meanwhile are moved too. When a command of
// the move fails, the slot is closed again (SETSLOT STABLE on both nodes).
func (c *Cluster) MoveSlot(ctx context.Context, slot int, to string, h MoveHooks) (err error) {
	from, err := c.SlotOwner(ctx, slot)
	if err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("rediscluster: slot %d is already on %s", slot, to)
	}
	fromID, err := c.nodeID(ctx, from)
	if err != nil {
		return err
	}
	toID, err := c.nodeID(ctx, to)
	if err != nil {
		return err
	}
	var hookErr error
	hook := func(f func() error) {
		if err := f(); err != nil && hookErr == nil {
			hookErr = err
		}
	}
	defer func() {
		if err != nil {
			_, _ = c.Do(context.Background(), from, "CLUSTER", "SETSLOT", slot, "STABLE")
			_, _ = c.Do(context.Background(), to, "CLUSTER", "SETSLOT", slot, "STABLE")
		} else {
			err = hookErr
		}
	}()
	if _, err := c.Do(ctx, to, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID); err != nil {
		return fmt.Errorf("SETSLOT IMPORTING on %s: %w", to, err)
	}
	if _, err := c.Do(ctx, from, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID); err != nil {
		return fmt.Errorf("SETSLOT MIGRATING on %s: %w", from, err)
	}
	if h.Opened != nil {
		hook(h.Opened)
	}
	host, port, _ := net.SplitHostPort(to)
	for {
		ks, err := c.Do(ctx, from, "CLUSTER", "GETKEYSINSLOT", slot, 1)
		if err != nil {
			return fmt.Errorf("GETKEYSINSLOT on %s: %w", from, err)
		}
		list, _ := ks.([]any)
		if len(list) == 0 {
			break
		}
		key, _ := list[0].(string)
		// MIGRATE answers NOKEY when the key expired meanwhile: fine.
		if _, err := c.Do(ctx, from, "MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS", key); err != nil && !strings.Contains(err.Error(), "NOKEY") {
			return fmt.Errorf("MIGRATE %q from %s: %w", key, from, err)
		}
		if h.Moved != nil {
			hook(func() error { return h.Moved(key) })
		}
	}
	if h.Closing != nil {
		hook(h.Closing)
	}
	// The target first, so that the slot is never served by nobody; then
	// the source, which stops redirecting with ASK and answers MOVED.
	masters, err := c.Masters(ctx)
	if err != nil {
		return err
	}
	order := []string{to, from}
	for _, m := range masters {
		if m != to && m != from {
			order = append(order, m)
		}
	}
	for _, addr := range order {
		if _, err := c.Do(ctx, addr, "CLUSTER", "SETSLOT", slot, "NODE", toID); err != nil {
			return fmt.Errorf("SETSLOT NODE on %s: %w", addr, err)
		}
	}
	return c.WaitHealthy(ctx)
}
