package rueidisbackend

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/keys"
)

// ErrNotReplicated is backend.ErrNotReplicated (also lock.ErrNotReplicated),
// one sentinel for both Redis adapters. It is returned (wrapped) by a grant
// or an extension that fewer replicas than Options.WaitReplicas acknowledged within
// Options.WaitTimeout. A grant is released again before it is returned; an
// extension leaves the lease as it was (its earlier expiry was confirmed).
// The core wraps it once more, so errors.Is matches both it and
// lock.ErrBackend.
var ErrNotReplicated = backend.ErrNotReplicated

// DefaultWaitTimeout is Options.WaitTimeout's default.
const DefaultWaitTimeout = 100 * time.Millisecond

func notReplicated(acked int64, want int, timeout time.Duration) error {
	return fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, acked, want, timeout)
}

// slotMap is who serves which slot, for the WAIT option on a cluster:
// rueidis routes by slot but does not say where to, and a WAIT must go to
// the connection that ran the steps it confirms.
type slotMap struct {
	mu     sync.Mutex
	owner  []string // slot -> master address; nil until loaded
	loaded time.Time
}

// get returns the master of slot, loading the map when it is missing or
// reload is set (and it is older than a few milliseconds).
func (m *slotMap) get(ctx context.Context, client rueidis.Client, slot int, reload bool) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner == nil || (reload && time.Since(m.loaded) > 5*time.Millisecond) {
		ranges, err := clusterSlots(ctx, client)
		if err != nil {
			return "", err
		}
		owner := make([]string, keys.NumSlots)
		for _, r := range ranges {
			for s := r.lo; s <= r.hi && s < len(owner); s++ {
				owner[s] = r.addr
			}
		}
		m.owner, m.loaded = owner, time.Now()
	}
	if a := m.owner[slot]; a != "" {
		return a, nil
	}
	return "", fmt.Errorf("rueidisbackend: no master serves slot %d", slot)
}

// runReplicated runs calls, each followed, on the connection that ran it
// and in the same round trip, by WAIT WaitReplicas WaitTimeout: one DoMulti
// [EVALSHA..., WAIT] to one server, or per master on a cluster (in
// parallel), sent through the client's own connection to that master (the
// tracking connection in Tracking mode). acks[i] is the WAIT reply of the
// round trip that ran call i. On a cluster the calls that meet a MOVED,
// ASK (sent to the target after ASKING) or TRYAGAIN are sent again, as
// tryAgain says, after the slot map is read again.
func (b *Backend) runReplicated(ctx context.Context, calls []call) ([]rueidis.RedisResult, []int64, error) {
	res := make([]rueidis.RedisResult, len(calls))
	acks := make([]int64, len(calls))
	if b.client.Mode() != rueidis.ClientModeCluster {
		all := make([]int, len(calls))
		for i := range all {
			all[i] = i
		}
		if err := b.sendReplicated(ctx, b.client, false, calls, res, acks, all); err != nil {
			return nil, nil, err
		}
		return res, acks, nil
	}
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	asks := map[int]string{}
	reload := false
	deadline := time.Now().Add(tryAgainFor)
	delay := tryAgainFirst
	for {
		type group struct {
			addr   string
			asking bool
			idx    []int
		}
		groups := map[string]*group{}
		for _, i := range pending {
			addr, asking := asks[i], true
			if addr == "" {
				var err error
				if addr, err = b.slots.get(ctx, b.client, keys.Slot(calls[i].keys[0]), reload); err != nil {
					return nil, nil, err
				}
				asking = false
			}
			key := addr + strconv.FormatBool(asking)
			g := groups[key]
			if g == nil {
				g = &group{addr: addr, asking: asking}
				groups[key] = g
			}
			g.idx = append(g.idx, i)
		}
		nodes := b.client.Nodes()
		errs := make(chan error, len(groups))
		for _, g := range groups {
			node := nodes[g.addr]
			if node == nil {
				// rueidis does not know the node yet: the step goes
				// through the cluster client, which follows the slot, and
				// its WAIT counts as none (see notReplicated).
				go func() { errs <- b.sendUnrouted(ctx, calls, res, acks, g.idx) }()
				continue
			}
			go func() { errs <- b.sendReplicated(ctx, node, g.asking, calls, res, acks, g.idx) }()
		}
		var err error
		for range groups {
			if e := <-errs; e != nil && err == nil {
				err = e
			}
		}
		if err != nil {
			return nil, nil, err
		}
		again := pending[:0:0]
		clear(asks)
		reload = false
		for _, i := range pending {
			re, ok := rueidis.IsRedisErr(res[i].Error())
			if !ok {
				continue
			}
			if addr, ask := re.IsAsk(); ask {
				asks[i] = addr
			} else if _, moved := re.IsMoved(); moved || re.IsTryAgain() || re.IsClusterDown() {
				reload = true
			} else {
				continue
			}
			again = append(again, i)
		}
		if len(again) == 0 || time.Now().After(deadline) {
			return res, acks, nil
		}
		pending = again
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, acks, nil
		case <-t.C:
		}
		delay = min(2*delay, tryAgainMax)
	}
}

// sendReplicated sends the calls of idx through node (a client of one
// server: no redirects followed) in one DoMulti followed by WAIT (after
// ASKING each, for an ASK target), and the ones the server did not know
// as EVALs in a second one, also followed by WAIT.
func (b *Backend) sendReplicated(ctx context.Context, node rueidis.Client, asking bool, calls []call, res []rueidis.RedisResult, acks []int64, idx []int) error {
	send := func(idx []int, eval bool) error {
		cmds := make(rueidis.Commands, 0, 2*len(idx)+1)
		at := make([]int, len(idx)) // position of call idx[j] in cmds
		for j, i := range idx {
			if asking {
				cmds = append(cmds, node.B().Asking().Build())
			}
			c := calls[i]
			at[j] = len(cmds)
			if eval {
				cmds = append(cmds, node.B().Eval().Script(c.script.Source).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build())
			} else {
				cmds = append(cmds, node.B().Evalsha().Sha1(c.script.SHA1).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build())
			}
		}
		// Arbitrary, not B().Wait(): rueidis sends a command it knows to
		// block on a connection of its own, and WAIT counts the replicas
		// that reached the writes of its connection.
		cmds = append(cmds, node.B().Arbitrary("WAIT").Args(strconv.Itoa(b.waitReplicas), strconv.FormatInt(b.waitTimeout.Milliseconds(), 10)).Build())
		got := node.DoMulti(ctx, cmds...)
		n, _ := got[len(got)-1].AsInt64() // an error counts as no replica
		for j, i := range idx {
			res[i] = got[at[j]]
			if err := res[i].NonRedisError(); err != nil {
				return err
			}
			acks[i] = n
		}
		return nil
	}
	if err := send(idx, false); err != nil {
		return err
	}
	var noscript []int
	for _, i := range idx {
		if isNoScript(res[i].Error()) {
			noscript = append(noscript, i)
		}
	}
	if len(noscript) == 0 {
		return nil
	}
	return send(noscript, true)
}

// sendUnrouted runs the calls of idx through the cluster client, which
// finds their node; with no WAIT on that connection, none is confirmed.
func (b *Backend) sendUnrouted(ctx context.Context, calls []call, res []rueidis.RedisResult, acks []int64, idx []int) error {
	for _, i := range idx {
		c := calls[i]
		res[i] = b.run(ctx, c.script, c.keys, c.args)
		if err := res[i].NonRedisError(); err != nil {
			return err
		}
		acks[i] = 0
	}
	return nil
}

// unconfirmed releases a grant that too few replicas acknowledged. Its
// error is not returned: the caller returns ErrNotReplicated, and the core
// cleans up by token after a failed step anyway.
func (b *Backend) unconfirmed(ctx context.Context, id, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = b.Release(ctx, id, token)
}
