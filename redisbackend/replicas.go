package redisbackend

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/engine"
)

// replicas is what the WAIT option needs of a go-redis client: one
// connection per pipeline, to the master of the keys. A *redis.Client (one
// server, or a failover client) is its own node; a *redis.ClusterClient
// gives the client of the master that serves a key's slot.
type replicas struct {
	single *redis.Client
	cc     *redis.ClusterClient
	nodes  sync.Map // address -> *redis.Client, the masters Master found
	cmds   commands // builds the calls' commands
}

// newReplicas checks that client can run WAIT after a step on its
// connection, within its ReadTimeout.
func newReplicas(client Client, cmds commands, waitTimeout time.Duration) (*replicas, error) {
	r := &replicas{cmds: cmds}
	var readTimeout time.Duration
	switch c := client.(type) {
	case *redis.Client:
		r.single, readTimeout = c, c.Options().ReadTimeout
	case *redis.ClusterClient:
		r.cc, readTimeout = c, c.Options().ReadTimeout
	default:
		return nil, &backend.ArgumentError{Arg: "opts.WaitReplicas", Reason: fmt.Sprintf("needs a *redis.Client or *redis.ClusterClient (WAIT must follow a step on its connection); %T is neither", client)}
	}
	if readTimeout == 0 {
		readTimeout = 3 * time.Second // go-redis's default
	}
	if readTimeout > 0 && waitTimeout >= readTimeout {
		return nil, &backend.ArgumentError{Arg: "opts.WaitTimeout", Reason: fmt.Sprintf("%v must be below the client's ReadTimeout %v (a WAIT is read with it)", waitTimeout, readTimeout)}
	}
	return r, nil
}

// Master returns the address of the master of key ("" on one server).
func (r *replicas) Master(ctx context.Context, key string) (string, error) {
	if r.single != nil {
		return "", nil
	}
	c, err := r.cc.MasterForKey(ctx, key)
	if err != nil {
		return "", err
	}
	addr := c.Options().Addr
	r.nodes.Store(addr, c)
	return addr, nil
}

// Reload reads the cluster's slots again.
func (r *replicas) Reload(ctx context.Context) {
	if r.cc != nil {
		r.cc.ReloadState(ctx)
	}
}

// EvalWait sends calls and WAIT in one pipeline on the node at addr.
func (r *replicas) EvalWait(ctx context.Context, addr string, asking bool, calls []engine.Call, via engine.Via, n int, timeout time.Duration) ([]engine.Reply, int64) {
	node, err := r.node(ctx, addr)
	if err != nil {
		out := make([]engine.Reply, len(calls))
		for i := range out {
			out[i].Err = err
		}
		return out, 0
	}
	var wait *redis.Cmd
	res := r.cmds.evalPipe(ctx, node.Pipeline(), calls, via, asking, func(p redis.Pipeliner) {
		wait = p.Do(ctx, "wait", n, timeout.Milliseconds())
	})
	acks, _ := wait.Int64() // an error reply counts as no replica
	return res, acks
}

// node returns the client of the node at addr: a master Master found, or
// an ASK target.
func (r *replicas) node(ctx context.Context, addr string) (*redis.Client, error) {
	if r.single != nil {
		return r.single, nil
	}
	if c, ok := r.nodes.Load(addr); ok {
		return c.(*redis.Client), nil
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
