package scripts

import (
	"fmt"
	"strconv"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

// Inspect is an operator's script, not a step of the lock protocol, so
// not in All: a read-only view of one id (held, fence, TTL, fingerprints,
// live queue length, first live waiters). It writes nothing, so it may run
// with EVAL_RO or on a replica.
var Inspect = load("inspect")

// InspectScan is the most queue entries one inspect looks at to find the
// first live waiters; dead entries (not purged yet) are skipped.
const InspectScan = 1000

// InspectCall returns the KEYS and ARGV of inspect. maxWaiters is clamped
// to 0..backend.MaxInspectWaiters.
func InspectCall(k keys.ID, maxWaiters int) (keys, args []string) {
	maxWaiters = max(0, min(maxWaiters, backend.MaxInspectWaiters))
	return []string{k.Lock, k.Queue, k.Waiters},
		[]string{strconv.Itoa(maxWaiters), strconv.Itoa(InspectScan)}
}

// ParseInspect turns inspect's reply into an Inspection of id.
func ParseInspect(id string, r []string) (backend.Inspection, error) {
	in := backend.Inspection{ID: id}
	if len(r) < 5 || (len(r)-5)%3 != 0 {
		return in, fmt.Errorf("scripts: inspect replied %d values, want 5 + 3 per waiter", len(r))
	}
	var nums [4]uint64
	for i, j := range [...]int{0, 1, 2, 4} {
		n, err := strconv.ParseUint(r[j], 10, 64)
		if err != nil {
			return in, fmt.Errorf("scripts: inspect reply value %d: %w", j, err)
		}
		nums[i] = n
	}
	in.Held = nums[0] == 1
	if in.Held {
		in.Fence = nums[1]
		in.TTL = time.Duration(nums[2]) * time.Millisecond
		in.Holder = r[3]
	}
	in.QueueLen = int(nums[3])
	for i := 5; i < len(r); i += 3 {
		ticket, err := strconv.ParseUint(r[i], 10, 64)
		if err != nil {
			return in, fmt.Errorf("scripts: inspect reply ticket %q: %w", r[i], err)
		}
		left, err := strconv.ParseUint(r[i+1], 10, 64)
		if err != nil {
			return in, fmt.Errorf("scripts: inspect reply deadline %q: %w", r[i+1], err)
		}
		in.Waiters = append(in.Waiters, backend.WaiterInfo{
			Ticket:   ticket,
			Token:    r[i+2],
			Deadline: time.Duration(left) * time.Millisecond,
		})
	}
	return in, nil
}
