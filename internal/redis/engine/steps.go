package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// Hooks are an adapter's additions to the shared steps. The zero value
// adds nothing.
type Hooks struct {
	// ResendBroken sends a step once more when its round trip failed on
	// the connection. For a client that never resends a write itself
	// (rueidis): a connection that broke while idle is often noticed only
	// by the next command on it. Every step is idempotent by token
	// (release through the scripts' "rel" field), so a resend is safe.
	ResendBroken bool
}

// Steps are the backend steps of a Redis adapter: backend.Backend's
// steps but Subscribe and Close, backend.Batcher and backend.Resolver. An adapter embeds
// it and adds Subscribe and Close. Safe for concurrent use.
type Steps struct {
	cfg     Config
	c       Client
	r       Replicas // nil unless cfg.waitReplicas > 0
	hooks   Hooks
	closed  atomic.Bool
	perSlot bool   // one inbox per hash slot (see Inbox)
	inbox   string // the one inbox, when not perSlot
	address string // its address for the scripts (scripts.InboxAddress)

	wireCheck wireCheck // the prefix's wire protocol version, checked before the steps (see wire)
}

// New returns the steps of cfg on c. r is needed when cfg has WaitReplicas.
func New(cfg Config, c Client, r Replicas, h Hooks) *Steps {
	s := &Steps{cfg: cfg, c: c, r: r, hooks: h, wireCheck: newWireCheck()}
	// A script may send only to an inbox of its own slot on Redis Cluster,
	// except by PUBLISH, which every node forwards to every other one.
	s.perSlot = c.Cluster() && cfg.InboxKind() != scripts.InboxClassic
	if !s.perSlot {
		s.inbox = cfg.ks.Inbox(cfg.process, -1)
		s.address = scripts.InboxAddress(cfg.InboxKind(), s.inbox)
	}
	return s
}

// inboxAddress returns the inbox argument of the scripts for a waiter of
// id: where its wake-ups go (see Inbox).
func (s *Steps) inboxAddress(id string) string {
	if !s.perSlot {
		return s.address
	}
	return scripts.InboxAddress(s.cfg.InboxKind(), s.Inbox(id))
}

// Inbox returns the name of the inbox that this Backend's wake-ups for id
// come to: one per hash slot on Redis Cluster (SPUBLISH, or an inbox key),
// otherwise one for every id.
func (s *Steps) Inbox(id string) string {
	if !s.perSlot {
		return s.inbox
	}
	return s.cfg.ks.Inbox(s.cfg.process, keys.SlotOf(id))
}

// ConfigOf returns the Config s runs with.
func ConfigOf(s *Steps) Config { return s.cfg }

// Check returns backend.ErrClosed once s is closed, else ctx's error.
func Check(s *Steps, ctx context.Context) error {
	if s.closed.Load() {
		return backend.ErrClosed
	}
	return ctx.Err()
}

// ready is Check, then the wire protocol check (see wire) of a step that
// is about to be sent.
func (s *Steps) ready(ctx context.Context) error {
	if err := Check(s, ctx); err != nil {
		return err
	}
	return s.wire(ctx)
}

// Close marks s closed; it reports false when s already was.
func Close(s *Steps) bool { return s.closed.CompareAndSwap(false, true) }

// Prefix returns the key prefix in use.
func (s *Steps) Prefix() string { return s.cfg.ks.Prefix() }

// Resolution returns one millisecond: leases are set with PX.
func (s *Steps) Resolution() time.Duration { return time.Millisecond }

// HandsOff reports whether the core may take a grant by hand-off as it
// comes (backend.HandOffer): the scripts always hand off, but with
// WaitReplicas a waiter must learn of its grant from a step of its own,
// which waits for the replicas to have it (a retried grant).
func (s *Steps) HandsOff() bool { return s.cfg.WaitReplicas() == 0 }

func (s *Steps) acquireCall(req backend.AcquireRequest) Call {
	k, a := s.cfg.consts.Acquire(s.cfg.ks.For(req.ID), req, s.inboxAddress(req.ID))
	return Call{Script: scripts.Acquire, Keys: k, Args: a}
}

func (s *Steps) releaseCall(id, token string) Call {
	k, a := s.cfg.consts.Release(s.cfg.ks.For(id), token)
	return Call{Script: scripts.Release, Keys: k, Args: a}
}

func (s *Steps) leaveCall(id, token string) Call {
	k, a := s.cfg.consts.Leave(s.cfg.ks.For(id), token)
	return Call{Script: scripts.Leave, Keys: k, Args: a}
}

// Acquire runs the acquire script: fair try-acquire with optional enqueue.
func (s *Steps) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	if err := s.ready(ctx); err != nil {
		return backend.Grant{}, err
	}
	c := s.acquireCall(req)
	if s.cfg.waitReplicas == 0 {
		r, err := s.run(ctx, c)
		if err != nil {
			return backend.Grant{}, err
		}
		return s.acquireResult(r)
	}
	res, acks, err := s.runReplicated(ctx, []Call{c})
	if err != nil {
		return backend.Grant{}, err
	}
	g, err := s.acquireResult(res[0])
	if err == nil && g.Acquired && acks[0] < int64(s.cfg.waitReplicas) {
		s.unconfirmed(ctx, req.ID, req.Token)
		return backend.Grant{}, s.notReplicated(acks[0])
	}
	return g, err
}

// Release runs the release script: compare-and-delete, then wake the head.
func (s *Steps) Release(ctx context.Context, id, token string) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return s.release(ctx, id, token)
}

func (s *Steps) release(ctx context.Context, id, token string) error {
	r, first, err := s.runResent(ctx, s.releaseCall(id, token))
	if err == nil {
		err = s.replyErr(r.Err)
		if first != nil && !fallback.Unsent(first) && errors.Is(err, backend.ErrNotHeld) {
			// The first send may have released the lock before its
			// connection broke, and a later release of another token may
			// have replaced the marker that answers a resend: the outcome
			// is unknown, not "not held".
			err = first
		}
	}
	return err
}

// Extend runs the extend script: compare-and-PEXPIRE.
func (s *Steps) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	c := s.extendCall(backend.ExtendRequest{ID: id, Token: token, TTL: ttl})
	if s.cfg.waitReplicas == 0 {
		r, err := s.run(ctx, c)
		if err != nil {
			return err
		}
		return s.replyErr(r.Err)
	}
	res, acks, err := s.runReplicated(ctx, []Call{c})
	if err != nil {
		return err
	}
	return s.extendResult(res[0], acks, 0)
}

func (s *Steps) extendCall(r backend.ExtendRequest) Call {
	k, a := s.cfg.consts.Extend(s.cfg.ks.For(r.ID), r.Token, r.TTL)
	return Call{Script: scripts.Extend, Keys: k, Args: a}
}

// extendResult is the outcome of the i-th extend of a round trip: the
// store's answer, or ErrNotReplicated when acks (nil without WaitReplicas)
// says too few replicas have it.
func (s *Steps) extendResult(r Reply, acks []int64, i int) error {
	if err := s.replyErr(r.Err); err != nil {
		return err
	}
	if acks != nil && acks[i] < int64(s.cfg.waitReplicas) {
		return s.notReplicated(acks[i])
	}
	return nil
}

// runBatch runs calls in one round trip (one per master), each followed by
// a WAIT when WaitReplicas is set; acks is nil otherwise.
func (s *Steps) runBatch(ctx context.Context, calls []Call) (res []Reply, acks []int64, err error) {
	if s.cfg.waitReplicas == 0 {
		res, err = s.runAll(ctx, calls)
		return res, nil, err
	}
	return s.runReplicated(ctx, calls)
}

// Leave runs the leave script: drop the entry, release a raced grant, wake
// the new head.
func (s *Steps) Leave(ctx context.Context, id, token string) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	r, err := s.run(ctx, s.leaveCall(id, token))
	if err != nil {
		return err
	}
	return s.leaveResult(r)
}

// Heartbeat runs the heartbeat script once per id (the waiters of one id
// share a call), all of them in one round trip.
func (s *Steps) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	if err := Check(s, ctx); err != nil {
		return nil, err
	}
	if len(waiters) == 0 {
		return nil, nil
	}
	if err := s.wire(ctx); err != nil {
		return nil, err
	}
	groups := scripts.GroupHeartbeats(waiters)
	calls := make([]Call, len(groups))
	for i, g := range groups {
		k, a := s.cfg.consts.Heartbeat(s.cfg.ks.For(g.ID), g.Tokens, waiterTTL)
		calls[i] = Call{Script: scripts.Heartbeat, Keys: k, Args: a}
	}
	res, err := s.runAll(ctx, calls)
	if err != nil {
		return nil, err
	}
	out := make([]backend.HeartbeatResult, len(waiters))
	for i, g := range groups {
		if err := s.replyErr(res[i].Err); err != nil {
			return nil, err
		}
		if err := scripts.ScatterHeartbeat(out, g, res[i].Ints); err != nil {
			return nil, fmt.Errorf("%s: %w", s.cfg.name, err)
		}
	}
	return out, nil
}

// AcquireBatch runs the acquire_many script: one call per chunk of up to
// scripts.MaxAcquireBatch requests on one server, one per hash slot (and
// chunk) on Redis Cluster, all in one round trip (one per master on a
// cluster). ErrQueueFull is reported per request, in BatchGrant.Err.
func (s *Steps) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	if err := Check(s, ctx); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	if err := s.wire(ctx); err != nil {
		return nil, err
	}
	groups := scripts.GroupAcquires(reqs, s.c.Cluster(), scripts.MaxAcquireBatch)
	calls := make([]Call, len(groups))
	for i, g := range groups {
		k, a := s.cfg.consts.AcquireMany(s.cfg.ks, g, s.inboxAddress(g.Reqs[0].ID))
		calls[i] = Call{Script: scripts.AcquireMany, Keys: k, Args: a}
	}
	res, acks, err := s.runBatch(ctx, calls)
	if err != nil {
		return nil, err
	}
	out := make([]backend.BatchGrant, len(reqs))
	for i, g := range groups {
		if err := s.batchResult(out, g, res[i]); err != nil {
			return nil, err
		}
		if acks == nil || acks[i] >= int64(s.cfg.waitReplicas) {
			continue
		}
		for _, j := range g.Pos {
			if out[j].Err == nil && out[j].Acquired {
				s.unconfirmed(ctx, reqs[j].ID, reqs[j].Token)
				out[j] = backend.BatchGrant{Err: s.notReplicated(acks[i])}
			}
		}
	}
	return out, nil
}

// batchResult stores the reply r of group g's acquire_many call into out.
// A full queue is that request's Err.
func (s *Steps) batchResult(out []backend.BatchGrant, g *scripts.AcquireGroup, r Reply) error {
	if err := s.replyErr(r.Err); err != nil {
		return err
	}
	if err := scripts.ScatterAcquireMany(out, g, r.Ints); err != nil {
		return fmt.Errorf("%s: %w", s.cfg.name, err)
	}
	return nil
}

// LeaveBatch runs one leave script per waiter, in one round trip.
func (s *Steps) LeaveBatch(ctx context.Context, waiters []backend.Waiter) error {
	if err := Check(s, ctx); err != nil {
		return err
	}
	if len(waiters) == 0 {
		return nil
	}
	if err := s.wire(ctx); err != nil {
		return err
	}
	calls := make([]Call, len(waiters))
	for i, w := range waiters {
		calls[i] = s.leaveCall(w.ID, w.Token)
	}
	res, err := s.runAll(ctx, calls)
	if err != nil {
		return err
	}
	var first error
	for _, r := range res {
		if err := s.leaveResult(r); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (s *Steps) acquireResult(r Reply) (backend.Grant, error) {
	if err := s.replyErr(r.Err); err != nil {
		return backend.Grant{}, err
	}
	return scripts.ParseAcquire(r.Ints)
}

// leaveResult checks a leave's reply (2 integers: whether it removed an
// entry, whether it released the lock).
func (s *Steps) leaveResult(r Reply) error {
	if err := s.replyErr(r.Err); err != nil {
		return err
	}
	if len(r.Ints) != 2 {
		return fmt.Errorf("%s: leave replied %d values, want 2", s.cfg.name, len(r.Ints))
	}
	return nil
}
