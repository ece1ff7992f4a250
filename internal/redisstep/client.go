package redisstep

import (
	"context"
	"time"

	"github.com/redislocker/lock/internal/scripts"
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
	// Kind classifies an error the client returned.
	Kind(err error) Kind
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

// Kind is what an error of the client says about a call.
type Kind int

const (
	// KindOK is no error.
	KindOK Kind = iota
	// KindReply is an error reply of the server: the call ran, or was
	// refused, as the reply says.
	KindReply
	// KindNoScript is a NOSCRIPT reply: the call did not run.
	KindNoScript
	// KindTryAgain is a refusal of Redis Cluster to run the call for now
	// (TRYAGAIN, CLUSTERDOWN, or a MOVED the client did not follow): the
	// call did not run.
	KindTryAgain
	// KindAsk is an ASK redirect the client did not follow ("ASK <slot>
	// <addr>"): the call did not run.
	KindAsk
	// KindUnsent is a failure before the call was written: no connection
	// could be made, or the client was closed.
	KindUnsent
	// KindUnknown is any other failure: the call may have run.
	KindUnknown
)

// cluster reports whether k says that the cluster refused the call for now.
func (k Kind) cluster() bool { return k == KindTryAgain || k == KindAsk }

// failed reports whether k is a failure of the round trip, not a reply.
func (k Kind) failed() bool { return k == KindUnsent || k == KindUnknown }
