package rueidisbackend

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/conformance"
	"github.com/redislocker/lock/internal/keys"
	"github.com/redislocker/lock/internal/redistest"
	"github.com/redislocker/lock/internal/scripts"
)

// TestConformanceTracking runs the shared suite against a real
// redis-server with client-side caching on: every Backend is built by New
// and learns of released and expired locks from invalidations.
func TestConformanceTracking(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return newHarness(t, redistest.Addr(t), Tracking)
	})
}

// TestConformancePubSub runs the suite with caching off: every Backend is
// made by NewWithClient on a client built with DisableCache, and wakes
// its waiters from the scripts' PUBLISH over one dedicated pub/sub
// connection.
func TestConformancePubSub(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return newHarness(t, redistest.Addr(t), PubSub)
	})
}

// harness makes backends on one Redis server under one key prefix.
type harness struct {
	addr string
	mode Mode
	ks   keys.Keyspace
	raw  rueidis.Client
}

var (
	_ conformance.Harness      = (*harness)(nil)
	_ conformance.Expirer      = (*harness)(nil)
	_ conformance.StateChecker = (*harness)(nil)
)

func newHarness(t *testing.T, addr string, mode Mode) *harness {
	ks, err := keys.New(redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	return &harness{addr: addr, mode: mode, ks: ks, raw: raw}
}

// NewBackend returns a Backend with a client of its own.
func (h *harness) NewBackend(t *testing.T) backend.Backend {
	co := rueidis.ClientOption{InitAddress: []string{h.addr}, ForceSingleClient: true}
	var b *Backend
	var err error
	if h.mode == Tracking {
		b, err = New(Options{ClientOption: co, Prefix: h.ks.Prefix()})
	} else {
		co.DisableCache = true
		client, cerr := rueidis.NewClient(co)
		if cerr != nil {
			t.Fatal(cerr)
		}
		// Registered before the Backend's cleanup, so it runs after it.
		t.Cleanup(client.Close)
		b, err = NewWithClient(client, &Options{Prefix: h.ks.Prefix()})
	}
	if err != nil {
		t.Fatal(err)
	}
	if b.Mode() != h.mode {
		t.Fatalf("Mode() = %v, want %v", b.Mode(), h.mode)
	}
	// Registered before the suite's own cleanups, so it runs after them.
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// ExpireNow deletes id's lock key, as its TTL running out would: no
// script runs and nothing is published (a tracking client is told, as it
// is of an expiry).
func (h *harness) ExpireNow(t *testing.T, id string) {
	if err := h.raw.Do(ctx, h.raw.B().Del().Key(h.ks.For(id).Lock).Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// suiteLease is above the longest lease the conformance suite takes (a
// minute): an id's fence key expires within scripts.FenceIdle of it.
const suiteLease = 10 * time.Minute

// StateLeft returns id's keys, but for a fence key that expires within
// its documented bound (scripts.FenceKeyExpires): a fence key with no
// TTL is state left.
func (h *harness) StateLeft(t *testing.T, id string) []string {
	var left []string
	var cursor uint64
	for {
		e, err := h.raw.Do(ctx, h.raw.B().Scan().Cursor(cursor).Match(h.ks.Pattern(id)).Count(100).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range e.Elements {
			if _, suffix, err := h.ks.Parse(k); err == nil && suffix == keys.SuffixCounters {
				ms, err := h.raw.Do(ctx, h.raw.B().Pttl().Key(k).Build()).AsInt64()
				if err != nil {
					t.Fatal(err)
				}
				if ms == -2 || scripts.FenceKeyExpires(time.Duration(ms)*time.Millisecond, suiteLease) {
					continue // gone since the SCAN, or expiring
				}
				k = fmt.Sprintf("%s (PTTL %d ms)", k, ms)
			}
			left = append(left, k)
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	sort.Strings(left)
	return left
}
