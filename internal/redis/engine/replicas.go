package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redislocker/lock/backend"
)

// runReplicated runs calls, each followed by WAIT WaitReplicas WaitTimeout
// on the connection that ran it, in the same round trip. It makes one
// round trip per master, in parallel. acks[i] is the WAIT reply of the round
// trip that ran call i. The calls a cluster refused (MOVED, TRYAGAIN,
// CLUSTERDOWN) are sent again after Replicas.Reload, and an ASK to its
// target after ASKING, as tryAgain says.
func (s *Steps) runReplicated(ctx context.Context, calls []Call) ([]Reply, []int64, error) {
	res := make([]Reply, len(calls))
	acks := make([]int64, len(calls))
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	asks := map[int]string{} // call -> ASK target
	deadline := time.Now().Add(tryAgainFor)
	delay := tryAgainFirst
	for {
		type group struct {
			addr   string
			asking bool
			idx    []int
		}
		groups := map[string]*group{}
		for _, i := range pending {
			addr, asking := asks[i]
			if !asking {
				var err error
				if addr, err = s.r.Master(ctx, calls[i].Keys[0]); err != nil {
					return nil, nil, backend.WithKind(backend.KindUnsent, err)
				}
			}
			key := fmt.Sprint(addr, asking)
			g := groups[key]
			if g == nil {
				g = &group{addr: addr, asking: asking}
				groups[key] = g
			}
			g.idx = append(g.idx, i)
		}
		errs := make(chan error, len(groups))
		for _, g := range groups {
			go func() { errs <- s.sendReplicated(ctx, g.addr, g.asking, calls, res, acks, g.idx) }()
		}
		var err error
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
			switch s.refusal(res[i].Err) {
			case Ask:
				if f := strings.Fields(res[i].Err.Error()); len(f) == 3 {
					asks[i] = f[2]
				}
			case TryAgain:
				reload = true
			default:
				continue
			}
			again = append(again, i)
		}
		if len(again) == 0 || time.Now().After(deadline) {
			return res, acks, nil
		}
		pending = again
		if reload {
			s.r.Reload(ctx)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, acks, nil
		case <-t.C:
		}
		delay = min(2*delay, tryAgainMax)
	}
}

// sendReplicated sends the calls of idx to the node at addr in one round
// trip followed by WAIT, and the ones the server did not know as EVALs in
// a second one, also followed by WAIT.
func (s *Steps) sendReplicated(ctx context.Context, addr string, asking bool, calls []Call, res []Reply, acks []int64, idx []int) error {
	send := func(idx []int, eval bool) error {
		got, n := s.r.EvalWait(ctx, addr, asking, pick(calls, idx), eval, s.cfg.waitReplicas, s.cfg.waitTimeout)
		for j, i := range idx {
			if err := s.failed(got[j].Err); err != nil {
				return err
			}
			res[i], acks[i] = got[j], n
		}
		return nil
	}
	if err := send(idx, false); err != nil {
		return err
	}
	var noscript []int
	for _, i := range idx {
		if s.refusal(res[i].Err) == NoScript {
			noscript = append(noscript, i)
		}
	}
	if len(noscript) == 0 {
		return nil
	}
	return send(noscript, true)
}

// unconfirmed releases a grant that too few replicas acknowledged. Its
// error is not returned: the caller returns ErrNotReplicated, and the core
// cleans up by token after a failed step anyway.
func (s *Steps) unconfirmed(ctx context.Context, id, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = s.release(ctx, id, token)
}

// notReplicated returns backend.ErrNotReplicated with the counts.
func (s *Steps) notReplicated(acked int64) error {
	return fmt.Errorf("%w: %d of %d replicas within %v", backend.ErrNotReplicated, acked, s.cfg.waitReplicas, s.cfg.waitTimeout)
}
