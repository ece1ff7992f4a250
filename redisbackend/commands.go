package redisbackend

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/engine"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// commands is the adapter's client as the engine's Runner sends with it
// (engine.Sender): go-redis's commands for the engine's calls.
type commands struct {
	c Client
	// consts are the scripts' constant arguments (engine.ConstArgs),
	// boxed once: go-redis takes arguments as []any, and boxing a string
	// allocates.
	consts []boxed
	// keys holds, per count of keys up to 7, the last call's keys boxed:
	// the steps of one id (acquire, release, ...) name the same keys.
	keys *[8]atomic.Pointer[boxedKeys]
}

// boxedKeys are a call's keys and their boxes. Neither is changed after
// it is stored.
type boxedKeys struct {
	keys []string
	v    []any
}

type boxed struct {
	s string
	v any
}

// newCommands returns the plumbing of c for steps with the constant
// arguments consts.
func newCommands(c Client, consts []string) commands {
	g := commands{c: c, keys: new([8]atomic.Pointer[boxedKeys])}
	for _, s := range consts {
		g.consts = append(g.consts, boxed{s, s})
	}
	for _, sc := range scripts.All() {
		g.consts = append(g.consts, boxed{sc.SHA1, sc.SHA1}, boxed{sc.Function, sc.Function})
	}
	return g
}

// processor is what sends a command built here: every go-redis client
// and pipeline.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Eval sends one call. A client that is not a processor never gets
// engine.FCall: it is no Loader (see loader).
func (g commands) Eval(ctx context.Context, c engine.Call, via engine.Via) engine.Reply {
	if p, ok := g.c.(processor); ok {
		cmd := g.cmd(ctx, c, via)
		_ = p.Process(ctx, cmd)
		return reply(cmd, c.Strings)
	}
	if via == engine.Eval {
		return reply(g.c.Eval(ctx, c.Script.Source, c.Keys, anys(c.Args)...), c.Strings)
	}
	return reply(g.c.EvalSha(ctx, c.Script.SHA1, c.Keys, anys(c.Args)...), c.Strings)
}

// cmd builds c's EVALSHA, EVAL or FCALL, as go-redis's EvalSha, Eval and
// FCall do, with one slice and the constant arguments boxed once.
func (g commands) cmd(ctx context.Context, c engine.Call, via engine.Via) *redis.Cmd {
	args := make([]any, 0, 3+len(c.Keys)+len(c.Args))
	switch via {
	case engine.Eval:
		args = append(args, "eval", c.Script.Source)
	case engine.FCall:
		args = append(args, "fcall", g.box(c.Script.Function))
	default:
		args = append(args, "evalsha", g.box(c.Script.SHA1))
	}
	args = append(args, len(c.Keys))
	args = g.boxKeys(args, c.Keys)
	for _, a := range c.Args {
		args = append(args, g.box(a))
	}
	cmd := redis.NewCmd(ctx, args...)
	if len(c.Keys) > 0 {
		cmd.SetFirstKeyPos(3) // for a cluster client's routing
	}
	return cmd
}

// boxKeys appends ks to args, with the boxes of the last call that had as
// many keys when it had the same ones.
func (g commands) boxKeys(args []any, ks []string) []any {
	if len(ks) >= len(g.keys) {
		for _, k := range ks {
			args = append(args, k)
		}
		return args
	}
	slot := &g.keys[len(ks)]
	if e := slot.Load(); e != nil && slices.Equal(e.keys, ks) {
		return append(args, e.v...)
	}
	e := &boxedKeys{keys: ks, v: make([]any, len(ks))}
	for i, k := range ks {
		e.v[i] = k
	}
	slot.Store(e)
	return append(args, e.v...)
}

// box returns s as an any, without an allocation when s is one of the
// constant arguments.
func (g commands) box(s string) any {
	switch s {
	case "0":
		return "0"
	case "1":
		return "1"
	}
	for _, b := range g.consts {
		if b.s == s {
			return b.v
		}
	}
	return s
}

// EvalAll sends calls in one pipeline; a ClusterClient splits it per master.
func (g commands) EvalAll(ctx context.Context, calls []engine.Call, via engine.Via) []engine.Reply {
	return g.evalPipe(ctx, g.c.Pipeline(), calls, via, false, nil)
}

// loader is commands of a client that can load the scripts' function
// library (engine.Loader): a *redis.Client (one server, or through
// Sentinel) or a *redis.ClusterClient, on every master.
type loader struct{ commands }

// sender returns g as the Runner's Sender: a loader when its client can
// load the library.
func (g commands) sender() engine.Sender {
	switch g.c.(type) {
	case *redis.Client, *redis.ClusterClient:
		return loader{g}
	}
	return g
}

// LoadLibrary sends FUNCTION LOAD of src, to every master of a cluster.
func (l loader) LoadLibrary(ctx context.Context, src string) []error {
	switch c := l.c.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		var errs []error
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if err := m.FunctionLoad(ctx, src).Err(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
		return errs
	case *redis.Client:
		if err := c.FunctionLoad(ctx, src).Err(); err != nil {
			return []error{err}
		}
	}
	return nil
}

// evalPipe queues calls on pipe (each after ASKING with asking), and then
// more, runs it, and returns the calls' replies.
func (g commands) evalPipe(ctx context.Context, pipe redis.Pipeliner, calls []engine.Call, via engine.Via, asking bool, more func(redis.Pipeliner)) []engine.Reply {
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		if asking {
			pipe.Do(ctx, "asking")
		}
		cmds[i] = g.cmd(ctx, c, via)
		_ = pipe.Process(ctx, cmds[i])
	}
	if more != nil {
		more(pipe)
	}
	_, _ = pipe.Exec(ctx)
	out := make([]engine.Reply, len(cmds))
	for i, cmd := range cmds {
		out[i] = reply(cmd, calls[i].Strings)
	}
	return out
}

func reply(cmd *redis.Cmd, strs bool) engine.Reply {
	if _, ok := cmd.Val().([]any); ok {
		if strs {
			vals, err := cmd.StringSlice()
			return engine.Reply{Strs: vals, Err: err}
		}
		vals, err := cmd.Int64Slice()
		return engine.Reply{Ints: vals, Err: err}
	}
	return engine.Reply{Err: cmd.Err()}
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Classify classifies a go-redis error.
//
// A failed dial, a closed client and a pool timeout are unsent: go-redis
// had no connection to write on. But go-redis resends a command after a
// broken connection (redis.Options.MaxRetries, default 3). A dial failure
// of such a resend hides the first attempt, which may have reached a
// server that then died. The core then skips a cleanup that could not
// reach the dead server either; what the first attempt did expires with
// its TTLs.
func (commands) Classify(err error) (backend.Kind, engine.Refusal) {
	if err == nil {
		return backend.KindAnswer, engine.NotRefused
	}
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, redis.Nil) {
		switch {
		case redis.HasErrorPrefix(err, "NOSCRIPT"):
			return backend.KindAnswer, engine.NoScript
		case redis.HasErrorPrefix(err, "ASK"):
			return backend.KindAnswer, engine.Ask
		case redis.HasErrorPrefix(err, "TRYAGAIN"), redis.HasErrorPrefix(err, "CLUSTERDOWN"), redis.HasErrorPrefix(err, "MOVED"):
			return backend.KindAnswer, engine.TryAgain
		}
		return backend.KindAnswer, engine.NotRefused
	}
	var op *net.OpError
	if errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) ||
		(errors.As(err, &op) && op.Op == "dial") {
		return backend.KindUnsent, engine.NotRefused
	}
	return backend.KindUnknown, engine.NotRefused
}
