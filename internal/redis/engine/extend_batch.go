package engine

import (
	"context"

	"github.com/redislocker/lock/backend"
)

var _ backend.ExtendBatcher = (*Steps)(nil)

// ExtendBatch runs one extend script per request in one round trip (one
// pipeline per master on a cluster), so that a Locker keeps all its
// kept-alive leases alive at the cost of one round trip. With WaitReplicas
// each master's round trip ends with a WAIT, and an extend that too few
// replicas acknowledged gets ErrNotReplicated.
func (s *Steps) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]error, error) {
	if err := Check(s, ctx); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	if err := s.wire(ctx); err != nil {
		return nil, err
	}
	calls := make([]Call, len(reqs))
	for i, r := range reqs {
		calls[i] = s.extendCall(r)
	}
	res, acks, err := s.runBatch(ctx, calls)
	if err != nil {
		return nil, err
	}
	out := make([]error, len(reqs))
	for i, r := range res {
		out[i] = s.extendResult(r, acks, i)
	}
	return out, nil
}
