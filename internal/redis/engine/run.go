package engine

import (
	"context"
	"errors"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// run sends c as EVALSHA and, when the server does not know the script, as
// EVAL; a call the cluster refused for now is resent as tryAgain says. The
// error is a failure of the round trip, classified; an error reply is in
// the Reply. With Hooks.ResendBroken a failed round trip is sent once more.
func (s *Steps) run(ctx context.Context, c Call) (Reply, error) {
	return resendOnce(s, ctx, func() (Reply, error) { return s.runOnce(ctx, c) })
}

// runResent is run that also returns the failure of the first send when
// the call was resent (nil otherwise): a release whose first send may have
// taken effect cannot trust a resend's "not held".
func (s *Steps) runResent(ctx context.Context, c Call) (r Reply, first, err error) {
	r, err = resendOnce(s, ctx, func() (Reply, error) {
		r, err := s.runOnce(ctx, c)
		if err != nil && first == nil {
			first = err
		}
		return r, err
	})
	return r, first, err
}

func (s *Steps) runOnce(ctx context.Context, c Call) (Reply, error) {
	var r Reply
	send := func() {
		r = s.c.Eval(ctx, c, false)
		if s.refusal(r.Err) == NoScript {
			r = s.c.Eval(ctx, c, true)
		}
	}
	send()
	tryAgain(ctx, func() bool { return s.refusal(r.Err).cluster() }, send)
	if err := s.failed(r.Err); err != nil {
		return Reply{}, err
	}
	return r, nil
}

// runAll sends calls in one round trip of EVALSHAs. It resends the ones
// the server did not know as EVALs in a second one (a NOSCRIPT reply means
// the call did not run), and the ones the cluster refused for now as
// tryAgain says. The error is a failure of a round trip; the per-call error replies
// are in the Replies. With Hooks.ResendBroken a failed batch is sent once
// more.
func (s *Steps) runAll(ctx context.Context, calls []Call) ([]Reply, error) {
	return resendOnce(s, ctx, func() ([]Reply, error) { return s.runAllOnce(ctx, calls) })
}

func (s *Steps) runAllOnce(ctx context.Context, calls []Call) ([]Reply, error) {
	if len(calls) == 1 {
		r, err := s.runOnce(ctx, calls[0])
		if err != nil {
			return nil, err
		}
		return []Reply{r}, nil
	}
	res := make([]Reply, len(calls))
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	if err := s.sendSome(ctx, calls, res, all); err != nil {
		return nil, err
	}
	var refused []int
	var failed error
	tryAgain(ctx, func() bool {
		refused = refused[:0]
		for i, r := range res {
			if s.refusal(r.Err).cluster() {
				refused = append(refused, i)
			}
		}
		return len(refused) > 0 && failed == nil
	}, func() {
		failed = s.sendSome(ctx, calls, res, refused)
	})
	if failed != nil {
		return nil, failed
	}
	return res, nil
}

// sendSome sends the calls of idx in one round trip of EVALSHAs and the
// ones the server did not know as EVALs in a second one, and stores their
// replies in res. It returns a failure of a round trip.
func (s *Steps) sendSome(ctx context.Context, calls []Call, res []Reply, idx []int) error {
	got := s.c.EvalAll(ctx, pick(calls, idx), false)
	var retry []int
	for j, i := range idx {
		res[i] = got[j]
		if s.refusal(got[j].Err) == NoScript {
			retry = append(retry, i)
		} else if err := s.failed(got[j].Err); err != nil {
			return err
		}
	}
	if len(retry) == 0 {
		return nil
	}
	got = s.c.EvalAll(ctx, pick(calls, retry), true)
	for j, i := range retry {
		if err := s.failed(got[j].Err); err != nil {
			return err
		}
		res[i] = got[j]
	}
	return nil
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

// Resending a step that Redis Cluster refused for now.
const (
	tryAgainFor   = 5 * time.Second        // longest time a step is resent
	tryAgainFirst = 10 * time.Millisecond  // first delay, doubled each time
	tryAgainMax   = 250 * time.Millisecond // longest delay
)

// tryAgain resends a step while again reports that Redis Cluster refused
// it for now, for up to tryAgainFor or until ctx ends.
//
// TRYAGAIN answers a step whose keys are split between two nodes, or
// missing, while their slot migrates (a free lock has no lock key).
// CLUSTERDOWN answers while a failover promotes a replica. A MOVED or ASK
// arrives when the client stopped following them. In each case the script
// did not run, so every step, Release too, can be sent again. The clients
// resend them only a few times within milliseconds (rueidis: read-only
// commands only), and a slot migration takes longer. The core cannot do
// it instead: it retries only queued steps, and it knows nothing of slots.
func tryAgain(ctx context.Context, again func() bool, resend func()) {
	delay := tryAgainFirst
	deadline := time.Now().Add(tryAgainFor)
	for again() && time.Now().Before(deadline) {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		resend()
		delay = min(2*delay, tryAgainMax)
	}
}

// resendOnce runs send, and once more when its round trip failed on the
// connection (not ctx) and Hooks.ResendBroken is set. A resend that never
// reached the store after a first try that may have leaves the outcome
// unknown.
func resendOnce[T any](s *Steps, ctx context.Context, send func() (T, error)) (T, error) {
	v, err := send()
	if err == nil || !s.hooks.ResendBroken || ctx.Err() != nil ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return v, err
	}
	first := err
	v, err = send()
	if fallback.Unsent(err) && !fallback.Unsent(first) {
		err = backend.WithKind(backend.KindUnknown, err)
	}
	return v, err
}

// replyErr maps the scripts' error replies to the backend's sentinels and
// marks every other error reply as the store's answer. A failure of the
// round trip is returned classified, as failed does.
func (s *Steps) replyErr(err error) error {
	if err == nil {
		return nil
	}
	if f := s.failed(err); f != nil {
		return f
	}
	if m := scripts.MapError(err.Error()); m != nil {
		return m
	}
	return backend.WithKind(backend.KindAnswer, err)
}
