package rueidisbackend

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/internal/redis/engine"
	"github.com/redislocker/lock/internal/redis/keys"
)

// replicas is what the WAIT option needs of a rueidis client. A WAIT must
// go to the connection that ran the steps it confirms. So it needs who
// serves which slot (rueidis routes by slot but does not say where to),
// and the client's own connection to that node (the tracking connection in
// Tracking mode).
type replicas struct {
	client rueidis.Client

	mu     sync.Mutex
	owner  []string // slot -> master address; nil until loaded
	loaded time.Time
	stale  bool // Reload was called
}

// Master returns the master of key's slot ("" on one server), loading the
// slot map when it is missing, or stale and older than a few milliseconds.
func (r *replicas) Master(ctx context.Context, key string) (string, error) {
	if r.client.Mode() != rueidis.ClientModeCluster {
		return "", nil
	}
	slot := keys.Slot(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.owner == nil || (r.stale && time.Since(r.loaded) > 5*time.Millisecond) {
		ranges, err := clusterSlots(ctx, r.client)
		if err != nil {
			return "", err
		}
		owner := make([]string, keys.NumSlots)
		for _, sr := range ranges {
			for s := sr.lo; s <= sr.hi && s < len(owner); s++ {
				owner[s] = sr.addr
			}
		}
		r.owner, r.loaded, r.stale = owner, time.Now(), false
	}
	if a := r.owner[slot]; a != "" {
		return a, nil
	}
	return "", fmt.Errorf("rueidisbackend: no master serves slot %d", slot)
}

// Reload marks the slot map stale.
func (r *replicas) Reload(context.Context) {
	r.mu.Lock()
	r.stale = true
	r.mu.Unlock()
}

// EvalWait sends calls and WAIT in one DoMulti through the client's
// connection to the node at addr. A node rueidis does not know yet gets
// the calls through the cluster client, which follows the slot; with no
// WAIT on that connection none counts as acknowledged.
func (r *replicas) EvalWait(ctx context.Context, addr string, asking bool, calls []engine.Call, via engine.Via, n int, timeout time.Duration) ([]engine.Reply, int64) {
	node := r.client
	if r.client.Mode() == rueidis.ClientModeCluster {
		if node = r.client.Nodes()[addr]; node == nil {
			return commands{r.client}.EvalAll(ctx, calls, via), 0
		}
	}
	cmds := make(rueidis.Commands, 0, 2*len(calls)+1)
	at := make([]int, len(calls)) // position of calls[i] in cmds
	for i, c := range calls {
		if asking {
			cmds = append(cmds, node.B().Asking().Build())
		}
		at[i] = len(cmds)
		cmds = append(cmds, script(node, c, via))
	}
	// Arbitrary, not B().Wait(): rueidis sends a command it knows to block
	// on a connection of its own, and WAIT counts the replicas that
	// reached the writes of its connection.
	cmds = append(cmds, node.B().Arbitrary("WAIT").Args(strconv.Itoa(n), strconv.FormatInt(timeout.Milliseconds(), 10)).Build())
	got := node.DoMulti(ctx, cmds...)
	acks, _ := got[len(got)-1].AsInt64() // an error counts as no replica
	out := make([]engine.Reply, len(calls))
	for i := range calls {
		out[i] = reply(got[at[i]], calls[i].Strings)
	}
	return out, acks
}
