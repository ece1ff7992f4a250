package scripts

import (
	"fmt"
	"strconv"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

// Acquire is the acquire script: fair try-acquire with optional enqueue
// (see lua/acquire.lua and lua/acquire_step.lua).
var Acquire = load("acquire", "shared", "acquire_step")

// AcquireShared is the acquire script of a shared id (backend.Sharer: a
// request with a Capacity of 2 or more; see lua/acquire_shared.lua and
// lua/shared.lua).
var AcquireShared = load("acquire_shared", "shared", "acquire_step")

// Acquire returns the KEYS and ARGV of acquire for a requester whose
// wake-ups go to inbox while it is queued (see InboxAddress).
func (c Consts) Acquire(k keys.ID, req backend.AcquireRequest, inbox string) (keys, args []string) {
	wait, wttl := "0", "0"
	if req.Wait {
		wait, wttl = "1", Millis(req.WaiterTTL)
	}
	return []string{k.Lock, k.Queue, k.Fence, k.Waiters},
		[]string{req.Token, Millis(req.TTL), wait, wttl, c.maxWaiters, c.purgeLimit, c.pub, inbox}
}

// AcquireShared returns the KEYS and ARGV of acquire_shared for a
// request with a Capacity of 2 or more (see Acquire).
func (c Consts) AcquireShared(k keys.ID, req backend.AcquireRequest, inbox string) (keys, args []string) {
	keys, args = c.Acquire(k, req, inbox)
	return keys, append(args, strconv.Itoa(req.Capacity), strconv.Itoa(req.Permits))
}

// ParseAcquire turns acquire's reply into a Grant: 7 values, or 8 with
// the server's clock in µs (Grant.StoreTime).
func ParseAcquire(r []int64) (backend.Grant, error) {
	if len(r) != 7 && len(r) != 8 {
		return backend.Grant{}, fmt.Errorf("scripts: acquire replied %d values, want 7 or 8", len(r))
	}
	for _, v := range r {
		if v < 0 {
			return backend.Grant{}, fmt.Errorf("scripts: acquire replied a negative value: %v", r)
		}
	}
	var at time.Time
	if len(r) == 8 && r[7] > 0 {
		at = time.UnixMicro(r[7])
	}
	return backend.Grant{
		StoreTime: at,
		Acquired:  r[0] == 1,
		Fence:     uint64(r[1]),
		TTL:       time.Duration(r[2]) * time.Millisecond,
		HolderTTL: time.Duration(r[3]) * time.Millisecond,
		Queued:    r[4] == 1,
		Ticket:    uint64(r[5]),
		Head:      r[6] == 1,
	}, nil
}
