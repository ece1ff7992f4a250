package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// Sender is an adapter's client as a Runner uses it: the adapter's own
// I/O, which it hands to the Runner it builds.
type Sender interface {
	// Eval sends one call, as via says.
	Eval(ctx context.Context, c Call, via Via) Reply
	// EvalAll sends calls in one round trip (one pipeline; one per master
	// on a cluster), each as via says. It returns one Reply per call; a
	// failed round trip fails every call.
	EvalAll(ctx context.Context, calls []Call, via Via) []Reply
	// Classify says what an error of the client means for a call, in the
	// backend's one vocabulary of error kinds: backend.KindAnswer for a
	// reply of the server (the call ran, or was refused, as the reply
	// says), backend.KindUnsent for a failure before the call was written
	// (no connection could be made, the client was closed),
	// backend.KindUnknown for any other failure (the call may have run).
	// For a reply that refused to run the call, Refusal says why.
	Classify(err error) (backend.Kind, Refusal)
}

// Replicas is what Config.Wait needs of a client: a WAIT must follow the
// calls it confirms on their connection.
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
	EvalWait(ctx context.Context, addr string, asking bool, calls []Call, via Via, replicas int, timeout time.Duration) (r []Reply, acks int64)
}

// Runner sends an adapter's calls with the adapter's Sender: before the
// first step (and every keys.WireRefresh) the wire check, then FCALL when
// the Sender is a Loader and the library loaded (see functions), EVALSHA
// otherwise and after a refused FCALL, and EVAL after a NOSCRIPT reply, a
// resend of what Redis Cluster refused for now, once more after a broken
// round trip (with resendBroken), and the WAIT of calls with Call.Wait. It also holds the Backend's closed state.
// Safe for concurrent use.
type Runner struct {
	e            *Engine
	s            Sender
	r            Replicas // nil unless the Engine's Config has a Wait
	resendBroken bool
	closed       atomic.Bool
	wireCheck    wireCheck // the prefix's wire protocol version, checked before the steps (see wire)
	fn           functions // FCALL of scripts.Lib (see functions.go)
}

// NewRunner returns the Runner of e's calls on s. r is needed when e's
// Config has a Wait. With resendBroken a step is sent once more when its
// round trip failed on the connection: for a client that never resends a
// write itself (rueidis), where a connection that broke while idle is often
// noticed only by the next command on it. Every step is idempotent by
// token (release through the slot's release records, named in the call, so a
// resend of the same call finds them), so a resend is safe.
//
// When s is also a Loader, the Runner loads scripts.Lib before its first
// step and sends its calls as FCALL (see functions.go).
func NewRunner(e *Engine, s Sender, r Replicas, resendBroken bool) *Runner {
	run := &Runner{e: e, s: s, r: r, resendBroken: resendBroken, wireCheck: newWireCheck()}
	run.fn.load, _ = s.(Loader)
	run.fn.retry = functionsRetry
	return run
}

// Check returns backend.ErrClosed once the Runner is closed, else ctx's
// error.
func (r *Runner) Check(ctx context.Context) error {
	if r.closed.Load() {
		return backend.ErrClosed
	}
	return ctx.Err()
}

// Close marks the Runner closed; it reports false when it already was.
func (r *Runner) Close() bool { return r.closed.CompareAndSwap(false, true) }

// Send sends the call of one step: Check, the wire check, then the call
// (see run). The error is a failure of the round trip, classified; an
// error reply is in the Reply, for the step's parse.
func (r *Runner) Send(ctx context.Context, c Call) (Reply, error) {
	if err := r.Check(ctx); err != nil {
		return Reply{}, err
	}
	if err := r.wire(ctx); err != nil {
		return Reply{}, err
	}
	r.loadFunctions(ctx)
	if c.Wait {
		res, err := r.runReplicated(ctx, []Call{c})
		if err != nil {
			return Reply{}, err
		}
		return res[0], nil
	}
	return r.run(ctx, c)
}

// SendAll sends the calls of one batch step in one round trip (one per
// master): Check, nothing for no calls, the wire check, then the calls
// (see runAll), each followed by a WAIT when it has Call.Wait.
func (r *Runner) SendAll(ctx context.Context, calls []Call) ([]Reply, error) {
	if err := r.Check(ctx); err != nil {
		return nil, err
	}
	if len(calls) == 0 {
		return nil, nil
	}
	if err := r.wire(ctx); err != nil {
		return nil, err
	}
	r.loadFunctions(ctx)
	if calls[0].Wait {
		return r.runReplicated(ctx, calls)
	}
	return r.runAll(ctx, calls)
}

// Unconfirmed releases a grant that too few replicas acknowledged (an
// ErrNotReplicated of AcquireReply or AcquireBatchReply). Its outcome is
// not returned: the step returns ErrNotReplicated, and the core cleans up
// by token after a failed step anyway.
func (r *Runner) Unconfirmed(ctx context.Context, id, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = r.run(ctx, r.e.ReleaseCall(id, token))
}

// run sends c (see runOnce), and once more when its round trip failed on
// the connection and resendBroken is set; the Reply's First is then the
// first failure.
func (r *Runner) run(ctx context.Context, c Call) (Reply, error) {
	rep, err := r.runOnce(ctx, c)
	if !r.resend(ctx, err) {
		return rep, err
	}
	first := err
	rep, err = r.runOnce(ctx, c)
	rep.First = first
	return rep, resent(first, err)
}

// runOnce sends c (see eval), and again while the cluster refuses it for
// now, as tryAgain says. The error is a failure of the round trip,
// classified; an error reply is in the Reply.
func (r *Runner) runOnce(ctx context.Context, c Call) (Reply, error) {
	rep := r.eval(ctx, c)
	for b := tryAgain(); r.refusal(rep.Err).cluster() && b.wait(ctx); {
		rep = r.eval(ctx, c)
	}
	if err := r.failed(rep.Err); err != nil {
		return Reply{}, err
	}
	return rep, nil
}

// eval sends c with the adapter's client as FCALL (see via) or EVALSHA,
// as EVALSHA again when the server refused the FCALL, and as EVAL when the
// server does not know the script.
func (r *Runner) eval(ctx context.Context, c Call) Reply {
	via := r.via(c)
	rep := r.s.Eval(ctx, c, via)
	if via == FCall && r.fcallRefused(rep.Err) {
		rep = r.s.Eval(ctx, c, EvalSHA)
	}
	if r.refusal(rep.Err) == NoScript {
		rep = r.s.Eval(ctx, c, Eval)
	}
	return rep
}

// runAll sends calls in one round trip of FCALLs or EVALSHAs (see
// rounds). It resends the ones the server refused as FCALL as EVALSHAs,
// and the ones it did not know as EVALs (a NOSCRIPT reply means the call
// did not run), and the ones the cluster refused for now as
// tryAgain says. The error is a failure of a round trip; the per-call
// error replies are in the Replies. With resendBroken a failed batch is
// sent once more.
func (r *Runner) runAll(ctx context.Context, calls []Call) ([]Reply, error) {
	res, err := r.runAllOnce(ctx, calls)
	if !r.resend(ctx, err) {
		return res, err
	}
	first := err
	res, err = r.runAllOnce(ctx, calls)
	return res, resent(first, err)
}

func (r *Runner) runAllOnce(ctx context.Context, calls []Call) ([]Reply, error) {
	if len(calls) == 1 {
		rep, err := r.runOnce(ctx, calls[0])
		if err != nil {
			return nil, err
		}
		return []Reply{rep}, nil
	}
	res := make([]Reply, len(calls))
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	if err := r.sendSome(ctx, calls, res, all); err != nil {
		return nil, err
	}
	var refused []int
	for b := tryAgain(); ; {
		refused = refused[:0]
		for i, rep := range res {
			if r.refusal(rep.Err).cluster() {
				refused = append(refused, i)
			}
		}
		if len(refused) == 0 || !b.wait(ctx) {
			return res, nil
		}
		if err := r.sendSome(ctx, calls, res, refused); err != nil {
			return nil, err
		}
	}
}

// sendSome sends the calls of idx in one round trip, and again the ones
// refused (see rounds), and stores their replies in res. It returns a
// failure of a round trip.
func (r *Runner) sendSome(ctx context.Context, calls []Call, res []Reply, idx []int) error {
	return r.rounds(calls, res, idx, func(idx []int, via Via) error {
		got := r.s.EvalAll(ctx, pick(calls, idx), via)
		for j, i := range idx {
			if err := r.failed(got[j].Err); err != nil {
				return err
			}
			res[i] = got[j]
		}
		return nil
	})
}

// rounds sends the calls of idx with send, which stores their replies in
// res (or returns the failure of its round trip): as FCALL when the
// library is loaded (see via), else as EVALSHA; then the ones the server
// refused as FCALL (fcallRefused) again as EVALSHA, and the ones it did
// not know (NOSCRIPT) as EVAL, each kind in one more round trip. Each of
// those refusals means that the call did not run.
func (r *Runner) rounds(calls []Call, res []Reply, idx []int, send func(idx []int, via Via) error) error {
	via := r.via(pick(calls, idx)...)
	for {
		if err := send(idx, via); err != nil {
			return err
		}
		var again []int
		for _, i := range idx {
			if (via == FCall && r.fcallRefused(res[i].Err)) || (via == EvalSHA && r.refusal(res[i].Err) == NoScript) {
				again = append(again, i)
			}
		}
		if len(again) == 0 || via == Eval {
			return nil
		}
		idx = again
		if via == FCall {
			via = EvalSHA
		} else {
			via = Eval
		}
	}
}

// pick returns the calls of idx; calls itself when idx names them all.
func pick(calls []Call, idx []int) []Call {
	if len(idx) == len(calls) {
		return calls
	}
	out := make([]Call, len(idx))
	for j, i := range idx {
		out[j] = calls[i]
	}
	return out
}

// refusal returns why err, a reply, refused its call, or NotRefused.
func (r *Runner) refusal(err error) Refusal {
	if err == nil {
		return NotRefused
	}
	_, ref := r.s.Classify(err)
	return ref
}

// failed returns err marked with its backend.Kind when it is a failure of
// the round trip, and nil when err is nil or a reply of the server.
func (r *Runner) failed(err error) error {
	if err == nil {
		return nil
	}
	if k, _ := r.s.Classify(err); k != backend.KindAnswer {
		return backend.WithKind(k, err)
	}
	return nil
}

// Resending a step that Redis Cluster refused for now.
const (
	tryAgainFor   = 5 * time.Second        // longest time a step is resent
	tryAgainFirst = 10 * time.Millisecond  // first delay, doubled each time
	tryAgainMax   = 250 * time.Millisecond // longest delay
)

// tryAgain returns the backoff of a step that Redis Cluster refused for
// now: its resends wait tryAgainFirst, doubled each time up to
// tryAgainMax, for up to tryAgainFor or until ctx ends.
//
// TRYAGAIN answers a step whose keys are split between two nodes, or
// missing, while their slot migrates (a free lock has no lock key).
// CLUSTERDOWN answers while a failover promotes a replica. A MOVED or ASK
// arrives when the client stopped following them. In each case the script
// did not run, so every step, Release too, can be sent again. The clients
// resend them only a few times within milliseconds (rueidis: read-only
// commands only), and a slot migration takes longer. The core cannot do
// it instead: it retries only queued steps, and it knows nothing of slots.
func tryAgain() backoff {
	return backoff{delay: tryAgainFirst, deadline: time.Now().Add(tryAgainFor)}
}

// backoff paces the resends of one step (see tryAgain).
type backoff struct {
	delay    time.Duration
	deadline time.Time
}

// wait waits before the next resend; it reports false, at once, when the
// resends' time is up, or when ctx ends.
func (b *backoff) wait(ctx context.Context) bool {
	if !time.Now().Before(b.deadline) {
		return false
	}
	return b.sleep(ctx)
}

// sleep waits the next delay; it reports false when ctx ended first.
func (b *backoff) sleep(ctx context.Context) bool {
	t := time.NewTimer(b.delay)
	select {
	case <-ctx.Done():
		t.Stop()
		return false
	case <-t.C:
	}
	b.delay = min(2*b.delay, tryAgainMax)
	return true
}

// resend reports whether a step whose round trip failed with err is sent
// once more: with resendBroken, when the failure is the connection's, not
// ctx's.
func (r *Runner) resend(ctx context.Context, err error) bool {
	return err != nil && r.resendBroken && ctx.Err() == nil &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// resent returns err, the failure of a resend after a first send that
// failed with first: a resend that never reached the store after a first
// try that may have leaves the outcome unknown.
func resent(first, err error) error {
	if fallback.Unsent(err) && !fallback.Unsent(first) {
		return backend.WithKind(backend.KindUnknown, err)
	}
	return err
}
