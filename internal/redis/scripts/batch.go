package scripts

import (
	"fmt"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

// AcquireMany is the batch acquire script: acquire's step for many ids in
// one call (see lua/acquire_many.lua).
var AcquireMany = load("acquire_many", "shared", "acquire_step")

// MaxAcquireBatch is the most ids in one AcquireMany call. A free id with
// no queue costs the server one command in the script (SET NX PX; per call
// one TIME, one EXISTS of the queues, and a GET and a SET of each fence key)
// and about 9 µs of Redis CPU with the script's own work (lockbench,
// Redis 7.0 on a 2-vCPU machine), so a full call blocks the server for
// about 0.6 ms.
const MaxAcquireBatch = 64

// AcquireGroup is one AcquireMany call: requests whose ids share a hash
// slot (or any ids, on a single server), at most MaxAcquireBatch of them.
type AcquireGroup struct {
	Slot int // the ids' hash slot; -1 when grouped for a single server
	Reqs []backend.AcquireRequest
	Pos  []int // the requests' positions in the slice passed to GroupAcquires
}

// GroupAcquires splits reqs into AcquireMany calls of at most limit requests
// (MaxAcquireBatch when limit <= 0 or larger), in order of first
// appearance. With bySlot (Redis Cluster) a call holds the ids of one hash
// slot only; without it (a single server, which runs a script on keys of
// any slot) requests are only cut into chunks. The requests of one id stay
// in their order.
func GroupAcquires(reqs []backend.AcquireRequest, bySlot bool, limit int) []*AcquireGroup {
	if limit <= 0 || limit > MaxAcquireBatch {
		limit = MaxAcquireBatch
	}
	var groups []*AcquireGroup
	open := make(map[int]*AcquireGroup) // slot -> its group being filled
	for i, r := range reqs {
		slot := -1
		if bySlot {
			slot = keys.SlotOf(r.ID)
		}
		g := open[slot]
		if g == nil || len(g.Reqs) == limit {
			g = &AcquireGroup{Slot: slot}
			open[slot] = g
			groups = append(groups, g)
		}
		g.Reqs = append(g.Reqs, r)
		g.Pos = append(g.Pos, i)
	}
	return groups
}

// AcquireMany returns the KEYS and ARGV of one AcquireMany call for g,
// whose requesters' wake-ups go to inbox while they are queued (see
// InboxAddress).
func (c Consts) AcquireMany(ks keys.Keyspace, g *AcquireGroup, inbox string) (keys, args []string) {
	keys = make([]string, 0, 4*len(g.Reqs))
	args = make([]string, 0, 4+4*len(g.Reqs))
	args = append(args, c.maxWaiters, c.purgeLimit, c.pub, inbox)
	for _, r := range g.Reqs {
		k := ks.For(r.ID)
		keys = append(keys, k.Lock, k.Queue, k.Fence, k.Waiters)
		wait, wttl := "0", "0"
		if r.Wait {
			wait, wttl = "1", Millis(r.WaiterTTL)
		}
		args = append(args, r.Token, Millis(r.TTL), wait, wttl)
	}
	return keys, args
}

// ScatterAcquireMany stores one AcquireMany reply (8 integers per request
// of g) into out, which is indexed like the requests passed to
// GroupAcquires. A full queue becomes that request's Err,
// backend.ErrQueueFull, and a shared id in use backend.ErrCapacity.
func ScatterAcquireMany(out []backend.BatchGrant, g *AcquireGroup, reply []int64) error {
	if len(reply) != 8*len(g.Reqs) {
		return fmt.Errorf("scripts: acquire_many replied %d values for %d requests, want %d", len(reply), len(g.Reqs), 8*len(g.Reqs))
	}
	for j := range g.Reqs {
		v := reply[8*j : 8*j+8]
		switch v[0] {
		case 0:
			gr, err := ParseAcquire(v[1:])
			if err != nil {
				return err
			}
			out[g.Pos[j]] = backend.BatchGrant{Grant: gr}
		case 1:
			out[g.Pos[j]] = backend.BatchGrant{Err: backend.ErrQueueFull}
		case 2:
			out[g.Pos[j]] = backend.BatchGrant{Err: backend.ErrCapacity}
		default:
			return fmt.Errorf("scripts: acquire_many replied status %d", v[0])
		}
	}
	return nil
}
