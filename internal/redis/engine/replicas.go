package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redislocker/lock/backend"
)

// runReplicated runs calls, each followed by Config.Wait's WAIT on the
// connection that ran it, in the same round trip. It makes one round trip
// per master, in parallel. Reply i's Acks is the WAIT reply of the round
// trip that ran call i. The calls a cluster refused (MOVED, TRYAGAIN,
// CLUSTERDOWN) are sent again after Replicas.Reload, and an ASK to its
// target after ASKING, as tryAgain says.
func (r *Runner) runReplicated(ctx context.Context, calls []Call) ([]Reply, error) {
	res := make([]Reply, len(calls))
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	asks := map[int]string{} // call -> ASK target
	b := tryAgain()
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
				if addr, err = r.r.Master(ctx, calls[i].Keys[0]); err != nil {
					return nil, backend.WithKind(backend.KindUnsent, err)
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
			go func() { errs <- r.sendReplicated(ctx, g.addr, g.asking, calls, res, g.idx) }()
		}
		var err error
		for range groups {
			if e := <-errs; e != nil && err == nil {
				err = e
			}
		}
		if err != nil {
			return nil, err
		}
		// The calls a cluster sent elsewhere or refused for now go again.
		again := pending[:0:0]
		clear(asks)
		reload := false
		for _, i := range pending {
			switch r.refusal(res[i].Err) {
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
		if len(again) == 0 || time.Now().After(b.deadline) {
			return res, nil
		}
		pending = again
		if reload {
			r.r.Reload(ctx)
		}
		if !b.sleep(ctx) {
			return res, nil
		}
	}
}

// sendReplicated sends the calls of idx to the node at addr in one round
// trip followed by WAIT, and the ones refused (see rounds) again, each
// round trip also followed by WAIT.
func (r *Runner) sendReplicated(ctx context.Context, addr string, asking bool, calls []Call, res []Reply, idx []int) error {
	w := r.e.cfg.Wait
	return r.rounds(calls, res, idx, func(idx []int, via Via) error {
		got, n := r.r.EvalWait(ctx, addr, asking, pick(calls, idx), via, w.Replicas, w.Timeout)
		for j, i := range idx {
			if err := r.failed(got[j].Err); err != nil {
				return err
			}
			res[i] = got[j]
			res[i].Acks = n
		}
		return nil
	})
}
