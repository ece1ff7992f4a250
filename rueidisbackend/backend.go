package rueidisbackend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/engine"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/redis/wakeup"
)

// Options configures a Backend. Every zero field means the default, except
// that New needs ClientOption.InitAddress.
type Options struct {
	// ClientOption is what New builds the Backend's own rueidis client
	// from: addresses, credentials, TLS, Sentinel, timeouts. New overrides
	// the fields that client-side caching depends on (see the package doc).
	// They are OnInvalidations (yours, if set, is still called after the
	// Backend's; it sees the invalidations of the Backend's inbox keys
	// only), ClientTrackingOptions (["BCAST", "PREFIX", <the Backend's inbox
	// prefix>, "NOLOOP"]), PipelineMultiplex (-1:
	// one connection per node), DisableAutoPipelining and AlwaysRESP2
	// (false), and BlockingPipeline (no limit: batches stay on that
	// connection).
	// Set ClientOption.DisableCache to use pub/sub wake-ups instead.
	// ReplicaOnly and SendToReplicas are rejected: every step writes.
	// NewWithClient takes a client instead and rejects a non-zero
	// ClientOption. Default: the zero ClientOption, which New rejects for
	// its missing InitAddress.
	ClientOption rueidis.ClientOption
	// ClientBuilder builds the client from the ClientOption New prepared,
	// e.g. to wrap it with rueidishook or tracing. It must build the client
	// from that option, unchanged in the fields listed above. Default:
	// rueidis.NewClient.
	ClientBuilder func(rueidis.ClientOption) (rueidis.Client, error)
	// Prefix, MaxWaiters, PurgeLimit, ShardedPubSub, WaitReplicas and
	// WaitTimeout mean what they mean in redisbackend.Options, whose docs
	// say it in full; only what differs with rueidis is said here.

	// Prefix starts every key and channel name; no '{' or '}'. Default:
	// "lock:".
	Prefix string
	// MaxWaiters caps the waiters queued per id (backend.ErrQueueFull
	// beyond it; default 10000). PurgeLimit caps the expired waiters one
	// step removes (default 100, at most 100000).
	MaxWaiters, PurgeLimit int
	// ShardedPubSub makes the scripts send wake-ups with SPUBLISH (Redis
	// 7.0 or newer), and a Backend in PubSub mode listen with SSUBSCRIBE on
	// the id's master (through rueidis's connection to that node; one
	// goroutine per id waited on). In Tracking mode only the command the
	// scripts send changes, for the processes that listen by pub/sub.
	// Every process that locks the same ids must use the same setting.
	// Default: false.
	ShardedPubSub bool
	// WaitReplicas, when above zero, follows every grant and every Extend
	// by WAIT WaitReplicas WaitTimeout in the same DoMulti (on Cluster, one
	// per master, through rueidis's connection to it). A grant too few
	// replicas acknowledged is released and fails with
	// backend.ErrNotReplicated.
	// The WAIT holds the connection it runs on (rueidis pipelines every
	// command of a node on one connection) while replicas lag: keep
	// WaitTimeout short. Default: 0 (no WAIT).
	WaitReplicas int
	// WaitTimeout bounds each WAIT of WaitReplicas. Default: 100 ms.
	WaitTimeout time.Duration
}

// Mode is how a Backend learns of changes to the locks its waiters wait on.
type Mode int

const (
	// Tracking wakes waiters by client-side-caching invalidations of the
	// Backend's inbox keys, which the scripts write the head's wake-ups
	// to, on the Backend's own connection (CLIENT TRACKING ON BCAST PREFIX
	// ... NOLOOP, RESP3).
	Tracking Mode = iota + 1
	// PubSub wakes waiters by the scripts' PUBLISH of the head's token on
	// the Backend's inbox channel, on one dedicated pub/sub connection of
	// the client.
	PubSub
)

// String returns "tracking" or "pubsub".
func (m Mode) String() string {
	switch m {
	case Tracking:
		return "tracking"
	case PubSub:
		return "pubsub"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// adapter is the backend.Backend that New and NewWithClient return: Redis
// through rueidis. It also implements backend.Batcher, backend.Resolver,
// backend.HandOffer, backend.Sharer and backend.Inspector. It is safe for concurrent use;
// one adapter is one "process" of the lock protocol, with an inbox of its
// own that its waiters' wake-ups come to. Each step asks the engine for
// its call, sends it with the adapter's client (through the Runner, which
// the adapter built with that client) and hands the reply to the engine.
type adapter struct {
	cfg    engine.Config
	e      *engine.Engine // builds the steps' calls and parses their replies (set by bind)
	run    *engine.Runner // sends them with the client (set by bind)
	client rueidis.Client
	owned  bool // New built client; Close closes it
	mode   Mode
	track  *tracker // Tracking mode
	ps     *pubsub  // PubSub mode, classic (SUBSCRIBE)
	sps    *pubsub  // PubSub mode, sharded (SSUBSCRIBE)
	inbox  *wakeup.Inbox
}

var (
	_ backend.Backend   = (*adapter)(nil)
	_ backend.Batcher   = (*adapter)(nil)
	_ backend.Resolver  = (*adapter)(nil)
	_ backend.HandOffer = (*adapter)(nil)
	_ backend.Sharer    = (*adapter)(nil)
)

// New builds a rueidis client from opts.ClientOption (through
// opts.ClientBuilder) and returns a backend.Backend, for lock.New, that
// owns it. With caching on (the default) the client tracks the Backend's
// inbox keys and wake-ups come from their invalidations; with
// ClientOption.DisableCache, or when the server cannot track (rueidis
// reports rueidis.ErrNoCache: Redis < 6 or no RESP3; or INFO names a Redis
// older than 6.2), wake-ups come from pub/sub. ModeOf reports which one is
// in use. Bad options (nil opts, no ClientOption.InitAddress nor Sentinel,
// ReplicaOnly) are a *backend.ArgumentError naming the field; a client
// that cannot be built is that error.
//
// Ownership: whoever builds a client closes it. New builds this one, so
// the Backend closes it, in its Close (which the Locker's Close calls).
// Tracking mode needs the client built this way, because rueidis attaches
// the invalidation callback when it builds a client.
func New(opts *Options) (backend.Backend, error) {
	if opts == nil {
		return nil, &backend.ArgumentError{Arg: "opts", Reason: "nil: New needs opts.ClientOption.InitAddress (or use NewWithClient)"}
	}
	if len(opts.ClientOption.InitAddress) == 0 && opts.ClientOption.Sentinel.MasterSet == "" {
		return nil, &backend.ArgumentError{Arg: "opts.ClientOption.InitAddress", Reason: "no address to connect to"}
	}
	b, err := newBackend(opts)
	if err != nil {
		return nil, err
	}
	o := opts.ClientOption
	if o.ReplicaOnly || o.SendToReplicas != nil {
		return nil, &backend.ArgumentError{Arg: "opts.ClientOption.ReplicaOnly", Reason: "ReplicaOnly and SendToReplicas are not supported: every step writes"}
	}
	build := opts.ClientBuilder
	if build == nil {
		build = rueidis.NewClient
	}
	if !o.DisableCache {
		base := b.cfg.Keys.InboxBase(b.cfg.Process)
		watch := newConnWatch()
		b.track = newTracker(base, b.inbox, watch, o.OnInvalidations)
		t := o
		t.DialCtxFn = watch.dialer(o)
		t.OnInvalidations = b.track.onInvalidations
		t.ClientTrackingOptions = trackingOptions(base)
		t.PipelineMultiplex = -1
		t.DisableAutoPipelining = false
		t.AlwaysRESP2 = false
		t.BlockingPipeline = math.MaxInt32
		client, err := build(t)
		if err == nil && !canTrack(client, b.cfg.Keys.Inbox(b.cfg.Process, -1)) {
			client.Close() // Redis 6.0: no LPOP count for the drain
			err = rueidis.ErrNoCache
		}
		if err == nil {
			b.client, b.owned, b.mode = client, true, Tracking
			b.bind()
			b.track.start(func(ctx context.Context) error { return pingNodes(ctx, client) }, b.drain)
			return b, nil
		}
		if !errors.Is(err, rueidis.ErrNoCache) {
			return nil, fmt.Errorf("rueidisbackend: building the client: %w", err)
		}
		b.track = nil
		o.DisableCache = true // the server cannot track: pub/sub instead
	}
	client, err := build(o)
	if err != nil {
		return nil, fmt.Errorf("rueidisbackend: building the client: %w", err)
	}
	b.client, b.owned, b.mode = client, true, PubSub
	b.listen()
	b.bind()
	return b, nil
}

// canTrack reports whether the server can serve Tracking mode: Redis 6.2
// or newer, whose LPOP takes a count (the drain's). It asks just that: an
// LPOP with a count of 0 (which pops nothing) of the process's own inbox,
// which Redis 6.0 refuses as a wrong number of arguments. It asks no INFO,
// which the ACL category @dangerous holds (docs/deployment.md). A server
// that fails it otherwise is given the benefit of the doubt.
func canTrack(client rueidis.Client, inbox string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	err := client.Do(ctx, client.B().Lpop().Key(inbox).Count(0).Build()).Error()
	return err == nil || !lacksCount(err)
}

// lacksCount reports whether err is the refusal of an LPOP with a count
// by a server older than Redis 6.2.
func lacksCount(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.Contains(strings.ToLower(re.Error()), "wrong number of arguments")
}

// pingNodes PINGs the server, or on Redis Cluster every master, each
// through the client's own connection to it, and returns the first
// failure. After a lost tracking connection it so dials again the
// connection of the node that was lost, wherever its slots are, before the
// waiters re-check. Replicas are left alone: no step runs on them.
func pingNodes(ctx context.Context, client rueidis.Client) error {
	if client.Mode() != rueidis.ClientModeCluster {
		return client.Do(ctx, client.B().Ping().Build()).Error()
	}
	slots, err := clusterSlots(ctx, client)
	if err != nil {
		return err
	}
	nodes := client.Nodes()
	masters := map[string]rueidis.Client{}
	for _, r := range slots {
		if n, ok := nodes[r.addr]; ok {
			masters[r.addr] = n
		}
	}
	if len(masters) == 0 {
		return client.Do(ctx, client.B().Ping().Build()).Error()
	}
	errs := make(chan error, len(masters))
	for _, n := range masters {
		go func() { errs <- n.Do(ctx, n.B().Ping().Build()).Error() }()
	}
	var first error
	for range masters {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// slotRange is one line of CLUSTER SLOTS: slots lo..hi are served by the
// master at addr.
type slotRange struct {
	lo, hi int
	addr   string
}

// clusterSlots asks a node of the cluster who serves which slots.
func clusterSlots(ctx context.Context, client rueidis.Client) ([]slotRange, error) {
	slots, err := client.Do(ctx, client.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	var out []slotRange
	for _, r := range slots {
		a, _ := r.ToArray()
		if len(a) < 3 {
			continue
		}
		lo, _ := a[0].AsInt64()
		hi, _ := a[1].AsInt64()
		m, _ := a[2].ToArray()
		if len(m) < 2 {
			continue
		}
		host, _ := m[0].ToString()
		port, _ := m[1].AsInt64()
		out = append(out, slotRange{lo: int(lo), hi: int(hi), addr: net.JoinHostPort(host, strconv.FormatInt(port, 10))})
	}
	return out, nil
}

// listen sets up the PubSub mode's subscriptions.
func (b *adapter) listen() {
	if b.cfg.Sharded {
		b.sps = newSpubsub(b.client)
	} else {
		b.ps = newPubsub(b.client)
	}
}

// NewWithClient returns a backend.Backend, for lock.New, on a client the
// caller built, and so closes (after the Locker): the Backend's Close does
// not close it. A rueidis client attaches its invalidation callback when
// it is built, so this Backend cannot use tracking. Its wake-ups come from
// pub/sub, on one connection it takes from the client's dedicated pool for
// its lifetime. opts.ClientOption and opts.ClientBuilder must be zero; nil
// opts means the defaults. Bad input is a *backend.ArgumentError naming it.
func NewWithClient(client rueidis.Client, opts *Options) (backend.Backend, error) {
	if client == nil {
		return nil, &backend.ArgumentError{Arg: "client", Reason: "nil client"}
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.ClientBuilder != nil || o.ClientOption.InitAddress != nil || o.ClientOption.Sentinel.MasterSet != "" {
		return nil, &backend.ArgumentError{Arg: "opts.ClientOption", Reason: "NewWithClient takes no ClientOption or ClientBuilder: use New for a client the Backend builds"}
	}
	b, err := newBackend(&o)
	if err != nil {
		return nil, err
	}
	b.client, b.mode = client, PubSub
	b.listen()
	b.bind()
	return b, nil
}

func newBackend(o *Options) (*adapter, error) {
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	return &adapter{cfg: cfg, inbox: wakeup.NewInbox()}, nil
}

// config checks o's lock options and derives from them what the engine
// needs (bind adds Tracking once the mode is known).
func (o *Options) config() (engine.Config, error) {
	ks, err := engine.ParsePrefix(o.Prefix)
	if err != nil {
		return engine.Config{}, err
	}
	limits, err := engine.ParseLimits(o.MaxWaiters, o.PurgeLimit)
	if err != nil {
		return engine.Config{}, err
	}
	wait, err := engine.ParseWait(o.WaitReplicas, o.WaitTimeout)
	if err != nil {
		return engine.Config{}, err
	}
	return engine.Config{Adapter: "rueidisbackend", Keys: ks, Limits: limits, Sharded: o.ShardedPubSub, Wait: wait, Process: engine.NewProcess()}, nil
}

// bind sets up the engine and the Runner once the client and the mode are
// there. rueidis never resends a write, so the Runner resends a step once
// after a broken connection. In Tracking mode the scripts push wake-ups to
// the inbox keys.
func (b *adapter) bind() {
	var r engine.Replicas
	if b.cfg.Wait.Replicas > 0 {
		r = &replicas{client: b.client}
	}
	b.cfg.Tracking = b.mode == Tracking
	b.e = engine.New(b.cfg, b.client.Mode() == rueidis.ClientModeCluster)
	b.run = engine.NewRunner(b.e, commands{b.client}, r, true)
}

// drainBatch is the most messages one LPOP of a drain takes from an inbox
// key; a key that had more is drained again at once.
const drainBatch = 1000

// drain takes the messages of inbox keys (Tracking mode): LPOP with a
// count (Redis 6.2 or newer), one per key, in one round trip. It is one
// plain command of the tracking connection, so NOLOOP keeps its write from
// coming back as an invalidation (a script's write would come back: Redis
// does not apply NOLOOP to them in broadcasting mode).
func (b *adapter) drain(ctx context.Context, inboxes []string) ([][]string, error) {
	out := make([][]string, len(inboxes))
	todo := make([]int, len(inboxes))
	for i := range todo {
		todo[i] = i
	}
	var first error
	for len(todo) > 0 {
		cmds := make(rueidis.Commands, len(todo))
		for j, i := range todo {
			cmds[j] = b.client.B().Lpop().Key(inboxes[i]).Count(drainBatch).Build()
		}
		var again []int
		for j, r := range b.client.DoMulti(ctx, cmds...) {
			i := todo[j]
			msgs, err := r.AsStrSlice()
			if err != nil && !rueidis.IsRedisNil(err) {
				if first == nil {
					first = err
				}
				continue
			}
			out[i] = append(out[i], msgs...)
			if len(msgs) == drainBatch {
				again = append(again, i)
			}
		}
		todo = again
	}
	return out, first
}

// ModeOf reports how b, a Backend of this package, learns of released
// locks: Tracking or PubSub. It returns 0 for any other backend.
func ModeOf(b backend.Backend) Mode {
	if a, ok := b.(*adapter); ok {
		return a.mode
	}
	return 0
}

// keyNames returns the names of id's keys and channel.
func (b *adapter) keyNames(id string) keys.ID { return b.cfg.Keys.For(id) }

// Subscribe delivers id's wake-ups to fn until cancel is called.
//
// In Tracking mode it only registers fn: the client tracks the inbox keys
// from its first connection on, and a wake-up waits in its key until it is
// drained, so nothing can slip between. In PubSub mode the Backend's first
// Subscribe (per slot's inbox with ShardedPubSub on Cluster) returns once
// the server has confirmed the SUBSCRIBE of the inbox; later ones only
// register fn.
func (b *adapter) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (cancel func(), err error) {
	if err := b.run.Check(ctx); err != nil {
		return nil, err
	}
	channel := b.Inbox(id)
	if b.track != nil {
		return b.inbox.Register(id, channel, fn)
	}
	return b.inbox.Subscribe(ctx, id, channel, fn, func(ctx context.Context, deliver func(backend.Wake)) (func(), error) {
		if b.sps != nil {
			return b.sps.subscribe(ctx, "", channel, deliver)
		}
		return b.ps.subscribe(ctx, "", channel, deliver)
	})
}

// Inbox returns the name of the inbox that this Backend's wake-ups for id
// come to: one per hash slot on Redis Cluster (SPUBLISH, or an inbox key),
// otherwise one for every id.
func (b *adapter) Inbox(id string) string { return b.e.Inbox(id) }

// Close ends the Backend's subscriptions and waits for its goroutines; a
// Backend from New also closes the client New built (a client given to
// NewWithClient is left open: its builder closes it). Later calls return
// backend.ErrClosed.
func (b *adapter) Close() error {
	if !b.run.Close() {
		return backend.ErrClosed
	}
	b.inbox.Close()
	if b.track != nil {
		b.track.close()
	}
	if b.ps != nil {
		b.ps.close()
	}
	if b.sps != nil {
		b.sps.close()
	}
	if b.owned {
		b.client.Close()
	}
	return nil
}
