package redisbackend

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/conformance"
	"github.com/redislocker/lock/internal/embedredis"
	"github.com/redislocker/lock/internal/keys"
	"github.com/redislocker/lock/internal/notifyconn"
	"github.com/redislocker/lock/internal/redistest"
	"github.com/redislocker/lock/internal/scripts"
)

// TestConformance runs the shared suite against a real redis-server: the
// one REDIS_ADDR names, or one this test binary starts. Every harness gets
// its own key prefix, every backend its own client (a separate "process").
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return newRedisHarness(t, redistest.Addr(t))
	})
}

// TestConformanceMiniredis runs the suite against miniredis, an in-process
// imitation of Redis, as the quick start does when no Redis is at hand.
//
// What miniredis cannot do, and what the harness does about it:
//   - It does not expire keys in real time: a TTL only runs down when the
//     test calls FastForward. Left like that, three properties fail:
//     conservative-validity (a 150 ms lease never ends, so nobody else is
//     ever granted the id), no-lost-wakeup case (b) (a lease that expires
//     without a release never frees the lock) and no-state-left (the lock
//     key of an expired lease stays). The harness therefore moves miniredis's
//     clock with the wall clock (internal/embedredis: FastForward when a
//     command's bytes arrive, and every 2 ms). A TTL then ends no earlier
//     than its length after the command that set it arrived, and at most
//     one tick late when nobody asks: on the safe side of every property,
//     and all properties run. Exact expiry timing (S2's bound) is only proven by
//     TestConformance on a real server.
//   - TIME follows the wall clock, so waiter deadlines (L3) need nothing.
//   - Its Lua is gopher-lua, not Redis's Lua 5.1; the scripts run on both.
//   - It cannot kill connections (CLIENT KILL): the harness closes the
//     backend's pub/sub connection on the client's side instead
//     (internal/notifyconn), as for a real server.
func TestConformanceMiniredis(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		srv, err := embedredis.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
		return newRedisHarness(t, srv.Addr())
	})
}

// redisHarness makes backends on one Redis server under one key prefix.
// Every backend's client dials through a notifyconn.Conns, so that the
// harness can delay its subscriptions and break its pub/sub connection.
type redisHarness struct {
	addr string
	ks   keys.Keyspace
	raw  *redis.Client

	conns notifyconn.Set
}

// The harness's small limits, so that waiter-cap and purge-limit can fill
// a queue; the suite's largest queue has 16 waiters.
const (
	confMaxWaiters = 64
	confPurgeLimit = 8
)

var (
	_ conformance.Harness          = (*redisHarness)(nil)
	_ conformance.Expirer          = (*redisHarness)(nil)
	_ conformance.StateChecker     = (*redisHarness)(nil)
	_ conformance.Forgetter        = (*redisHarness)(nil)
	_ conformance.NotifierDropper  = (*redisHarness)(nil)
	_ conformance.SubscribeDelayer = (*redisHarness)(nil)
	_ conformance.Limiter          = (*redisHarness)(nil)
)

func newRedisHarness(t *testing.T, addr string) *redisHarness {
	ks, err := keys.New(redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	raw := newClient(addr)
	t.Cleanup(func() { raw.Close() })
	return &redisHarness{addr: addr, ks: ks, raw: raw}
}

// NewBackend returns a Backend with a client of its own.
func (h *redisHarness) NewBackend(t *testing.T) backend.Backend {
	conns := notifyconn.New()
	client := redis.NewClient(&redis.Options{Addr: h.addr, Dialer: conns.Dial})
	b, err := New(client, &Options{Prefix: h.ks.Prefix(), MaxWaiters: confMaxWaiters, PurgeLimit: confPurgeLimit})
	if err != nil {
		t.Fatal(err)
	}
	h.conns.Add(b, conns)
	// Registered before the suite's own cleanups, so it runs after them.
	t.Cleanup(func() {
		_ = b.Close()
		client.Close()
	})
	return b
}

// ExpireNow deletes id's lock key, as its TTL running out would: no
// script runs and nothing is published.
func (h *redisHarness) ExpireNow(t *testing.T, id string) {
	if err := h.raw.Del(context.Background(), h.ks.For(id).Lock).Err(); err != nil {
		t.Fatal(err)
	}
}

// suiteLease is above the longest lease the conformance suite takes (a
// minute): an id's fence key expires within scripts.FenceIdle of it.
const suiteLease = 10 * time.Minute

// StateLeft returns id's keys, but for a fence key that expires within
// its documented bound (scripts.FenceKeyExpires): a fence key with no
// TTL is state left.
func (h *redisHarness) StateLeft(t *testing.T, id string) []string {
	ctx := context.Background()
	var left []string
	iter := h.raw.Scan(ctx, 0, h.ks.Pattern(id), 100).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if _, suffix, err := h.ks.Parse(k); err == nil && suffix == keys.SuffixCounters {
			pttl, err := h.raw.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if pttl == -2 || scripts.FenceKeyExpires(pttl, suiteLease) {
				continue // gone since the SCAN, or expiring
			}
			k = fmt.Sprintf("%s (PTTL %v)", k, pttl)
		}
		left = append(left, k)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(left)
	return left
}

// Limits states the Options the harness gives every Backend.
func (h *redisHarness) Limits() conformance.Limits {
	return conformance.Limits{MaxWaiters: confMaxWaiters, PurgeLimit: confPurgeLimit}
}

// ForgetIdle deletes every key of id, the fence key included: what Redis
// deletes by itself once the id has been idle for the bound (an hour).
func (h *redisHarness) ForgetIdle(t *testing.T, id string) {
	k := h.ks.For(id)
	if err := h.raw.Del(context.Background(), k.Lock, k.Queue, k.Deadlines, k.Counters, k.Waiters).Err(); err != nil {
		t.Fatal(err)
	}
}

// DropNotifier closes b's pub/sub connection on the client's side; go-redis
// reconnects and subscribes again.
func (h *redisHarness) DropNotifier(t *testing.T, b backend.Backend) { h.conns.DropNotifier(t, b) }

// DelaySubscribe holds back b's SUBSCRIBE commands by d.
func (h *redisHarness) DelaySubscribe(t *testing.T, b backend.Backend, d time.Duration) {
	h.conns.DelaySubscribe(t, b, d)
}

// TestStateLeftFenceKey: the harness's StateChecker passes over a fence
// key that expires within its bound, and reports one with no TTL or a
// longer one, as it reports every other key.
func TestStateLeftFenceKey(t *testing.T) {
	h := newRedisHarness(t, redistest.Addr(t))
	ctx := context.Background()
	k := h.ks.For("x")
	t.Cleanup(func() { h.raw.Del(ctx, k.Counters, k.Lock) })
	if err := h.raw.HSet(ctx, k.Counters, "fence", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if left := h.StateLeft(t, "x"); len(left) != 1 {
		t.Fatalf("a fence key with no TTL: StateLeft = %q, want it reported", left)
	}
	h.raw.PExpire(ctx, k.Counters, scripts.FenceIdle)
	if left := h.StateLeft(t, "x"); len(left) != 0 {
		t.Fatalf("a fence key expiring within %v: StateLeft = %q, want nothing", scripts.FenceIdle, left)
	}
	h.raw.PExpire(ctx, k.Counters, 3*scripts.FenceIdle)
	if left := h.StateLeft(t, "x"); len(left) != 1 {
		t.Fatalf("a fence key expiring in %v: StateLeft = %q, want it reported", 3*scripts.FenceIdle, left)
	}
	h.raw.PExpire(ctx, k.Counters, time.Minute)
	h.raw.Set(ctx, k.Lock, "T", time.Minute)
	if left := h.StateLeft(t, "x"); len(left) != 1 || left[0] != k.Lock {
		t.Fatalf("a lock key: StateLeft = %q, want [%s]", left, k.Lock)
	}
}
