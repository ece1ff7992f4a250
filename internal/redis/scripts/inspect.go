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
var Inspect = load("inspect", "shared")

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
	if len(r) < 7 {
		return in, fmt.Errorf("scripts: inspect replied %d values, want at least 7", len(r))
	}
	var nums [6]uint64
	for i, j := range [...]int{0, 1, 2, 4, 5, 6} {
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
	in.Capacity = int(nums[4])
	holders := int(nums[5])
	rest := r[7:]
	if len(rest) < 4*holders || (len(rest)-4*holders)%4 != 0 {
		return in, fmt.Errorf("scripts: inspect replied %d values, want 7 + 4 per holder (%d) + 4 per waiter", len(r), holders)
	}
	for i := 0; i < 4*holders; i += 4 {
		n, err := uints(rest[i:i+4], 0, 1, 3)
		if err != nil {
			return in, fmt.Errorf("scripts: inspect reply holder: %w", err)
		}
		in.Holders = append(in.Holders, backend.HolderInfo{
			Fence:   n[0],
			TTL:     time.Duration(n[1]) * time.Millisecond,
			Holder:  rest[i+2],
			Permits: int(n[3]),
		})
	}
	for i := 4 * holders; i < len(rest); i += 4 {
		n, err := uints(rest[i:i+4], 0, 1, 3)
		if err != nil {
			return in, fmt.Errorf("scripts: inspect reply waiter: %w", err)
		}
		in.Waiters = append(in.Waiters, backend.WaiterInfo{
			Ticket:   n[0],
			Token:    rest[i+2],
			Deadline: time.Duration(n[1]) * time.Millisecond,
			Permits:  int(n[3]),
		})
	}
	return in, nil
}

// uints parses the values at positions at of vs as unsigned integers, into
// the same positions of n.
func uints(vs []string, at ...int) (n [4]uint64, err error) {
	for _, i := range at {
		if n[i], err = strconv.ParseUint(vs[i], 10, 64); err != nil {
			return n, fmt.Errorf("value %d %q: %w", i, vs[i], err)
		}
	}
	return n, nil
}
