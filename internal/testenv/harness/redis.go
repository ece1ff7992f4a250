package harness

import (
	"context"
	"crypto/tls"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/conformance"
	"github.com/redislocker/lock/internal/redis/keys"
)

// Target is where a harness's backends run: one server, or a cluster,
// reached over TLS when TLS is set, and logged in to as Username when it
// is set.
type Target struct {
	Addrs   []string
	Cluster bool

	TLS                *tls.Config
	Username, Password string
}

// Server is the Target of the server at addr.
func Server(addr string) Target { return Target{Addrs: []string{addr}} }

// Cluster is the Target of the cluster whose nodes are at addrs.
func Cluster(addrs []string) Target { return Target{Addrs: addrs, Cluster: true} }

// client returns a go-redis client of tg whose connections conns wraps
// (nil: go-redis's own dialer).
func (tg Target) client(conns *notifyConns) redis.UniversalClient {
	var dial func(ctx context.Context, network, addr string) (net.Conn, error)
	if conns != nil {
		dial = conns.Dialer(tg.TLS)
	}
	if tg.Cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: tg.Addrs, Dialer: dial, TLSConfig: tg.TLS, Username: tg.Username, Password: tg.Password})
	}
	return redis.NewClient(&redis.Options{Addr: tg.Addrs[0], Dialer: dial, TLSConfig: tg.TLS, Username: tg.Username, Password: tg.Password})
}

// rueidisOption returns the rueidis ClientOption of tg whose connections
// conns wraps (over TLS when tg has it).
func (tg Target) rueidisOption(conns *notifyConns) rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress: tg.Addrs, ForceSingleClient: !tg.Cluster, DialCtxFn: conns.DialCtx,
		TLSConfig: tg.TLS, Username: tg.Username, Password: tg.Password,
	}
}

// Redis is the harness of the Redis adapters: it makes backends under one
// key prefix, each with a client of its own (a separate "process") that
// dials through a notifyConns, so that it can delay their subscriptions
// and break the connection of their wake-ups, and inspects the store with
// a go-redis client of its own.
type Redis struct {
	ks         keys.Keyspace
	raw        redis.UniversalClient
	newBackend func(t *testing.T, conns *notifyConns) backend.Backend
	conns      notifySet
}

// newRedis returns a Redis harness on tg under prefix whose backends come from
// newBackend.
func newRedis(t *testing.T, tg Target, prefix string, newBackend func(*testing.T, *notifyConns) backend.Backend) *Redis {
	ks, err := keys.New(prefix)
	if err != nil {
		t.Fatal(err)
	}
	raw := tg.client(nil)
	t.Cleanup(func() { raw.Close() })
	if _, cluster := raw.(*redis.ClusterClient); !cluster {
		ks = ks.OneServer() // as the adapters' engine names the keys
	}
	return &Redis{ks: ks, raw: raw, newBackend: newBackend}
}

// NewBackend returns a Backend with a client of its own.
func (h *Redis) NewBackend(t *testing.T) backend.Backend {
	conns := newNotifyConns()
	b := h.newBackend(t, conns)
	h.conns.Add(b, conns)
	return b
}

// ExpireNow deletes id's lock key, as its TTL running out would: no
// script runs and nothing is published (a tracking client is told, as it
// is of an expiry).
func (h *Redis) ExpireNow(t *testing.T, id string) {
	if err := h.raw.Del(context.Background(), h.ks.For(id).Lock).Err(); err != nil {
		t.Fatal(err)
	}
}

// StateLeft returns id's keys. It looks at id's keys only, never at the
// keys of its hash slot (the fence key, the release records: they are
// shared by the slot's ids, and expire) nor at the prefix's wire marker
// (keys.SuffixWire): protocol metadata with a TTL, not lock state.
func (h *Redis) StateLeft(t *testing.T, id string) []string { return StateLeft(t, h.raw, h.ks, id) }

// StateLeft is [Redis.StateLeft] of id in ks on raw's server, or on
// every master of raw's cluster.
func StateLeft(t testing.TB, raw redis.UniversalClient, ks keys.Keyspace, id string) []string {
	ctx := context.Background()
	var mu sync.Mutex
	var left []string
	scan := func(c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, ks.Pattern(id), 100).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			mu.Lock()
			left = append(left, k)
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	if cc, ok := raw.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error { return scan(c) })
	} else {
		err = scan(raw)
	}
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(left)
	return left
}

// Limits states the Options the harness gives every Backend. Both
// adapters, in every mode, name the head and wake only its process
// (rueidisbackend's Tracking mode through its inbox keys), and have every
// capability the suite knows: the harness claims full conformance
// (Strict), so that a property skipped after a refactoring fails.
func (h *Redis) Limits() conformance.Limits {
	return conformance.Limits{MaxWaiters: MaxWaiters, PurgeLimit: PurgeLimit, Strict: true}
}

// ForgetIdle deletes every key of id and the fence key of its slot: what
// Redis deletes by itself once the id's slot has been idle for the bound
// (an hour). The slot's other ids lose nothing: their next fences come
// from the clock, past every fence granted before.
func (h *Redis) ForgetIdle(t *testing.T, id string) {
	k := h.ks.For(id)
	if err := h.raw.Del(context.Background(), k.Lock, k.Queue, k.Fence, k.Waiters).Err(); err != nil {
		t.Fatal(err)
	}
}

// DropNotifier closes, on the client's side, b's connection that carries
// wake-ups: the pub/sub connection, or the tracking one (rueidisbackend's
// Tracking mode). The client dials a new one and the Backend subscribes
// again.
func (h *Redis) DropNotifier(t *testing.T, b backend.Backend) { h.conns.DropNotifier(t, b) }

// DelaySubscribe holds back b's SUBSCRIBE commands by d. In Tracking mode
// Subscribe sends none (it only registers), so it changes nothing there.
func (h *Redis) DelaySubscribe(t *testing.T, b backend.Backend, d time.Duration) {
	h.conns.DelaySubscribe(t, b, d)
}
