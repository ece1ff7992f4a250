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
	"github.com/redislocker/lock/internal/notifyconn"
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

// harness makes backends on one Redis server under one key prefix. Every
// backend's client dials through a notifyconn.Conns, so that the harness
// can delay its subscriptions and break the connection of its wake-ups.
type harness struct {
	addr string
	mode Mode
	ks   keys.Keyspace
	raw  rueidis.Client

	conns notifyconn.Set
}

// The harness's small limits, so that waiter-cap and purge-limit can fill
// a queue; the suite's largest queue has 16 waiters.
const (
	confMaxWaiters = 64
	confPurgeLimit = 8
)

var (
	_ conformance.Harness          = (*harness)(nil)
	_ conformance.Expirer          = (*harness)(nil)
	_ conformance.StateChecker     = (*harness)(nil)
	_ conformance.Forgetter        = (*harness)(nil)
	_ conformance.NotifierDropper  = (*harness)(nil)
	_ conformance.SubscribeDelayer = (*harness)(nil)
	_ conformance.Limiter          = (*harness)(nil)
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
	conns := notifyconn.New()
	co := rueidis.ClientOption{InitAddress: []string{h.addr}, ForceSingleClient: true, DialCtxFn: conns.DialCtx}
	opts := Options{Prefix: h.ks.Prefix(), MaxWaiters: confMaxWaiters, PurgeLimit: confPurgeLimit}
	var b *Backend
	var err error
	if h.mode == Tracking {
		opts.ClientOption = co
		b, err = New(opts)
	} else {
		co.DisableCache = true
		client, cerr := rueidis.NewClient(co)
		if cerr != nil {
			t.Fatal(cerr)
		}
		// Registered before the Backend's cleanup, so it runs after it.
		t.Cleanup(client.Close)
		b, err = NewWithClient(client, &opts)
	}
	if err != nil {
		t.Fatal(err)
	}
	h.conns.Add(b, conns)
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

// Limits states the Options the harness gives every Backend, and, in
// Tracking mode, the two documented limits of invalidation wake-ups
// (package doc): they name no head and reach every process waiting on the
// id, and a change of the head while the lock stays free wakes nobody.
func (h *harness) Limits() conformance.Limits {
	return conformance.Limits{
		MaxWaiters:        confMaxWaiters,
		PurgeLimit:        confPurgeLimit,
		UnnamedWakes:      h.mode == Tracking,
		HeadChangeUnwoken: h.mode == Tracking,
	}
}

// ForgetIdle deletes every key of id, the fence key included: what Redis
// deletes by itself once the id has been idle for the bound (an hour).
func (h *harness) ForgetIdle(t *testing.T, id string) {
	k := h.ks.For(id)
	if err := h.raw.Do(ctx, h.raw.B().Del().Key(k.Lock, k.Queue, k.Deadlines, k.Counters, k.Waiters).Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// DropNotifier closes, on the client's side, b's connection that carries
// wake-ups: the tracking connection (Tracking) or the pub/sub one
// (PubSub). rueidis dials a new one and the Backend re-subscribes.
func (h *harness) DropNotifier(t *testing.T, b backend.Backend) { h.conns.DropNotifier(t, b) }

// DelaySubscribe holds back b's SUBSCRIBE commands by d. In Tracking mode
// Subscribe sends none (it only registers), so it changes nothing there.
func (h *harness) DelaySubscribe(t *testing.T, b backend.Backend, d time.Duration) {
	h.conns.DelaySubscribe(t, b, d)
}
