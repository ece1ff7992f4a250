package lock

import (
	"fmt"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// TestHandOffValidUntil: the ValidUntil of a grant by hand-off, with the
// store's clock set apart from this process's and running faster or
// slower, is never past the grant's local time + TTL (S2), nor earlier
// than the drift allowance and the step's transit require.
func TestHandOffValidUntil(t *testing.T) {
	const ttl = 10 * time.Second
	local := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // this process's clock when the step is sent
	for _, offset := range []time.Duration{0, 3 * time.Hour, -3 * time.Hour} {
		for _, ppm := range []int64{-900, 0, 900} {
			for _, elapsed := range []time.Duration{0, time.Second, 10 * time.Minute} {
				for _, transit := range []time.Duration{0, 5 * time.Millisecond} {
					name := fmt.Sprintf("offset=%v/ppm=%d/elapsed=%v/transit=%v", offset, ppm, elapsed, transit)
					t.Run(name, func(t *testing.T) {
						// The store reads its clock transit after the send;
						// the grant comes elapsed later (local time), when
						// the store's clock has moved elapsed*(1+ppm/1e6).
						storeAt := func(d time.Duration) time.Time {
							return local.Add(offset + d + time.Duration(int64(d-transit)*ppm/1e6))
						}
						pair := clockPair{sent: local, store: storeAt(transit)}
						grantAt := local.Add(transit + elapsed)
						recv := grantAt.Add(transit)
						h := backend.HandOff{Fence: 7, TTL: ttl, StoreTime: storeAt(transit + elapsed)}
						v := handOffValidUntil(h, pair, local, recv)
						if limit := grantAt.Add(ttl); v.After(limit) {
							t.Fatalf("ValidUntil %v after the grant's local time + TTL %v", v.Sub(local), limit.Sub(local))
						}
						allow := driftSlack + elapsed/1000 + elapsed*900/1e6 + transit
						if floor := grantAt.Add(ttl - allow); v.Before(floor) {
							t.Fatalf("ValidUntil %v, want at least %v (allowance %v)", v.Sub(local), floor.Sub(local), allow)
						}
					})
				}
			}
		}
	}
}

// TestHandOffValidUntilBounds: the other bounds: the receive time caps it,
// the last time the waiter was found queued is a floor, and with nothing
// known there is no validity.
func TestHandOffValidUntilBounds(t *testing.T) {
	const ttl = time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := backend.HandOff{TTL: ttl, StoreTime: t0.Add(time.Hour)}
	// A store clock far ahead of the pair's: the mapping says later than
	// the receive time, which caps it.
	pair := clockPair{sent: t0, store: t0}
	recv := t0.Add(time.Millisecond)
	if v := handOffValidUntil(h, pair, time.Time{}, recv); !v.Equal(recv.Add(ttl)) {
		t.Errorf("mapped past the receive time: ValidUntil %v, want recv+TTL %v", v, recv.Add(ttl))
	}
	// No pair: the last time it was found queued is the floor.
	queued := t0.Add(-time.Second)
	if v := handOffValidUntil(h, clockPair{}, queued, recv); !v.Equal(queued.Add(ttl)) {
		t.Errorf("without a clock pair: ValidUntil %v, want queued+TTL %v", v, queued.Add(ttl))
	}
	// A pair older than the last heartbeat: the later bound wins.
	old := clockPair{sent: t0.Add(-time.Hour), store: t0}
	if v := handOffValidUntil(h, old, queued, recv); !v.Equal(queued.Add(ttl)) {
		t.Errorf("with an old pair: ValidUntil %v, want queued+TTL %v", v, queued.Add(ttl))
	}
	// Nothing known: no validity (the caller runs a step).
	if v := handOffValidUntil(backend.HandOff{TTL: ttl}, clockPair{}, time.Time{}, recv); !v.Equal(recv) {
		t.Errorf("with nothing known: ValidUntil %v, want recv %v", v, recv)
	}
}

// TestHandOffFresh: a grant is used only when it came after the waiter's
// latest step that read the store's clock; one from before it (its message
// late, the waiter re-queued since) or with no such step is not.
func TestHandOffFresh(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pair := clockPair{sent: t0, store: t0.Add(time.Hour)}
	for _, c := range []struct {
		at   time.Time
		pair clockPair
		want bool
	}{
		{t0.Add(time.Hour + time.Microsecond), pair, true},
		{t0.Add(time.Hour), pair, false},
		{t0.Add(time.Hour - time.Second), pair, false},
		{t0.Add(2 * time.Hour), clockPair{}, false},
	} {
		if got := fresh(backend.HandOff{Fence: 1, TTL: time.Second, StoreTime: c.at}, c.pair); got != c.want {
			t.Errorf("fresh(grant at %v, pair %v) = %v, want %v", c.at.Sub(t0), c.pair.store.Sub(t0), got, c.want)
		}
	}
}
