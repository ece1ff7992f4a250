package redisbackend

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/engine"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/redis/wakeup"
)

// Client is the part of a go-redis client that the backend uses. Every
// redis.UniversalClient satisfies it: *redis.Client (also from
// redis.NewFailoverClient) and *redis.ClusterClient. *redis.Ring is
// rejected by New: it shards channels by name and cannot open the one
// subscription that serves every id.
type Client interface {
	redis.Scripter
	// Pipeline batches the steps of AcquireBatch, LeaveBatch and Heartbeat
	// into one round trip.
	Pipeline() redis.Pipeliner
	// Subscribe opens the backend's one shared pub/sub connection.
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Options configures a Backend. The zero value (or nil) means the defaults.
type Options struct {
	// Prefix starts every key and channel name. It must not contain '{' or
	// '}'. Default: "lock:".
	Prefix string
	// MaxWaiters caps the waiters queued per id (H3); an enqueue beyond it
	// fails with backend.ErrQueueFull. Default: 10000.
	MaxWaiters int
	// PurgeLimit caps the expired waiters one step removes (H3); every
	// expired waiter is still removed, over as many steps as it takes.
	// Default: 100. At most 100000.
	PurgeLimit int
	// ShardedPubSub sends wake-ups with SPUBLISH and listens with
	// SSUBSCRIBE (sharded pub/sub, Redis 7.0 or newer) instead of PUBLISH
	// and SUBSCRIBE. On Redis Cluster a PUBLISH is forwarded to every node;
	// an SPUBLISH stays on the master that serves the id's slot. The
	// Backend listens there: one pub/sub connection per master that serves
	// an id it waits on, moved when the slot moves. On one server only the
	// commands change. Every process that locks the same ids must use the
	// same setting: a SUBSCRIBE does not hear an SPUBLISH, and waiters
	// would learn of releases only from their heartbeats. With a server
	// older than 7.0 every step fails with a LOCKBADARG error reply, and
	// nothing of the step is written (the prefix's wire marker may be, see
	// the package doc). Default: false.
	ShardedPubSub bool
	// WaitReplicas, when above zero, makes every grant and every Extend
	// wait until that many replicas of the master have acknowledged it.
	// The step is followed, on the same connection and in the same round
	// trip, by WAIT WaitReplicas WaitTimeout (on Cluster, one WAIT per
	// master in a batch). A grant that fewer replicas acknowledged within
	// WaitTimeout is released again and fails with backend.ErrNotReplicated (in
	// AcquireBatch, that request's BatchGrant.Err). An Extend fails with
	// backend.ErrNotReplicated and leaves the earlier, confirmed, expiry as the one
	// to trust. It narrows the failover risk to grants no replica had when
	// they were confirmed; it does not close it (see the package doc).
	// Every Acquire then waits for the replicas, granted or not, up to
	// WaitTimeout while they lag. It needs a *redis.Client (one server, or
	// a failover client) or a *redis.ClusterClient. Default: 0 (no WAIT).
	WaitReplicas int
	// WaitTimeout bounds each WAIT of WaitReplicas. Default: 100 ms.
	WaitTimeout time.Duration
}

// adapter is the backend.Backend that New returns: Redis through go-redis.
// It also implements backend.Batcher, backend.Resolver, backend.HandOffer,
// backend.Sharer and backend.Inspector. It is safe for concurrent use; one adapter is one
// "process" of the lock protocol. Each step asks the engine for its call,
// sends it with the adapter's client (through the Runner, which the
// adapter built with that client) and hands the reply to the engine.
type adapter struct {
	e     *engine.Engine // builds the steps' calls and parses their replies
	run   *engine.Runner // sends them with cmds (and repl, for WaitReplicas)
	subs  wakeSource
	inbox *wakeup.Inbox // routes the inbox channel's wake-ups to each id's subscribers
}

// wakeSource is where a Backend's wake-ups come from: one pub/sub
// connection (subscriber), or one per cluster master with sharded pub/sub
// on a cluster client (newClusterSubscriber).
type wakeSource interface {
	subscribe(ctx context.Context, id, channel string, fn func(backend.Wake)) (func(), error)
	close() error
}

var (
	_ backend.Backend   = (*adapter)(nil)
	_ backend.Batcher   = (*adapter)(nil)
	_ backend.Resolver  = (*adapter)(nil)
	_ backend.HandOffer = (*adapter)(nil)
	_ backend.Sharer    = (*adapter)(nil)
)

// New returns a backend.Backend on client, for lock.New; nil opts means
// the defaults. It does no I/O; the pub/sub connection is opened by the
// first Subscribe. Bad input (a nil or *redis.Ring client, a bad option)
// is a *backend.ArgumentError naming it.
//
// Ownership: the caller built client, so the caller closes it, after the
// Locker (whose Close closes this Backend: its pub/sub connection and
// goroutines, never the client).
func New(client Client, opts *Options) (backend.Backend, error) {
	if client == nil {
		return nil, &backend.ArgumentError{Arg: "client", Reason: "nil client"}
	}
	if _, ok := client.(*redis.Ring); ok {
		return nil, &backend.ArgumentError{Arg: "client", Reason: "*redis.Ring is not supported (it shards channels by name): use a Client, a failover client or a ClusterClient"}
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	cc, isCluster := client.(*redis.ClusterClient)
	e := engine.New(cfg, isCluster)
	cmds := newCommands(client, e.ConstArgs())
	var repl engine.Replicas
	if cfg.Wait.Replicas > 0 {
		if repl, err = newReplicas(client, cmds, cfg.Wait.Timeout); err != nil {
			return nil, err
		}
	}
	b := &adapter{e: e, run: engine.NewRunner(e, cmds.sender(), repl, false), inbox: wakeup.NewInbox()}
	switch {
	case !o.ShardedPubSub:
		b.subs = newSubscriber(client, false)
	case isCluster:
		b.subs = newClusterSubscriber(cc)
	default:
		if _, ok := client.(shardSubscriber); !ok {
			return nil, &backend.ArgumentError{Arg: "opts.ShardedPubSub", Reason: fmt.Sprintf("needs a client with SSubscribe; %T has none", client)}
		}
		b.subs = newSubscriber(client, true)
	}
	return b, nil
}

// config checks o and derives from it what the engine needs.
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
	return engine.Config{Adapter: "redisbackend", Keys: ks, Limits: limits, Sharded: o.ShardedPubSub, Wait: wait, Process: engine.NewProcess()}, nil
}

// Subscribe delivers id's wake-ups to fn until cancel is called. They come
// to the Backend's inbox channel (one per hash slot with ShardedPubSub on
// Redis Cluster), which the first Subscribe (of the slot) subscribes; it
// returns once the server has confirmed that. Every other Subscribe is a
// local registration: no command.
func (b *adapter) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (cancel func(), err error) {
	if err := b.run.Check(ctx); err != nil {
		return nil, err
	}
	channel := b.Inbox(id)
	return b.inbox.Subscribe(ctx, id, channel, fn, func(ctx context.Context, deliver func(backend.Wake)) (func(), error) {
		return b.subs.subscribe(ctx, "", channel, deliver)
	})
}

// Inbox returns the name of the channel that this Backend's wake-ups for
// id come to: one per hash slot with ShardedPubSub on Redis Cluster,
// otherwise one for every id.
func (b *adapter) Inbox(id string) string { return b.e.Inbox(id) }

// Close closes the pub/sub connection and waits for its goroutines. It
// does not close the client. Later calls return backend.ErrClosed.
func (b *adapter) Close() error {
	if !b.run.Close() {
		return backend.ErrClosed
	}
	b.inbox.Close()
	return b.subs.close()
}

// keyNames returns the names of id's keys and channel.
func (b *adapter) keyNames(id string) keys.ID { return b.e.Config().Keys.For(id) }
