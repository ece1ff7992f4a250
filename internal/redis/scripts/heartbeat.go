package scripts

import (
	"fmt"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

// Heartbeat is the heartbeat script: refresh the deadlines of one id's
// waiters, report queued/ready (see lua/heartbeat.lua).
var Heartbeat = load("heartbeat", "shared")

// Heartbeat returns the KEYS and ARGV of heartbeat for tokens of one id
// (at most MaxHeartbeatBatch).
func (c Consts) Heartbeat(k keys.ID, tokens []string, waiterTTL time.Duration) (keys, args []string) {
	args = make([]string, 0, 3+len(tokens))
	args = append(args, Millis(waiterTTL), c.purgeLimit, c.pub)
	args = append(args, tokens...)
	return []string{k.Lock, k.Queue, k.Fence, k.Waiters}, args
}

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

// ParseHeartbeat turns one heartbeat reply value into a HeartbeatResult.
func ParseHeartbeat(v int64) backend.HeartbeatResult {
	return backend.HeartbeatResult{Queued: v&1 != 0, Ready: v&2 != 0}
}
