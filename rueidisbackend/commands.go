package rueidisbackend

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/engine"
)

// commands is the adapter's client as the engine's Runner sends with it
// (engine.Sender): rueidis's commands for the engine's calls.
type commands struct{ c rueidis.Client }

// Eval sends one call.
func (r commands) Eval(ctx context.Context, c engine.Call, via engine.Via) engine.Reply {
	return reply(r.c.Do(ctx, script(r.c, c, via)), c.Strings)
}

// EvalAll sends calls in one DoMulti; a cluster client splits it per
// master.
func (r commands) EvalAll(ctx context.Context, calls []engine.Call, via engine.Via) []engine.Reply {
	cmds := make(rueidis.Commands, len(calls))
	for i, c := range calls {
		cmds[i] = script(r.c, c, via)
	}
	return replies(r.c.DoMulti(ctx, cmds...), calls)
}

// script builds c's EVALSHA, EVAL or FCALL.
func script(client rueidis.Client, c engine.Call, via engine.Via) rueidis.Completed {
	switch via {
	case engine.Eval:
		return client.B().Eval().Script(c.Script.Source).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
	case engine.FCall:
		return client.B().Fcall().Function(c.Script.Function).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
	}
	return client.B().Evalsha().Sha1(c.Script.SHA1).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
}

// LoadLibrary sends FUNCTION LOAD of src (engine.Loader); on Redis Cluster
// to every master, through the client's connection to it (as pingNodes).
func (r commands) LoadLibrary(ctx context.Context, src string) []error {
	load := func(c rueidis.Client) error { return c.Do(ctx, c.B().FunctionLoad().FunctionCode(src).Build()).Error() }
	if r.c.Mode() != rueidis.ClientModeCluster {
		if err := load(r.c); err != nil {
			return []error{err}
		}
		return nil
	}
	slots, err := clusterSlots(ctx, r.c)
	if err != nil {
		return []error{err}
	}
	nodes := r.c.Nodes()
	masters := map[string]rueidis.Client{}
	for _, s := range slots {
		n, ok := nodes[s.addr]
		if !ok {
			return []error{fmt.Errorf("rueidisbackend: the client knows no node %s", s.addr)}
		}
		masters[s.addr] = n
	}
	errs := make(chan error, len(masters))
	for _, n := range masters {
		go func() { errs <- load(n) }()
	}
	var out []error
	for range masters {
		if err := <-errs; err != nil {
			out = append(out, err)
		}
	}
	return out
}

func reply(r rueidis.RedisResult, strs bool) engine.Reply {
	if err := r.Error(); err != nil {
		return engine.Reply{Err: err}
	}
	if m, err := r.ToMessage(); err == nil && m.IsArray() {
		if strs {
			vals, err := m.AsStrSlice()
			return engine.Reply{Strs: vals, Err: err}
		}
		vals, err := m.AsIntSlice()
		return engine.Reply{Ints: vals, Err: err}
	}
	return engine.Reply{}
}

func replies(rs []rueidis.RedisResult, calls []engine.Call) []engine.Reply {
	out := make([]engine.Reply, len(rs))
	for i, r := range rs {
		out[i] = reply(r, calls[i].Strings)
	}
	return out
}

// Classify classifies a rueidis error. A failed dial is unsent: rueidis writes
// a command only on a connection it has, and never resends a write.
func (commands) Classify(err error) (backend.Kind, engine.Refusal) {
	if err == nil {
		return backend.KindAnswer, engine.NotRefused
	}
	if re, ok := rueidis.IsRedisErr(err); ok && !re.IsNil() {
		if re.IsNoScript() {
			return backend.KindAnswer, engine.NoScript
		}
		if _, ask := re.IsAsk(); ask {
			return backend.KindAnswer, engine.Ask
		}
		if _, moved := re.IsMoved(); moved || re.IsTryAgain() || re.IsClusterDown() {
			return backend.KindAnswer, engine.TryAgain
		}
		return backend.KindAnswer, engine.NotRefused
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return backend.KindUnsent, engine.NotRefused
	}
	return backend.KindUnknown, engine.NotRefused
}
