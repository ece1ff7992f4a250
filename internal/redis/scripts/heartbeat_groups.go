package scripts

import (
	"fmt"

	"github.com/redislocker/lock/backend"
)

// HeartbeatGroup is one heartbeat script call: the waiters of one id (at
// most MaxHeartbeatBatch of them), and where their results go.
type HeartbeatGroup struct {
	ID     string
	Tokens []string
	idx    []int // positions in the waiters passed to GroupHeartbeats
}

// GroupHeartbeats splits waiters into one group per id (several for an id
// with more than MaxHeartbeatBatch waiters), in order of first appearance.
// Both adapters send one heartbeat script per group.
func GroupHeartbeats(waiters []backend.Waiter) []*HeartbeatGroup {
	var groups []*HeartbeatGroup
	byID := make(map[string]*HeartbeatGroup)
	for i, w := range waiters {
		g := byID[w.ID]
		if g == nil || len(g.Tokens) == MaxHeartbeatBatch {
			g = &HeartbeatGroup{ID: w.ID}
			byID[w.ID] = g
			groups = append(groups, g)
		}
		g.Tokens = append(g.Tokens, w.Token)
		g.idx = append(g.idx, i)
	}
	return groups
}

// ScatterHeartbeat stores one group's reply (one integer per token) into
// out, which is indexed like the waiters passed to GroupHeartbeats.
func ScatterHeartbeat(out []backend.HeartbeatResult, g *HeartbeatGroup, reply []int64) error {
	if len(reply) != len(g.Tokens) {
		return fmt.Errorf("heartbeat replied %d values for %d waiters", len(reply), len(g.Tokens))
	}
	for j, v := range reply {
		out[g.idx[j]] = ParseHeartbeat(v)
	}
	return nil
}
