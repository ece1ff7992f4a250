package engine

import (
	"context"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// Call is one script invocation.
type Call struct {
	Script scripts.Script
	Keys   []string
	Args   []string
	// Strings asks for the reply as an array of strings (Reply.Strs), for
	// scripts that reply with text (inspect); otherwise integers.
	Strings bool
}

// Reply is one call's reply.
type Reply struct {
	// Ints is the reply when it is an array of integers (acquire,
	// acquire_many, leave, heartbeat); nil for any other reply.
	Ints []int64
	// Strs is the reply of a Call with Strings set.
	Strs []string
	// Err is the call's error reply, or the client's failure.
	Err error
}

// Client is what an adapter supplies: its client's command plumbing.
type Client interface {
	// Eval sends one call as EVALSHA, or as EVAL when eval is set.
	Eval(ctx context.Context, c Call, eval bool) Reply
	// EvalAll sends calls in one round trip (one pipeline; one per master
	// on a cluster), each as EVALSHA or, with eval, as EVAL. It returns
	// one Reply per call; a failed round trip fails every call.
	EvalAll(ctx context.Context, calls []Call, eval bool) []Reply
	// Classify says what an error of the client means for a call, in the
	// backend's one vocabulary of error kinds: backend.KindAnswer for a
	// reply of the server (the call ran, or was refused, as the reply
	// says), backend.KindUnsent for a failure before the call was written
	// (no connection could be made, the client was closed),
	// backend.KindUnknown for any other failure (the call may have run).
	// For a reply that refused to run the call, Refusal says why.
	Classify(err error) (backend.Kind, Refusal)
	// Cluster reports whether the client talks to Redis Cluster, where the
	// keys of one script must share a hash slot.
	Cluster() bool
}

// Replicas is what Options.WaitReplicas needs of a client: a WAIT must
// follow the steps it confirms on their connection.
type Replicas interface {
	// Master returns the address of the master that serves key; any
	// constant (e.g. "") on one server.
	Master(ctx context.Context, key string) (string, error)
	// Reload makes Master read the cluster's slots again (after a MOVED,
	// TRYAGAIN or CLUSTERDOWN).
	Reload(ctx context.Context)
	// EvalWait sends calls to the node at addr (redirects not followed) in
	// one round trip, each after ASKING when asking. WAIT replicas timeout
	// follows on the same connection; acks is its reply. acks is 0 when
	// WAIT failed, or when the node is unknown and the calls went through
	// the client's routing instead.
	EvalWait(ctx context.Context, addr string, asking bool, calls []Call, eval bool, replicas int, timeout time.Duration) (r []Reply, acks int64)
}

// Refusal is why the server refused to run a call, in a reply (of kind
// backend.KindAnswer): the call did not run, and may be sent again.
type Refusal int

const (
	// NotRefused: the reply, if any, is the call's own.
	NotRefused Refusal = iota
	// NoScript is a NOSCRIPT reply: send the call as EVAL.
	NoScript
	// TryAgain is a refusal of Redis Cluster to run the call for now
	// (TRYAGAIN, CLUSTERDOWN, or a MOVED the client did not follow).
	TryAgain
	// Ask is an ASK redirect the client did not follow ("ASK <slot>
	// <addr>").
	Ask
)

// cluster reports whether r says that the cluster refused the call for now.
func (r Refusal) cluster() bool { return r == TryAgain || r == Ask }

// refusal returns why err, a reply, refused its call, or NotRefused.
func (s *Steps) refusal(err error) Refusal {
	if err == nil {
		return NotRefused
	}
	_, r := s.c.Classify(err)
	return r
}

// failed returns err marked with its backend.Kind when it is a failure of
// the round trip, and nil when err is nil or a reply of the server.
func (s *Steps) failed(err error) error {
	if err == nil {
		return nil
	}
	if k, _ := s.c.Classify(err); k != backend.KindAnswer {
		return backend.WithKind(k, err)
	}
	return nil
}
