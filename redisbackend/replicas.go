package redisbackend

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
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

// notReplicated returns ErrNotReplicated with the counts.
func notReplicated(acked int64, want int, timeout time.Duration) error {
	return fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, acked, want, timeout)
}

// replicated is what the WAIT option needs of a client: one connection per
// pipeline, to the master of the keys. A *redis.Client (one server, or a
// failover client) is its own node; a *redis.ClusterClient gives the client
// of the master that serves a key's slot.
type replicated struct {
	single *redis.Client
	cc     *redis.ClusterClient
}

// node returns the client of the master of key.
func (r replicated) node(ctx context.Context, key string) (*redis.Client, error) {
	if r.single != nil {
		return r.single, nil
	}
	return r.cc.MasterForKey(ctx, key)
}

// at returns the client of the cluster node at addr (an ASK target).
func (r replicated) at(ctx context.Context, addr string) (*redis.Client, error) {
	if r.single != nil {
		return r.single, nil
	}
	var mu sync.Mutex
	var found *redis.Client
	err := r.cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	})
	if err == nil && found == nil {
		err = fmt.Errorf("redisbackend: no cluster node %s", addr)
	}
	return found, err
}

// runReplicated runs calls like runAll, each followed, on the connection
// that ran it and in the same round trip, by WAIT WaitReplicas
// WaitTimeout: one pipeline [EVALSHA..., WAIT] per master (in parallel on
// a cluster). acks[i] is the WAIT reply of the pipeline that ran call i:
// the replicas that reached its writes. On a cluster the calls that meet a
// MOVED, ASK (sent to the target with ASKING) or TRYAGAIN are sent again,
// as tryAgain says.
func (b *Backend) runReplicated(ctx context.Context, calls []call) (cmds []*redis.Cmd, acks []int64, err error) {
	cmds = make([]*redis.Cmd, len(calls))
	acks = make([]int64, len(calls))
	args := make([][]any, len(calls))
	pending := make([]int, len(calls))
	for i, c := range calls {
		args[i] = anys(c.args)
		pending[i] = i
	}
	asks := map[int]string{} // call -> ASK target
	deadline := time.Now().Add(tryAgainFor)
	delay := tryAgainFirst
	for {
		// Group the pending calls by master (or ASK target).
		type group struct {
			node   *redis.Client
			idx    []int
			asking bool
		}
		groups := map[string]*group{}
		for _, i := range pending {
			var node *redis.Client
			asking := false
			if addr, ok := asks[i]; ok {
				node, err = b.repl.at(ctx, addr)
				asking = true
			} else {
				node, err = b.repl.node(ctx, calls[i].keys[0])
			}
			if err != nil {
				return nil, nil, err
			}
			key := fmt.Sprint(node.Options().Addr, asking)
			g := groups[key]
			if g == nil {
				g = &group{node: node, asking: asking}
				groups[key] = g
			}
			g.idx = append(g.idx, i)
		}
		errs := make(chan error, len(groups))
		for _, g := range groups {
			go func() { errs <- b.sendReplicated(ctx, g.node, g.asking, calls, args, cmds, acks, g.idx) }()
		}
		for range groups {
			if e := <-errs; e != nil && err == nil {
				err = e
			}
		}
		if err != nil {
			return nil, nil, err
		}
		// The calls a cluster sent elsewhere or refused for now go again.
		again := pending[:0:0]
		clear(asks)
		reload := false
		for _, i := range pending {
			e := cmds[i].Err()
			if e == nil || !isTryAgain(e) {
				continue
			}
			again = append(again, i)
			if f := strings.Fields(e.Error()); len(f) == 3 && f[0] == "ASK" {
				asks[i] = f[2]
			} else {
				reload = true
			}
		}
		if len(again) == 0 || time.Now().After(deadline) {
			return cmds, acks, nil
		}
		pending = again
		if reload && b.repl.cc != nil {
			b.repl.cc.ReloadState(ctx)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return cmds, acks, nil
		case <-t.C:
		}
		delay = min(2*delay, tryAgainMax)
	}
}

// sendReplicated sends the calls of idx to node in one pipeline followed
// by WAIT (after ASKING each, for an ASK target), and the ones the server
// did not know as EVALs in a second one, also followed by WAIT.
func (b *Backend) sendReplicated(ctx context.Context, node *redis.Client, asking bool, calls []call, args [][]any, cmds []*redis.Cmd, acks []int64, idx []int) error {
	send := func(idx []int, eval bool) (*redis.Cmd, error) {
		pipe := node.Pipeline()
		for _, i := range idx {
			if asking {
				pipe.Do(ctx, "asking")
			}
			c := calls[i]
			if eval {
				cmds[i] = pipe.Eval(ctx, c.script.Source, c.keys, args[i]...)
			} else {
				cmds[i] = pipe.EvalSha(ctx, c.script.SHA1, c.keys, args[i]...)
			}
		}
		wait := pipe.Do(ctx, "wait", b.waitReplicas, b.waitTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		for _, i := range idx {
			if err := cmds[i].Err(); err != nil && !isReply(err) {
				return nil, err
			}
		}
		if err := wait.Err(); err != nil && !isReply(err) {
			return nil, err
		}
		return wait, nil
	}
	wait, err := send(idx, false)
	if err != nil {
		return err
	}
	var noscript []int
	n, _ := wait.Int64() // an error reply counts as no replica
	for _, i := range idx {
		if isNoScript(cmds[i].Err()) {
			noscript = append(noscript, i)
			continue
		}
		acks[i] = n
	}
	if len(noscript) == 0 {
		return nil
	}
	wait, err = send(noscript, true)
	if err != nil {
		return err
	}
	n, _ = wait.Int64()
	for _, i := range noscript {
		acks[i] = n
	}
	return nil
}

// unconfirmed releases a grant that too few replicas acknowledged. Its
// error is not returned: the caller returns ErrNotReplicated, and the core
// cleans up by token after a failed step anyway.
func (b *Backend) unconfirmed(ctx context.Context, id, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = b.release(ctx, id, token)
}
