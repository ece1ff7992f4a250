package clustertest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/conformance"
	"github.com/redislocker/lock/internal/keys"
	"github.com/redislocker/lock/internal/notifyconn"
	"github.com/redislocker/lock/internal/rediscluster"
	"github.com/redislocker/lock/internal/scripts"
	"github.com/redislocker/lock/redisbackend"
	"github.com/redislocker/lock/rueidisbackend"
)

// TestConformanceGoRedis runs the shared suite with redisbackend on
// redis.ClusterClient, one client per backend.
func TestConformanceGoRedis(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return newGoRedisHarness(t, rediscluster.Shared(t), nil)
	})
}

// TestConformanceRueidisTracking runs the suite with rueidisbackend in
// Tracking mode on a rueidis cluster client (one tracking connection per
// node).
func TestConformanceRueidisTracking(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return newRueidisHarness(t, rediscluster.Shared(t), rueidisbackend.Tracking, nil)
	})
}

// TestConformanceRueidisPubSub runs the suite with rueidisbackend in
// PubSub mode (NewWithClient) on a rueidis cluster client.
func TestConformanceRueidisPubSub(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return newRueidisHarness(t, rediscluster.Shared(t), rueidisbackend.PubSub, nil)
	})
}

// TestConformanceGoRedisSharded runs the suite with redisbackend on
// redis.ClusterClient with ShardedPubSub: SPUBLISH from the scripts, one
// SSUBSCRIBE connection per master.
func TestConformanceGoRedisSharded(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return newGoRedisHarness(t, rediscluster.Shared(t), &redisbackend.Options{ShardedPubSub: true})
	})
}

// TestConformanceRueidisPubSubSharded runs the suite with rueidisbackend
// in PubSub mode with ShardedPubSub: SPUBLISH from the scripts, SSUBSCRIBE
// through rueidis's connection to each channel's master.
func TestConformanceRueidisPubSubSharded(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return newRueidisHarness(t, rediscluster.Shared(t), rueidisbackend.PubSub, &rueidisbackend.Options{ShardedPubSub: true})
	})
}

// goRedisHarness makes redisbackend Backends on a cluster under one prefix.
type goRedisHarness struct {
	addrs []string
	opts  redisbackend.Options
	ks    keys.Keyspace
	raw   *redis.ClusterClient
	conns notifyconn.Set
}

var (
	_ conformance.Expirer          = (*goRedisHarness)(nil)
	_ conformance.StateChecker     = (*goRedisHarness)(nil)
	_ conformance.Forgetter        = (*goRedisHarness)(nil)
	_ conformance.NotifierDropper  = (*goRedisHarness)(nil)
	_ conformance.SubscribeDelayer = (*goRedisHarness)(nil)
	_ conformance.Limiter          = (*goRedisHarness)(nil)
)

// The harnesses' small limits, so that waiter-cap and purge-limit can fill
// a queue; the suite's largest queue has 16 waiters.
const (
	confMaxWaiters = 64
	confPurgeLimit = 8
)

// forgetIdle deletes id's keys but the counters hash (all in one slot).
// forgetIdle deletes every key of id, the fence key included: what Redis
// deletes by itself once the id has been idle for the bound (an hour).
func forgetIdle(t *testing.T, raw *redis.ClusterClient, ks keys.Keyspace, id string) {
	k := ks.For(id)
	if err := raw.Del(ctx, k.Lock, k.Queue, k.Deadlines, k.Counters, k.Waiters).Err(); err != nil {
		t.Fatal(err)
	}
}

func (h *goRedisHarness) DropNotifier(t *testing.T, b backend.Backend) { h.conns.DropNotifier(t, b) }

func (h *goRedisHarness) DelaySubscribe(t *testing.T, b backend.Backend, d time.Duration) {
	h.conns.DelaySubscribe(t, b, d)
}

func (h *goRedisHarness) ForgetIdle(t *testing.T, id string) {
	forgetIdle(t, h.raw, h.ks, id)
}

func (h *goRedisHarness) Limits() conformance.Limits {
	return conformance.Limits{MaxWaiters: confMaxWaiters, PurgeLimit: confPurgeLimit}
}

func newGoRedisHarness(t *testing.T, c *rediscluster.Cluster, opts *redisbackend.Options) *goRedisHarness {
	h := &goRedisHarness{addrs: c.Addrs()}
	if opts != nil {
		h.opts = *opts
	}
	if h.opts.Prefix == "" {
		h.opts.Prefix = prefix(t)
	}
	h.opts.MaxWaiters, h.opts.PurgeLimit = confMaxWaiters, confPurgeLimit
	ks, err := keys.New(h.opts.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	h.ks = ks
	h.raw = redis.NewClusterClient(&redis.ClusterOptions{Addrs: h.addrs})
	t.Cleanup(func() { h.raw.Close() })
	return h
}

func (h *goRedisHarness) NewBackend(t *testing.T) backend.Backend {
	conns := notifyconn.New()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: h.addrs, Dialer: conns.Dial})
	o := h.opts
	b, err := redisbackend.New(client, &o)
	if err != nil {
		t.Fatal(err)
	}
	h.conns.Add(b, conns)
	t.Cleanup(func() {
		_ = b.Close()
		client.Close()
	})
	return b
}

func (h *goRedisHarness) ExpireNow(t *testing.T, id string) {
	if err := h.raw.Del(ctx, h.ks.For(id).Lock).Err(); err != nil {
		t.Fatal(err)
	}
}

func (h *goRedisHarness) StateLeft(t *testing.T, id string) []string {
	return stateLeft(t, h.ks, id, func(fn func(addr string, c redis.Cmdable) error) error {
		return h.raw.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return fn(c.Options().Addr, c)
		})
	})
}

// suiteLease is above the longest lease the conformance suite takes (a
// minute): an id's fence key expires within scripts.FenceIdle of it.
const suiteLease = 10 * time.Minute

// stateLeft scans every master for id's keys, but for a fence key that
// expires within its documented bound (scripts.FenceKeyExpires): a fence
// key with no TTL is state left.
func stateLeft(t *testing.T, ks keys.Keyspace, id string, each func(func(addr string, c redis.Cmdable) error) error) []string {
	var mu sync.Mutex
	var left []string
	err := each(func(addr string, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, ks.Pattern(id), 100).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			if _, suffix, err := ks.Parse(k); err == nil && suffix == keys.SuffixCounters {
				pttl, err := c.PTTL(ctx, k).Result()
				if err != nil {
					return err
				}
				if pttl == -2 || scripts.FenceKeyExpires(pttl, suiteLease) {
					continue // gone since the SCAN, or expiring
				}
				k = fmt.Sprintf("%s (PTTL %v)", k, pttl)
			}
			mu.Lock()
			left = append(left, k)
			mu.Unlock()
		}
		return iter.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(left)
	return left
}

// rueidisHarness makes rueidisbackend Backends on a cluster under one
// prefix.
type rueidisHarness struct {
	addrs []string
	mode  rueidisbackend.Mode
	opts  rueidisbackend.Options
	ks    keys.Keyspace
	raw   *redis.ClusterClient
	conns notifyconn.Set
}

var (
	_ conformance.Expirer          = (*rueidisHarness)(nil)
	_ conformance.StateChecker     = (*rueidisHarness)(nil)
	_ conformance.Forgetter        = (*rueidisHarness)(nil)
	_ conformance.NotifierDropper  = (*rueidisHarness)(nil)
	_ conformance.SubscribeDelayer = (*rueidisHarness)(nil)
	_ conformance.Limiter          = (*rueidisHarness)(nil)
)

func (h *rueidisHarness) DropNotifier(t *testing.T, b backend.Backend) { h.conns.DropNotifier(t, b) }

func (h *rueidisHarness) DelaySubscribe(t *testing.T, b backend.Backend, d time.Duration) {
	h.conns.DelaySubscribe(t, b, d)
}

func (h *rueidisHarness) ForgetIdle(t *testing.T, id string) {
	forgetIdle(t, h.raw, h.ks, id)
}

// Limits states the options, and in Tracking mode the documented limits
// of invalidation wake-ups (see rueidisbackend's package doc).
func (h *rueidisHarness) Limits() conformance.Limits {
	tracking := h.mode == rueidisbackend.Tracking
	return conformance.Limits{MaxWaiters: confMaxWaiters, PurgeLimit: confPurgeLimit, UnnamedWakes: tracking, HeadChangeUnwoken: tracking}
}

func newRueidisHarness(t *testing.T, c *rediscluster.Cluster, mode rueidisbackend.Mode, opts *rueidisbackend.Options) *rueidisHarness {
	h := &rueidisHarness{addrs: c.Addrs(), mode: mode}
	if opts != nil {
		h.opts = *opts
	}
	if h.opts.Prefix == "" {
		h.opts.Prefix = prefix(t)
	}
	h.opts.MaxWaiters, h.opts.PurgeLimit = confMaxWaiters, confPurgeLimit
	ks, err := keys.New(h.opts.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	h.ks = ks
	h.raw = redis.NewClusterClient(&redis.ClusterOptions{Addrs: h.addrs})
	t.Cleanup(func() { h.raw.Close() })
	return h
}

func (h *rueidisHarness) NewBackend(t *testing.T) backend.Backend {
	conns := notifyconn.New()
	co := rueidis.ClientOption{InitAddress: h.addrs, DialCtxFn: conns.DialCtx}
	o := h.opts
	var b *rueidisbackend.Backend
	var err error
	if h.mode == rueidisbackend.Tracking {
		o.ClientOption = co
		b, err = rueidisbackend.New(o)
	} else {
		co.DisableCache = true
		client, cerr := rueidis.NewClient(co)
		if cerr != nil {
			t.Fatal(cerr)
		}
		t.Cleanup(client.Close)
		b, err = rueidisbackend.NewWithClient(client, &o)
	}
	if err != nil {
		t.Fatal(err)
	}
	if b.Mode() != h.mode {
		t.Fatalf("Mode() = %v, want %v", b.Mode(), h.mode)
	}
	h.conns.Add(b, conns)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func (h *rueidisHarness) ExpireNow(t *testing.T, id string) {
	if err := h.raw.Del(ctx, h.ks.For(id).Lock).Err(); err != nil {
		t.Fatal(err)
	}
}

func (h *rueidisHarness) StateLeft(t *testing.T, id string) []string {
	return stateLeft(t, h.ks, id, func(fn func(addr string, c redis.Cmdable) error) error {
		return h.raw.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return fn(c.Options().Addr, c)
		})
	})
}
