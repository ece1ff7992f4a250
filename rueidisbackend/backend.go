package rueidisbackend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/keys"
	"github.com/redislocker/lock/internal/scripts"
)

// Options configures a Backend. The zero value means the defaults, except
// that New needs ClientOption.InitAddress.
type Options struct {
	// ClientOption is what New builds the Backend's own rueidis client
	// from: addresses, credentials, TLS, Sentinel, timeouts. New overrides
	// the fields that client-side caching depends on (see the package doc):
	// OnInvalidations (yours, if set, is still called after the Backend's),
	// ClientTrackingOptions (["NOLOOP"]), PipelineMultiplex (-1: one
	// connection per node), DisableAutoPipelining and AlwaysRESP2 (false)
	// and BlockingPipeline (no limit, so batches stay on that connection).
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
	// ShardedPubSub makes the scripts send wake-ups with SPUBLISH instead
	// of PUBLISH (sharded pub/sub, Redis 7.0 or newer), and a Backend in
	// PubSub mode listen with SSUBSCRIBE. On Redis Cluster a PUBLISH is
	// forwarded to every node of the cluster; an SPUBLISH stays on the
	// master that serves the id's slot, where rueidis subscribes (on its
	// connection to that node; one goroutine per id waited on). In
	// Tracking mode only the command the scripts send changes (for the
	// processes that listen by pub/sub). Every process that locks the same
	// ids must use the same setting: a SUBSCRIBE does not hear an SPUBLISH
	// (waiters would then learn of releases only from their heartbeats).
	// With a server older than 7.0 every step fails with a LOCKBADARG
	// error reply, and nothing is written. Default: false.
	ShardedPubSub bool
	// WaitReplicas, when above zero, makes every grant and every Extend
	// wait until that many replicas of the master have acknowledged it:
	// the step is followed, on the same connection and in the same round
	// trip (one DoMulti), by WAIT WaitReplicas WaitTimeout (on Cluster,
	// one WAIT per master in a batch, sent through rueidis's connection to
	// that master). A grant that fewer replicas acknowledged within
	// WaitTimeout is released again and fails with ErrNotReplicated (in
	// AcquireBatch, that request's BatchGrant.Err); an Extend fails with
	// ErrNotReplicated and leaves the lease's earlier, confirmed, expiry
	// as the one to trust. It narrows the failover risk (a replica promoted
	// without a grant it never received hands the lock out again) to
	// grants no replica had received when they were confirmed; it does not
	// close it: WAIT does not make Redis strongly consistent (see the
	// package doc). Every Acquire then waits for the replicas, granted or
	// not, and the WAIT holds the connection it runs on (rueidis pipelines
	// every command of a node on one connection) for up to WaitTimeout
	// while the replicas lag or are gone: keep WaitTimeout short.
	// Default: 0 (no WAIT).
	WaitReplicas int
	// WaitTimeout bounds each WAIT of WaitReplicas. Default:
	// DefaultWaitTimeout (100 ms).
	WaitTimeout time.Duration
}

// Defaults of Options.
const (
	DefaultPrefix     = keys.DefaultPrefix
	DefaultMaxWaiters = 10000
	DefaultPurgeLimit = 100
)

// Mode is how a Backend learns of changes to the locks its waiters wait on.
type Mode int

const (
	// Tracking wakes waiters by client-side-caching invalidations of the
	// lock keys, on the Backend's own connection (CLIENT TRACKING ON
	// NOLOOP, RESP3).
	Tracking Mode = iota + 1
	// PubSub wakes waiters by the scripts' PUBLISH of the head's token, on
	// one dedicated pub/sub connection of the client.
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

// Backend is a backend.Backend on Redis through rueidis. It also
// implements backend.Batcher and backend.Resolver. It is safe for
// concurrent use; one Backend is one "process" of the lock protocol.
type Backend struct {
	client     rueidis.Client
	owned      bool // New built client; Close closes it
	mode       Mode
	ks         keys.Keyspace
	maxWaiters int
	purgeLimit int
	publish    scripts.Publish
	closed     atomic.Bool
	track      *tracker // Tracking mode
	ps         *pubsub  // PubSub mode, classic (SUBSCRIBE)
	sps        *spubsub // PubSub mode, sharded (SSUBSCRIBE)

	waitReplicas int           // Options.WaitReplicas
	waitTimeout  time.Duration // Options.WaitTimeout
	slots        slotMap       // who serves which slot, for WAIT on a cluster
}

var (
	_ backend.Backend  = (*Backend)(nil)
	_ backend.Batcher  = (*Backend)(nil)
	_ backend.Resolver = (*Backend)(nil)
)

// New builds a rueidis client from opts.ClientOption (through
// opts.ClientBuilder) and returns a Backend that owns it: Close closes it.
// With caching on (the default) the client tracks the lock keys its steps
// read and wake-ups come from their invalidations; with
// ClientOption.DisableCache, or when the server cannot track (rueidis
// reports rueidis.ErrNoCache: Redis < 6 or no RESP3), wake-ups come from
// pub/sub. Mode reports which one is in use.
func New(opts Options) (*Backend, error) {
	b, err := newBackend(&opts)
	if err != nil {
		return nil, err
	}
	o := opts.ClientOption
	if o.ReplicaOnly || o.SendToReplicas != nil {
		return nil, errors.New("rueidisbackend: ClientOption.ReplicaOnly and SendToReplicas are not supported: every step writes")
	}
	build := opts.ClientBuilder
	if build == nil {
		build = rueidis.NewClient
	}
	if !o.DisableCache {
		b.track = newTracker(b.ks, o.OnInvalidations)
		t := o
		t.OnInvalidations = b.track.onInvalidations
		t.ClientTrackingOptions = []string{"NOLOOP"}
		t.PipelineMultiplex = -1
		t.DisableAutoPipelining = false
		t.AlwaysRESP2 = false
		t.BlockingPipeline = math.MaxInt32
		client, err := build(t)
		if err == nil {
			b.client, b.owned, b.mode = client, true, Tracking
			b.track.setPing(func(ctx context.Context) error { return pingNodes(ctx, client) })
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
	return b, nil
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
func (b *Backend) listen() {
	if b.publish == scripts.Sharded {
		b.sps = newSpubsub(b.client)
	} else {
		b.ps = newPubsub(b.client)
	}
}

// NewWithClient returns a Backend on a client the caller built and keeps:
// Close does not close it. A rueidis client attaches its invalidation
// callback when it is built, so this Backend cannot use tracking: its
// wake-ups come from pub/sub, on one connection it takes from the client's
// dedicated pool for its lifetime. opts.ClientOption and
// opts.ClientBuilder must be zero; nil opts means the defaults.
func NewWithClient(client rueidis.Client, opts *Options) (*Backend, error) {
	if client == nil {
		return nil, errors.New("rueidisbackend: nil client")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.ClientBuilder != nil || o.ClientOption.InitAddress != nil || o.ClientOption.Sentinel.MasterSet != "" {
		return nil, errors.New("rueidisbackend: NewWithClient takes no ClientOption or ClientBuilder: use New for a client the Backend builds")
	}
	b, err := newBackend(&o)
	if err != nil {
		return nil, err
	}
	b.client, b.mode = client, PubSub
	b.listen()
	return b, nil
}

func newBackend(o *Options) (*Backend, error) {
	ks, err := keys.New(o.Prefix)
	if err != nil {
		return nil, fmt.Errorf("rueidisbackend: Options.Prefix: %w", err)
	}
	switch {
	case o.MaxWaiters == 0:
		o.MaxWaiters = DefaultMaxWaiters
	case o.MaxWaiters < 0:
		return nil, fmt.Errorf("rueidisbackend: Options.MaxWaiters %d is negative", o.MaxWaiters)
	}
	switch {
	case o.PurgeLimit == 0:
		o.PurgeLimit = DefaultPurgeLimit
	case o.PurgeLimit < 0 || o.PurgeLimit > scripts.MaxPurgeLimit:
		return nil, fmt.Errorf("rueidisbackend: Options.PurgeLimit %d is not in 1..%d", o.PurgeLimit, scripts.MaxPurgeLimit)
	}
	b := &Backend{ks: ks, maxWaiters: o.MaxWaiters, purgeLimit: o.PurgeLimit, publish: scripts.Classic}
	if o.ShardedPubSub {
		b.publish = scripts.Sharded
	}
	switch {
	case o.WaitReplicas < 0:
		return nil, fmt.Errorf("rueidisbackend: Options.WaitReplicas %d is negative", o.WaitReplicas)
	case o.WaitTimeout < 0:
		return nil, fmt.Errorf("rueidisbackend: Options.WaitTimeout %v is negative", o.WaitTimeout)
	case o.WaitReplicas > 0:
		b.waitReplicas, b.waitTimeout = o.WaitReplicas, o.WaitTimeout
		if b.waitTimeout == 0 {
			b.waitTimeout = DefaultWaitTimeout
		}
		if b.waitTimeout < time.Millisecond {
			return nil, fmt.Errorf("rueidisbackend: Options.WaitTimeout %v is below WAIT's resolution of 1ms", b.waitTimeout)
		}
	}
	return b, nil
}

// Mode reports how the Backend learns of released locks: Tracking or
// PubSub.
func (b *Backend) Mode() Mode { return b.mode }

// Prefix returns the key prefix in use.
func (b *Backend) Prefix() string { return b.ks.Prefix() }

// keyNames returns the names of id's keys and channel.
func (b *Backend) keyNames(id string) keys.ID { return b.ks.For(id) }

// Resolution returns one millisecond: leases are set with PX.
func (b *Backend) Resolution() time.Duration { return time.Millisecond }

// Acquire runs the acquire script: fair try-acquire with optional enqueue.
// In Tracking mode its read of the lock key makes the connection track it,
// in the same atomic step as the failed try.
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	if err := b.check(ctx); err != nil {
		return backend.Grant{}, err
	}
	k, a := scripts.AcquireCall(b.ks.For(req.ID), req, b.maxWaiters, b.purgeLimit, b.publish)
	if b.waitReplicas == 0 {
		return acquireResult(b.runRetry(ctx, scripts.Acquire, k, a))
	}
	res, acks, err := b.runReplicated(ctx, []call{{script: scripts.Acquire, keys: k, args: a}})
	if err != nil {
		return backend.Grant{}, err
	}
	g, err := acquireResult(res[0])
	if err == nil && g.Acquired && acks[0] < int64(b.waitReplicas) {
		b.unconfirmed(ctx, req.ID, req.Token)
		return backend.Grant{}, notReplicated(acks[0], b.waitReplicas, b.waitTimeout)
	}
	return g, err
}

// Release runs the release script: compare-and-delete, then wake the head.
// In Tracking mode it also wakes this Backend's own waiters of id, which
// NOLOOP keeps from hearing the release.
func (b *Backend) Release(ctx context.Context, id, token string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	k, a := scripts.ReleaseCall(b.ks.For(id), token, b.purgeLimit, b.publish)
	err := replyErr(b.run(ctx, scripts.Release, k, a).Error())
	if retryable(ctx, err) {
		// Sent once more, as runRetry does; but a resent release that
		// finds the lock not held may follow a first one that released
		// it: then the outcome is unknown, and the first error says so.
		if again := replyErr(b.run(ctx, scripts.Release, k, a).Error()); !errors.Is(again, backend.ErrNotHeld) {
			err = again
		}
	}
	if !errors.Is(err, backend.ErrNotHeld) {
		b.ownWrite(id, false) // released, or maybe (unknown outcome)
	}
	return err
}

// Extend runs the extend script: compare-and-PEXPIRE.
func (b *Backend) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	k, a := scripts.ExtendCall(b.ks.For(id), token, ttl)
	if b.waitReplicas == 0 {
		return replyErr(b.runRetry(ctx, scripts.Extend, k, a).Error())
	}
	res, acks, err := b.runReplicated(ctx, []call{{script: scripts.Extend, keys: k, args: a}})
	if err != nil {
		return err
	}
	if err := replyErr(res[0].Error()); err != nil {
		return err
	}
	if acks[0] < int64(b.waitReplicas) {
		return notReplicated(acks[0], b.waitReplicas, b.waitTimeout)
	}
	return nil
}

// Leave runs the leave script: drop the entry, release a raced grant, wake
// the new head. In Tracking mode a Leave that removed something wakes every
// other waiter of id in this Backend.
func (b *Backend) Leave(ctx context.Context, id, token string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	k, a := scripts.LeaveCall(b.ks.For(id), token, b.purgeLimit, b.publish)
	changed, err := leaveResult(b.runRetry(ctx, scripts.Leave, k, a))
	if changed || err != nil {
		b.ownWrite(id, true)
	}
	return err
}

// Heartbeat runs the heartbeat script once per id (the waiters of one id
// share a call), all of them in one round trip.
func (b *Backend) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	if len(waiters) == 0 {
		return nil, nil
	}
	groups := scripts.GroupHeartbeats(waiters)
	calls := make([]call, len(groups))
	for i, g := range groups {
		k, a := scripts.HeartbeatCall(b.ks.For(g.ID), g.Tokens, waiterTTL, b.purgeLimit, b.publish)
		calls[i] = call{script: scripts.Heartbeat, keys: k, args: a}
	}
	res, err := b.runAll(ctx, calls)
	if err != nil {
		return nil, err
	}
	out := make([]backend.HeartbeatResult, len(waiters))
	for i, g := range groups {
		vals, err := res[i].AsIntSlice()
		if err != nil {
			return nil, replyErr(err)
		}
		if err := scripts.ScatterHeartbeat(out, g, vals); err != nil {
			return nil, fmt.Errorf("rueidisbackend: %w", err)
		}
	}
	return out, nil
}

// AcquireBatch runs one acquire script per request, in one round trip.
// ErrQueueFull is reported per request.
func (b *Backend) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	calls := make([]call, len(reqs))
	for i, r := range reqs {
		k, a := scripts.AcquireCall(b.ks.For(r.ID), r, b.maxWaiters, b.purgeLimit, b.publish)
		calls[i] = call{script: scripts.Acquire, keys: k, args: a}
	}
	var res []rueidis.RedisResult
	var acks []int64
	var err error
	if b.waitReplicas == 0 {
		res, err = b.runAll(ctx, calls)
	} else {
		res, acks, err = b.runReplicated(ctx, calls)
	}
	if err != nil {
		return nil, err
	}
	out := make([]backend.BatchGrant, len(reqs))
	for i, r := range res {
		g, err := acquireResult(r)
		if err != nil && !errors.Is(err, backend.ErrQueueFull) {
			return nil, err
		}
		if err == nil && g.Acquired && acks != nil && acks[i] < int64(b.waitReplicas) {
			b.unconfirmed(ctx, reqs[i].ID, reqs[i].Token)
			g, err = backend.Grant{}, notReplicated(acks[i], b.waitReplicas, b.waitTimeout)
		}
		out[i] = backend.BatchGrant{Grant: g, Err: err}
	}
	return out, nil
}

// LeaveBatch runs one leave script per waiter, in one round trip.
func (b *Backend) LeaveBatch(ctx context.Context, waiters []backend.Waiter) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	if len(waiters) == 0 {
		return nil
	}
	calls := make([]call, len(waiters))
	for i, w := range waiters {
		k, a := scripts.LeaveCall(b.ks.For(w.ID), w.Token, b.purgeLimit, b.publish)
		calls[i] = call{script: scripts.Leave, keys: k, args: a}
	}
	res, err := b.runAll(ctx, calls)
	if err != nil {
		for _, w := range waiters {
			b.ownWrite(w.ID, true)
		}
		return err
	}
	var first error
	for i, r := range res {
		changed, err := leaveResult(r)
		if changed || err != nil {
			b.ownWrite(waiters[i].ID, true)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Subscribe delivers id's wake-ups to fn until cancel is called.
//
// In Tracking mode it only registers fn: the connection that receives the
// invalidations is the one every step runs on, and the waiting Acquire that
// follows Subscribe tracks the lock key in the same atomic step as its
// check, so nothing can slip between. In PubSub mode it returns once the
// server has confirmed the SUBSCRIBE.
func (b *Backend) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (cancel func(), err error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	if b.track != nil {
		return b.track.subscribe(id, b.ks.For(id).Lock, fn)
	}
	if b.sps != nil {
		return b.sps.subscribe(ctx, id, b.ks.Channel(id), fn)
	}
	return b.ps.subscribe(ctx, id, b.ks.Channel(id), fn)
}

// Close ends the Backend's subscriptions and waits for its goroutines; a
// Backend from New also closes its client (a client given to NewWithClient
// is left open). Later calls return backend.ErrClosed.
func (b *Backend) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return backend.ErrClosed
	}
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

func (b *Backend) check(ctx context.Context) error {
	if b.closed.Load() {
		return backend.ErrClosed
	}
	return ctx.Err()
}

// ownWrite tells this Backend's own waiters of id about a step of its own
// that may have freed the lock or changed the head (Tracking mode only:
// NOLOOP keeps the connection from hearing its own writes, and pub/sub
// delivers the scripts' PUBLISH to every subscriber, this one included).
// all wakes every local waiter: after a Leave the leaver may still be the
// earliest one registered.
func (b *Backend) ownWrite(id string, all bool) {
	if b.track != nil {
		b.track.deliver(id, backend.Wake{ID: id, All: all})
	}
}

// call is one script invocation.
type call struct {
	script scripts.Script
	keys   []string
	args   []string
}

func (b *Backend) evalsha(s scripts.Script, k, a []string) rueidis.Completed {
	return b.client.B().Evalsha().Sha1(s.SHA1).Numkeys(int64(len(k))).Key(k...).Arg(a...).Build()
}

func (b *Backend) eval(s scripts.Script, k, a []string) rueidis.Completed {
	return b.client.B().Eval().Script(s.Source).Numkeys(int64(len(k))).Key(k...).Arg(a...).Build()
}

// run sends EVALSHA and, when the server does not know the script, EVAL;
// a step the cluster refused for now (TRYAGAIN, CLUSTERDOWN) is resent as
// tryAgain says.
func (b *Backend) run(ctx context.Context, s scripts.Script, k, a []string) rueidis.RedisResult {
	var r rueidis.RedisResult
	send := func() {
		r = b.client.Do(ctx, b.evalsha(s, k, a))
		if isNoScript(r.Error()) {
			r = b.client.Do(ctx, b.eval(s, k, a))
		}
	}
	send()
	tryAgain(ctx, func() bool { return isTryAgain(r.Error()) }, send)
	return r
}

// Resending a step that Redis Cluster refused for now.
const (
	tryAgainFor   = 5 * time.Second        // longest time a step is resent
	tryAgainFirst = 10 * time.Millisecond  // first delay, doubled each time
	tryAgainMax   = 250 * time.Millisecond // longest delay
)

// tryAgain resends a step while again reports that Redis Cluster refused
// it for now, for up to tryAgainFor or until ctx ends. TRYAGAIN is the
// answer to a step whose keys are split between two nodes, or missing,
// while their slot migrates (a step's keys are often missing: a free lock
// has no lock key), CLUSTERDOWN the answer while a failover promotes a
// replica; either way the script did not run, so every step, Release
// too, can be sent again. rueidis resends only read-only commands then.
// In Tracking mode this matters twice: a step that does not run reads
// nothing, so it tracks nothing, and a waiter whose step failed learns of
// a release only when the core tries again.
func tryAgain(ctx context.Context, again func() bool, resend func()) {
	delay := tryAgainFirst
	deadline := time.Now().Add(tryAgainFor)
	for again() && time.Now().Before(deadline) {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		resend()
		delay = min(2*delay, tryAgainMax)
	}
}

// isTryAgain reports whether err is a refusal of Redis Cluster to run a
// step for now: TRYAGAIN (its slot migrates) or CLUSTERDOWN.
func isTryAgain(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && (re.IsTryAgain() || re.IsClusterDown())
}

// runRetry is run, sent once more when it failed on a broken connection.
// rueidis never resends a write, and a connection that broke while idle is
// often noticed only by the next command on it; every step but Release is
// idempotent by token (a retried acquire, enqueue, extend, leave or
// heartbeat is a no-op or does the same again), so it is safe to resend.
// Release is resent too, but a resent release that finds the lock not
// held reports the first failure, not ErrNotHeld (see Release).
func (b *Backend) runRetry(ctx context.Context, s scripts.Script, k, a []string) rueidis.RedisResult {
	r := b.run(ctx, s, k, a)
	if retryable(ctx, r.NonRedisError()) {
		r = b.run(ctx, s, k, a)
	}
	return r
}

// retryable reports whether err is a failure of the connection (not a
// reply of the server, the caller's ctx or a closed client).
func retryable(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && !errors.Is(err, rueidis.ErrClosing) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// runAll sends calls in one DoMulti of EVALSHAs and resends the ones the
// server did not know as EVALs in a second one (a NOSCRIPT reply means the
// call did not run). The returned error is a failure of the whole round
// trip; the per-call replies are in the results. Every step it batches is
// idempotent (acquire, leave, heartbeat), so a batch that failed on a
// broken connection is sent once more, as in runRetry.
func (b *Backend) runAll(ctx context.Context, calls []call) ([]rueidis.RedisResult, error) {
	res, err := b.runAllOnce(ctx, calls)
	if retryable(ctx, err) {
		res, err = b.runAllOnce(ctx, calls)
	}
	return res, err
}

// runAllOnce is runAll without the retry after a connection failure; the
// calls the cluster refused for now are resent as tryAgain says.
func (b *Backend) runAllOnce(ctx context.Context, calls []call) ([]rueidis.RedisResult, error) {
	if len(calls) == 1 {
		c := calls[0]
		r := b.run(ctx, c.script, c.keys, c.args)
		if err := r.NonRedisError(); err != nil {
			return nil, err
		}
		return []rueidis.RedisResult{r}, nil
	}
	res := make([]rueidis.RedisResult, len(calls))
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	if err := b.sendSome(ctx, calls, res, all); err != nil {
		return nil, err
	}
	var refused []int
	var failed error
	tryAgain(ctx, func() bool {
		refused = refused[:0]
		for i, r := range res {
			if isTryAgain(r.Error()) {
				refused = append(refused, i)
			}
		}
		return len(refused) > 0 && failed == nil
	}, func() {
		failed = b.sendSome(ctx, calls, res, refused)
	})
	if failed != nil {
		return nil, failed
	}
	return res, nil
}

// sendSome sends the calls of idx in one DoMulti of EVALSHAs and the ones
// the server did not know as EVALs in a second one, and stores their
// results in res. It returns a failure of a round trip.
func (b *Backend) sendSome(ctx context.Context, calls []call, res []rueidis.RedisResult, idx []int) error {
	cmds := make(rueidis.Commands, len(idx))
	for j, i := range idx {
		c := calls[i]
		cmds[j] = b.evalsha(c.script, c.keys, c.args)
	}
	got := b.client.DoMulti(ctx, cmds...)
	var retry []int
	for j, i := range idx {
		res[i] = got[j]
		switch err := got[j].Error(); {
		case isNoScript(err):
			retry = append(retry, i)
		case got[j].NonRedisError() != nil:
			return err
		}
	}
	if len(retry) == 0 {
		return nil
	}
	cmds = make(rueidis.Commands, len(retry))
	for j, i := range retry {
		c := calls[i]
		cmds[j] = b.eval(c.script, c.keys, c.args)
	}
	again := b.client.DoMulti(ctx, cmds...)
	for j, i := range retry {
		if err := again[j].NonRedisError(); err != nil {
			return err
		}
		res[i] = again[j]
	}
	return nil
}

func acquireResult(r rueidis.RedisResult) (backend.Grant, error) {
	vals, err := r.AsIntSlice()
	if err != nil {
		return backend.Grant{}, replyErr(err)
	}
	return scripts.ParseAcquire(vals)
}

// leaveResult reports whether a leave removed an entry or released the
// lock.
func leaveResult(r rueidis.RedisResult) (changed bool, err error) {
	vals, err := r.AsIntSlice()
	if err != nil {
		return false, replyErr(err)
	}
	if len(vals) != 2 {
		return false, fmt.Errorf("rueidisbackend: leave replied %d values, want 2", len(vals))
	}
	return vals[0] != 0 || vals[1] != 0, nil
}

func isNoScript(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && re.IsNoScript()
}

// replyErr maps the scripts' error replies to the backend's sentinels and
// returns every other error as it is.
func replyErr(err error) error {
	if err == nil {
		return nil
	}
	re, ok := rueidis.IsRedisErr(err)
	if !ok || re.IsNil() {
		return err
	}
	if s := scripts.MapError(re.Error()); s != nil {
		return s
	}
	return err
}
