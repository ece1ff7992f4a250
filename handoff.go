package lock

import (
	"time"

	"github.com/redislocker/lock/backend"
)

// The drift allowance of a lease granted by hand-off: the store's clock
// and this process's may run at different rates. Between the step that
// gave the clock pair and the grant, the allowance is driftPPM parts per
// million of the elapsed store time, plus driftSlack.
const (
	driftPPM   = 1000
	driftSlack = 2 * time.Millisecond
)

// clockPair links the two clocks: a step sent at sent (this process's
// clock) read store on the store's clock. The store read it after sent.
type clockPair struct {
	sent, store time.Time
}

// grantMsg is a grant by hand-off and the local time it arrived.
type grantMsg struct {
	h    backend.HandOff
	recv time.Time
}

// fresh reports whether the grant h came after the step of pair, the
// waiter's latest step that read the store's clock (which found it queued,
// not holding). A grant from before it is stale: its lease was gone by
// that step (expired, or released by a cleanup), though its message came
// late (a stopped process, a slow inbox).
func fresh(h backend.HandOff, pair clockPair) bool {
	return !pair.store.IsZero() && h.StoreTime.After(pair.store)
}

// handOffValidUntil returns the ValidUntil of a lease granted by hand-off
// h, received at recv, fresh by pair: never past the store's expiry (S2).
// Two lower bounds of the grant's local time are used, the later one wins:
//   - queued, the send time of the last step or heartbeat that found the
//     waiter queued: the grant removed the entry after that step;
//   - the grant's StoreTime mapped through pair (a step sent at pair.sent
//     that read pair.store), less the drift allowance.
//
// The result is never later than recv + h.TTL: the grant came before recv.
// It is recv when neither bound is known, and may be before recv when
// they are old: the caller then runs a step instead.
func handOffValidUntil(h backend.HandOff, pair clockPair, queued, recv time.Time) time.Time {
	var v time.Time
	if !queued.IsZero() {
		v = queued.Add(h.TTL)
	}
	if !pair.sent.IsZero() && !pair.store.IsZero() && !h.StoreTime.IsZero() {
		el := h.StoreTime.Sub(pair.store)
		allow := driftSlack + max(el, -el)/(1e6/driftPPM)
		if m := pair.sent.Add(el - allow + h.TTL); v.IsZero() || m.After(v) {
			v = m
		}
	}
	if v.IsZero() {
		return recv // no bound known: no validity
	}
	if limit := recv.Add(h.TTL); v.After(limit) {
		return limit
	}
	return v
}
