package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/keys"
	"github.com/redislocker/lock/internal/scripts"
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
	// and SUBSCRIBE. On Redis Cluster a PUBLISH is forwarded to every node
	// of the cluster; an SPUBLISH stays on the master that serves the id's
	// slot, and the Backend listens there: one pub/sub connection per
	// master that serves an id it waits on, moved when the slot moves. On
	// one server it changes nothing but the commands. Every process that
	// locks the same ids must use the same setting: a SUBSCRIBE does not
	// hear an SPUBLISH (waiters would then learn of releases only from
	// their heartbeats, within a third of their WaiterTimeout). With a
	// server older than 7.0 every step fails with a LOCKBADARG error
	// reply, and nothing is written. Default: false.
	ShardedPubSub bool
	// WaitReplicas, when above zero, makes every grant and every Extend
	// wait until that many replicas of the master have acknowledged it:
	// the step is followed, on the same connection and in the same round
	// trip, by WAIT WaitReplicas WaitTimeout (on Cluster, one WAIT per
	// master in a batch). A grant that fewer replicas acknowledged within
	// WaitTimeout is released again and fails with ErrNotReplicated (in
	// AcquireBatch, that request's BatchGrant.Err); an Extend fails with
	// ErrNotReplicated and leaves the lease's earlier, confirmed, expiry
	// as the one to trust. It narrows the failover risk (a replica promoted
	// without a grant it never received hands the lock out again) to
	// grants no replica had received when they were confirmed; it does not
	// close it: WAIT does not make Redis strongly consistent (see the
	// package doc). Every Acquire then waits for the replicas, granted or
	// not (up to WaitTimeout while they lag or are gone). It needs a
	// *redis.Client (one server, or a failover client) or a
	// *redis.ClusterClient. Default: 0 (no WAIT).
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

// Backend is a backend.Backend on Redis through go-redis. It also
// implements backend.Batcher and backend.Resolver. It is safe for
// concurrent use; one Backend is one "process" of the lock protocol.
type Backend struct {
	client     Client
	ks         keys.Keyspace
	maxWaiters int
	purgeLimit int
	publish    scripts.Publish
	closed     atomic.Bool
	subs       wakeSource

	waitReplicas int           // Options.WaitReplicas
	waitTimeout  time.Duration // Options.WaitTimeout
	repl         replicated    // the node clients WAIT runs on
}

// wakeSource is where a Backend's wake-ups come from: one pub/sub
// connection (subscriber), or one per cluster master with sharded pub/sub
// on a cluster client (clusterSubscriber).
type wakeSource interface {
	subscribe(ctx context.Context, id, channel string, fn func(backend.Wake)) (func(), error)
	close() error
}

var (
	_ backend.Backend  = (*Backend)(nil)
	_ backend.Batcher  = (*Backend)(nil)
	_ backend.Resolver = (*Backend)(nil)
)

// New returns a Backend on client. nil opts means the defaults. It does no
// I/O; the pub/sub connection is opened by the first Subscribe. Close the
// Backend before the client: Close does not close the client.
func New(client Client, opts *Options) (*Backend, error) {
	if client == nil {
		return nil, errors.New("redisbackend: nil client")
	}
	if _, ok := client.(*redis.Ring); ok {
		return nil, errors.New("redisbackend: *redis.Ring is not supported: use a Client, a failover client or a ClusterClient")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	ks, err := keys.New(o.Prefix)
	if err != nil {
		return nil, fmt.Errorf("redisbackend: Options.Prefix: %w", err)
	}
	switch {
	case o.MaxWaiters == 0:
		o.MaxWaiters = DefaultMaxWaiters
	case o.MaxWaiters < 0:
		return nil, fmt.Errorf("redisbackend: Options.MaxWaiters %d is negative", o.MaxWaiters)
	}
	switch {
	case o.PurgeLimit == 0:
		o.PurgeLimit = DefaultPurgeLimit
	case o.PurgeLimit < 0 || o.PurgeLimit > scripts.MaxPurgeLimit:
		return nil, fmt.Errorf("redisbackend: Options.PurgeLimit %d is not in 1..%d", o.PurgeLimit, scripts.MaxPurgeLimit)
	}
	b := &Backend{
		client:     client,
		ks:         ks,
		maxWaiters: o.MaxWaiters,
		purgeLimit: o.PurgeLimit,
		publish:    scripts.Classic,
	}
	switch {
	case o.WaitReplicas < 0:
		return nil, fmt.Errorf("redisbackend: Options.WaitReplicas %d is negative", o.WaitReplicas)
	case o.WaitTimeout < 0:
		return nil, fmt.Errorf("redisbackend: Options.WaitTimeout %v is negative", o.WaitTimeout)
	case o.WaitReplicas > 0:
		var readTimeout time.Duration
		switch c := client.(type) {
		case *redis.Client:
			b.repl.single, readTimeout = c, c.Options().ReadTimeout
		case *redis.ClusterClient:
			b.repl.cc, readTimeout = c, c.Options().ReadTimeout
		default:
			return nil, fmt.Errorf("redisbackend: Options.WaitReplicas needs a *redis.Client or *redis.ClusterClient (WAIT must follow a step on its connection); %T is neither", client)
		}
		b.waitReplicas, b.waitTimeout = o.WaitReplicas, o.WaitTimeout
		if b.waitTimeout == 0 {
			b.waitTimeout = DefaultWaitTimeout
		}
		if b.waitTimeout < time.Millisecond {
			return nil, fmt.Errorf("redisbackend: Options.WaitTimeout %v is below WAIT's resolution of 1ms", b.waitTimeout)
		}
		if readTimeout == 0 {
			readTimeout = 3 * time.Second // go-redis's default
		}
		if readTimeout > 0 && b.waitTimeout >= readTimeout {
			return nil, fmt.Errorf("redisbackend: Options.WaitTimeout %v must be below the client's ReadTimeout %v (a WAIT is read with it)", b.waitTimeout, readTimeout)
		}
	}
	switch cc, isCluster := client.(*redis.ClusterClient); {
	case !o.ShardedPubSub:
		b.subs = newSubscriber(client, false)
	case isCluster:
		b.publish = scripts.Sharded
		b.subs = newClusterSubscriber(cc)
	default:
		if _, ok := client.(shardSubscriber); !ok {
			return nil, fmt.Errorf("redisbackend: Options.ShardedPubSub needs a client with SSubscribe; %T has none", client)
		}
		b.publish = scripts.Sharded
		b.subs = newSubscriber(client, true)
	}
	return b, nil
}

// Prefix returns the key prefix in use.
func (b *Backend) Prefix() string { return b.ks.Prefix() }

// keyNames returns the names of id's keys and channel.
func (b *Backend) keyNames(id string) keys.ID { return b.ks.For(id) }

// Resolution returns one millisecond: leases are set with PX.
func (b *Backend) Resolution() time.Duration { return time.Millisecond }

// Acquire runs the acquire script: fair try-acquire with optional enqueue.
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	if err := b.check(ctx); err != nil {
		return backend.Grant{}, err
	}
	k, a := scripts.AcquireCall(b.ks.For(req.ID), req, b.maxWaiters, b.purgeLimit, b.publish)
	if b.waitReplicas == 0 {
		return acquireResult(b.run(ctx, scripts.Acquire, k, a))
	}
	cmds, acks, err := b.runReplicated(ctx, []call{{script: scripts.Acquire, keys: k, args: a}})
	if err != nil {
		return backend.Grant{}, err
	}
	g, err := acquireResult(cmds[0])
	if err == nil && g.Acquired && acks[0] < int64(b.waitReplicas) {
		b.unconfirmed(ctx, req.ID, req.Token)
		return backend.Grant{}, notReplicated(acks[0], b.waitReplicas, b.waitTimeout)
	}
	return g, err
}

// Release runs the release script: compare-and-delete, then wake the head.
func (b *Backend) Release(ctx context.Context, id, token string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	return b.release(ctx, id, token)
}

func (b *Backend) release(ctx context.Context, id, token string) error {
	k, a := scripts.ReleaseCall(b.ks.For(id), token, b.purgeLimit, b.publish)
	return replyErr(b.run(ctx, scripts.Release, k, a).Err())
}

// Extend runs the extend script: compare-and-PEXPIRE.
func (b *Backend) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	k, a := scripts.ExtendCall(b.ks.For(id), token, ttl)
	if b.waitReplicas == 0 {
		return replyErr(b.run(ctx, scripts.Extend, k, a).Err())
	}
	cmds, acks, err := b.runReplicated(ctx, []call{{script: scripts.Extend, keys: k, args: a}})
	if err != nil {
		return err
	}
	if err := replyErr(cmds[0].Err()); err != nil {
		return err
	}
	if acks[0] < int64(b.waitReplicas) {
		return notReplicated(acks[0], b.waitReplicas, b.waitTimeout)
	}
	return nil
}

// Leave runs the leave script: drop the entry, release a raced grant, wake
// the new head.
func (b *Backend) Leave(ctx context.Context, id, token string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	k, a := scripts.LeaveCall(b.ks.For(id), token, b.purgeLimit, b.publish)
	return replyErr(b.run(ctx, scripts.Leave, k, a).Err())
}

// Heartbeat runs the heartbeat script once per id (the waiters of one id
// share a call), all of them pipelined in one round trip.
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
	cmds, err := b.runAll(ctx, calls)
	if err != nil {
		return nil, err
	}
	out := make([]backend.HeartbeatResult, len(waiters))
	for i, g := range groups {
		vals, err := cmds[i].Int64Slice()
		if err != nil {
			return nil, replyErr(err)
		}
		if err := scripts.ScatterHeartbeat(out, g, vals); err != nil {
			return nil, fmt.Errorf("redisbackend: %w", err)
		}
	}
	return out, nil
}

// AcquireBatch runs one acquire script per request, pipelined in one round
// trip. ErrQueueFull is reported per request.
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
	var cmds []*redis.Cmd
	var acks []int64
	var err error
	if b.waitReplicas == 0 {
		cmds, err = b.runAll(ctx, calls)
	} else {
		cmds, acks, err = b.runReplicated(ctx, calls)
	}
	if err != nil {
		return nil, err
	}
	out := make([]backend.BatchGrant, len(reqs))
	for i, c := range cmds {
		g, err := acquireResult(c)
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

// LeaveBatch runs one leave script per waiter, pipelined in one round trip.
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
	cmds, err := b.runAll(ctx, calls)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return replyErr(err)
		}
	}
	return nil
}

// Subscribe delivers id's wake-ups to fn until cancel is called. It returns
// once the server has confirmed the subscription.
func (b *Backend) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (cancel func(), err error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	return b.subs.subscribe(ctx, id, b.ks.Channel(id), fn)
}

// Close closes the pub/sub connection and waits for its goroutines. It
// does not close the client. Later calls return backend.ErrClosed.
func (b *Backend) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return backend.ErrClosed
	}
	return b.subs.close()
}

func (b *Backend) check(ctx context.Context) error {
	if b.closed.Load() {
		return backend.ErrClosed
	}
	return ctx.Err()
}

// call is one script invocation.
type call struct {
	script scripts.Script
	keys   []string
	args   []string
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// run sends EVALSHA and, when the server does not know the script, EVAL;
// a step the cluster refused for now (TRYAGAIN, CLUSTERDOWN) is resent as
// tryAgain says.
func (b *Backend) run(ctx context.Context, s scripts.Script, k, a []string) *redis.Cmd {
	args := anys(a)
	var cmd *redis.Cmd
	send := func() {
		cmd = b.client.EvalSha(ctx, s.SHA1, k, args...)
		if isNoScript(cmd.Err()) {
			cmd = b.client.Eval(ctx, s.Source, k, args...)
		}
	}
	send()
	tryAgain(ctx, func() bool { return isTryAgain(cmd.Err()) }, send)
	return cmd
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
// replica, and a MOVED or ASK reaches the Backend when go-redis has
// followed MaxRedirects of them; either way the script did not run, so
// every step, Release too, can be sent again. go-redis resends them
// itself, but only MaxRedirects times within milliseconds; a slot
// migration takes longer.
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
// step for now: TRYAGAIN (its slot migrates), CLUSTERDOWN, or a MOVED or
// ASK that go-redis gave up following.
func isTryAgain(err error) bool {
	if err == nil {
		return false
	}
	for _, p := range []string{"TRYAGAIN", "CLUSTERDOWN", "MOVED", "ASK"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// runAll sends calls in one pipeline of EVALSHAs and resends the ones the
// server did not know as EVALs in a second pipeline (a NOSCRIPT reply means
// the call did not run), and the ones the cluster refused for now
// (TRYAGAIN) as tryAgain says. The returned error is a failure of the
// whole round trip; the per-call replies are in the commands.
func (b *Backend) runAll(ctx context.Context, calls []call) ([]*redis.Cmd, error) {
	if len(calls) == 1 {
		c := calls[0]
		cmd := b.run(ctx, c.script, c.keys, c.args)
		if err := cmd.Err(); err != nil && !isReply(err) {
			return nil, err
		}
		return []*redis.Cmd{cmd}, nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	args := make([][]any, len(calls))
	all := make([]int, len(calls))
	for i, c := range calls {
		args[i] = anys(c.args)
		all[i] = i
	}
	if err := b.sendSome(ctx, calls, args, cmds, all); err != nil {
		return nil, err
	}
	var refused []int
	var failed error
	tryAgain(ctx, func() bool {
		refused = refused[:0]
		for i, cmd := range cmds {
			if isTryAgain(cmd.Err()) {
				refused = append(refused, i)
			}
		}
		return len(refused) > 0 && failed == nil
	}, func() {
		failed = b.sendSome(ctx, calls, args, cmds, refused)
	})
	if failed != nil {
		return nil, failed
	}
	return cmds, nil
}

// sendSome sends the calls of idx in one pipeline of EVALSHAs and the ones
// the server did not know as EVALs in a second one, and stores their
// commands in cmds. It returns a failure of a round trip.
func (b *Backend) sendSome(ctx context.Context, calls []call, args [][]any, cmds []*redis.Cmd, idx []int) error {
	pipe := b.client.Pipeline()
	for _, i := range idx {
		c := calls[i]
		cmds[i] = pipe.EvalSha(ctx, c.script.SHA1, c.keys, args[i]...)
	}
	_, _ = pipe.Exec(ctx)
	var retry []int
	for _, i := range idx {
		err := cmds[i].Err()
		switch {
		case isNoScript(err):
			retry = append(retry, i)
		case err != nil && !isReply(err):
			return err
		}
	}
	if len(retry) == 0 {
		return nil
	}
	pipe = b.client.Pipeline()
	for _, i := range retry {
		c := calls[i]
		cmds[i] = pipe.Eval(ctx, c.script.Source, c.keys, args[i]...)
	}
	_, _ = pipe.Exec(ctx)
	for _, i := range retry {
		if err := cmds[i].Err(); err != nil && !isReply(err) {
			return err
		}
	}
	return nil
}

func acquireResult(cmd *redis.Cmd) (backend.Grant, error) {
	vals, err := cmd.Int64Slice()
	if err != nil {
		return backend.Grant{}, replyErr(err)
	}
	return scripts.ParseAcquire(vals)
}

// isReply reports whether err is an error reply of the server (the call
// ran, or was refused), as opposed to a failure of the connection.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// replyErr maps the scripts' error replies to the backend's sentinels and
// returns every other error as it is.
func replyErr(err error) error {
	if err == nil || !isReply(err) {
		return err
	}
	if s := scripts.MapError(err.Error()); s != nil {
		return s
	}
	return err
}
