package redisstep

import (
	"context"

	"github.com/redislocker/lock/internal/scripts"
)

// DrainInboxes takes the messages of this Backend's inbox keys (the drain
// script; InboxKey kind only), one call per key, all in one round trip. The
// result has one list per key, in order, oldest message first; a key whose
// call failed gets none, and the first such failure is returned.
func (s *Steps) DrainInboxes(ctx context.Context, inboxes []string) ([][]string, error) {
	if err := Check(s, ctx); err != nil {
		return nil, err
	}
	calls := make([]Call, len(inboxes))
	for i, k := range inboxes {
		calls[i] = Call{Script: scripts.Drain, Keys: []string{k}, Strings: true}
	}
	res, err := s.runAll(ctx, calls)
	if err != nil {
		return nil, err
	}
	out := make([][]string, len(inboxes))
	var first error
	for i, r := range res {
		if err := s.replyErr(r.Err); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		out[i] = r.Strs
	}
	return out, first
}
