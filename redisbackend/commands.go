package redisbackend

import (
	"context"
	"errors"
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/internal/redisstep"
)

// commands is the go-redis plumbing of the shared step layer.
type commands struct{ c Client }

// Eval sends one call.
func (g commands) Eval(ctx context.Context, c redisstep.Call, eval bool) redisstep.Reply {
	if eval {
		return reply(g.c.Eval(ctx, c.Script.Source, c.Keys, anys(c.Args)...), c.Strings)
	}
	return reply(g.c.EvalSha(ctx, c.Script.SHA1, c.Keys, anys(c.Args)...), c.Strings)
}

// EvalAll sends calls in one pipeline; a ClusterClient splits it per master.
func (g commands) EvalAll(ctx context.Context, calls []redisstep.Call, eval bool) []redisstep.Reply {
	return evalPipe(ctx, g.c.Pipeline(), calls, eval, false, nil)
}

// evalPipe queues calls on pipe (each after ASKING with asking), and then
// more, runs it, and returns the calls' replies.
func evalPipe(ctx context.Context, pipe redis.Pipeliner, calls []redisstep.Call, eval, asking bool, more func(redis.Pipeliner)) []redisstep.Reply {
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		if asking {
			pipe.Do(ctx, "asking")
		}
		if eval {
			cmds[i] = pipe.Eval(ctx, c.Script.Source, c.Keys, anys(c.Args)...)
		} else {
			cmds[i] = pipe.EvalSha(ctx, c.Script.SHA1, c.Keys, anys(c.Args)...)
		}
	}
	if more != nil {
		more(pipe)
	}
	_, _ = pipe.Exec(ctx)
	out := make([]redisstep.Reply, len(cmds))
	for i, cmd := range cmds {
		out[i] = reply(cmd, calls[i].Strings)
	}
	return out
}

func reply(cmd *redis.Cmd, strs bool) redisstep.Reply {
	if _, ok := cmd.Val().([]any); ok {
		if strs {
			vals, err := cmd.StringSlice()
			return redisstep.Reply{Strs: vals, Err: err}
		}
		vals, err := cmd.Int64Slice()
		return redisstep.Reply{Ints: vals, Err: err}
	}
	return redisstep.Reply{Err: cmd.Err()}
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Cluster reports whether the client is a *redis.ClusterClient.
func (g commands) Cluster() bool {
	_, ok := g.c.(*redis.ClusterClient)
	return ok
}

// Kind classifies a go-redis error.
//
// A failed dial, a closed client and a pool timeout are unsent: go-redis
// had no connection to write on. But go-redis resends a command after a
// broken connection (redis.Options.MaxRetries, default 3). A dial failure
// of such a resend hides the first attempt, which may have reached a
// server that then died. The core then skips a cleanup that could not
// reach the dead server either; what the first attempt did expires with
// its TTLs.
func (commands) Kind(err error) redisstep.Kind {
	if err == nil {
		return redisstep.KindOK
	}
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, redis.Nil) {
		switch {
		case redis.HasErrorPrefix(err, "NOSCRIPT"):
			return redisstep.KindNoScript
		case redis.HasErrorPrefix(err, "ASK"):
			return redisstep.KindAsk
		case redis.HasErrorPrefix(err, "TRYAGAIN"), redis.HasErrorPrefix(err, "CLUSTERDOWN"), redis.HasErrorPrefix(err, "MOVED"):
			return redisstep.KindTryAgain
		}
		return redisstep.KindReply
	}
	var op *net.OpError
	if errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) ||
		(errors.As(err, &op) && op.Op == "dial") {
		return redisstep.KindUnsent
	}
	return redisstep.KindUnknown
}
