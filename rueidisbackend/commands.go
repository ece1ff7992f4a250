package rueidisbackend

import (
	"context"
	"errors"
	"net"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/engine"
)

// commands is the adapter's client as the engine's Runner sends with it
// (engine.Sender): rueidis's commands for the engine's calls.
type commands struct{ c rueidis.Client }

// Eval sends one call.
func (r commands) Eval(ctx context.Context, c engine.Call, eval bool) engine.Reply {
	return reply(r.c.Do(ctx, script(r.c, c, eval)), c.Strings)
}

// EvalAll sends calls in one DoMulti; a cluster client splits it per
// master.
func (r commands) EvalAll(ctx context.Context, calls []engine.Call, eval bool) []engine.Reply {
	cmds := make(rueidis.Commands, len(calls))
	for i, c := range calls {
		cmds[i] = script(r.c, c, eval)
	}
	return replies(r.c.DoMulti(ctx, cmds...), calls)
}

// script builds c's EVALSHA, or EVAL with eval.
func script(client rueidis.Client, c engine.Call, eval bool) rueidis.Completed {
	if eval {
		return client.B().Eval().Script(c.Script.Source).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
	}
	return client.B().Evalsha().Sha1(c.Script.SHA1).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
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
