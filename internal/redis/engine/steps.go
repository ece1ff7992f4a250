package engine

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// The steps, each as a pair: XCall builds the call (script, KEYS, ARGV),
// XReply parses what the Runner got for it. An adapter sends the call with
// its own client in between (through a Runner).

// AcquireCall is the acquire script: fair try-acquire with optional
// enqueue.
// A request with a Capacity of 2 or more (a shared id) is the
// acquire_shared script.
func (e *Engine) AcquireCall(req backend.AcquireRequest) Call {
	if req.Capacity >= 2 {
		k, a := e.consts.AcquireShared(e.cfg.Keys.For(req.ID), req, e.inboxAddress(req.ID))
		return Call{Script: scripts.AcquireShared, Keys: k, Args: a, Wait: e.cfg.Wait.Replicas > 0}
	}
	k, a := e.consts.Acquire(e.cfg.Keys.For(req.ID), req, e.inboxAddress(req.ID))
	return Call{Script: scripts.Acquire, Keys: k, Args: a, Wait: e.cfg.Wait.Replicas > 0}
}

// AcquireReply parses acquire's reply. A grant that too few replicas
// acknowledged is backend.ErrNotReplicated: the adapter releases it
// (Runner.Unconfirmed).
func (e *Engine) AcquireReply(r Reply) (backend.Grant, error) {
	if err := replyErr(r.Err); err != nil {
		return backend.Grant{}, err
	}
	g, err := scripts.ParseAcquire(r.Ints)
	if err == nil && g.Acquired && e.short(r.Acks) {
		return backend.Grant{}, e.notReplicated(r.Acks)
	}
	return g, err
}

// ReleaseCall is the release script: compare-and-delete, then wake the
// head. It names the release records of the id's slot for this process's
// current period and the one before (keys.Keyspace.Released): a resend of
// the call (the same keys) finds the first send's record in one of them.
func (e *Engine) ReleaseCall(id, token string) Call {
	k := e.cfg.Keys.For(id)
	p := keys.Period(time.Now())
	ks, a := e.consts.Release(k, token, keys.ReleaseMark(id, token), e.cfg.Keys.Released(k.Slot, p), e.cfg.Keys.Released(k.Slot, p-1))
	return Call{Script: scripts.Release, Keys: ks, Args: a}
}

// ReleaseReply parses release's reply. A resend's LOCKNOTHELD is the
// answer: had the first send released the lock, the resend would have
// found its release record and answered done.
func (e *Engine) ReleaseReply(r Reply) error {
	return replyErr(r.Err)
}

// ExtendCall is the extend script: compare-and-PEXPIRE.
func (e *Engine) ExtendCall(r backend.ExtendRequest) Call {
	k, a := e.consts.Extend(e.cfg.Keys.For(r.ID), r.Token, r.TTL)
	return Call{Script: scripts.Extend, Keys: k, Args: a, Wait: e.cfg.Wait.Replicas > 0}
}

// ExtendReply parses extend's reply: the store's answer, or
// ErrNotReplicated when too few replicas acknowledged it.
func (e *Engine) ExtendReply(r Reply) error {
	if err := replyErr(r.Err); err != nil {
		return err
	}
	if e.short(r.Acks) {
		return e.notReplicated(r.Acks)
	}
	return nil
}

// ExtendBatchCalls are one extend call per request, for one round trip.
func (e *Engine) ExtendBatchCalls(reqs []backend.ExtendRequest) []Call {
	calls := make([]Call, len(reqs))
	for i, r := range reqs {
		calls[i] = e.ExtendCall(r)
	}
	return calls
}

// ExtendBatchReply parses the replies of ExtendBatchCalls: one error per
// request.
func (e *Engine) ExtendBatchReply(rs []Reply) []error {
	out := make([]error, len(rs))
	for i, r := range rs {
		out[i] = e.ExtendReply(r)
	}
	return out
}

// LeaveCall is the leave script: drop the entry, release a raced grant,
// wake the new head.
func (e *Engine) LeaveCall(id, token string) Call {
	k, a := e.consts.Leave(e.cfg.Keys.For(id), token)
	return Call{Script: scripts.Leave, Keys: k, Args: a}
}

// LeaveReply checks a leave's reply (2 integers: whether it removed an
// entry, whether it released the lock).
func (e *Engine) LeaveReply(r Reply) error {
	if err := replyErr(r.Err); err != nil {
		return err
	}
	if len(r.Ints) != 2 {
		return fmt.Errorf("%s: leave replied %d values, want 2", e.cfg.Adapter, len(r.Ints))
	}
	return nil
}

// LeaveBatchCalls are one leave call per waiter, for one round trip.
func (e *Engine) LeaveBatchCalls(waiters []backend.Waiter) []Call {
	calls := make([]Call, len(waiters))
	for i, w := range waiters {
		calls[i] = e.LeaveCall(w.ID, w.Token)
	}
	return calls
}

// LeaveBatchReply parses the replies of LeaveBatchCalls: the first failure.
func (e *Engine) LeaveBatchReply(rs []Reply) error {
	var first error
	for _, r := range rs {
		if err := e.LeaveReply(r); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Heartbeats are the heartbeat calls of one Heartbeat step: one per id
// (the waiters of one id share a call), for one round trip.
type Heartbeats struct {
	Calls  []Call
	n      int
	groups []*scripts.HeartbeatGroup
}

// HeartbeatCalls builds the heartbeat calls of waiters.
func (e *Engine) HeartbeatCalls(waiters []backend.Waiter, waiterTTL time.Duration) Heartbeats {
	groups := scripts.GroupHeartbeats(waiters)
	calls := make([]Call, len(groups))
	for i, g := range groups {
		k, a := e.consts.Heartbeat(e.cfg.Keys.For(g.ID), g.Tokens, waiterTTL)
		calls[i] = Call{Script: scripts.Heartbeat, Keys: k, Args: a}
	}
	return Heartbeats{Calls: calls, n: len(waiters), groups: groups}
}

// HeartbeatReply parses the replies of h's calls: one result per waiter.
func (e *Engine) HeartbeatReply(h Heartbeats, rs []Reply) ([]backend.HeartbeatResult, error) {
	out := make([]backend.HeartbeatResult, h.n)
	for i, g := range h.groups {
		if err := replyErr(rs[i].Err); err != nil {
			return nil, err
		}
		if err := scripts.ScatterHeartbeat(out, g, rs[i].Ints); err != nil {
			return nil, fmt.Errorf("%s: %w", e.cfg.Adapter, err)
		}
	}
	return out, nil
}

// AcquireBatch is the acquire_many calls of one AcquireBatch step: one
// per chunk of up to scripts.MaxAcquireBatch requests on one server, one
// per hash slot (and chunk) on Redis Cluster, for one round trip.
type AcquireBatch struct {
	Calls  []Call
	n      int
	groups []*scripts.AcquireGroup
	shared []int // the positions of the shared requests, whose calls follow the groups'
}

// AcquireBatchCalls builds the acquire_many calls of reqs; a shared
// request (Capacity 2 or more) is an acquire_shared call of its own, after
// them.
func (e *Engine) AcquireBatchCalls(reqs []backend.AcquireRequest) AcquireBatch {
	var shared, at []int // at: the positions in reqs of the mutex requests, when some are shared
	mutex := reqs
	for i, r := range reqs {
		if r.Capacity >= 2 {
			shared = append(shared, i)
		}
	}
	if len(shared) > 0 {
		mutex = make([]backend.AcquireRequest, 0, len(reqs)-len(shared))
		for i, r := range reqs {
			if r.Capacity < 2 {
				mutex, at = append(mutex, r), append(at, i)
			}
		}
	}
	groups := scripts.GroupAcquires(mutex, e.cluster, scripts.MaxAcquireBatch)
	calls := make([]Call, len(groups), len(groups)+len(shared))
	for i, g := range groups {
		k, a := e.consts.AcquireMany(e.cfg.Keys, g, e.inboxAddress(g.Reqs[0].ID))
		calls[i] = Call{Script: scripts.AcquireMany, Keys: k, Args: a, Wait: e.cfg.Wait.Replicas > 0}
		if at != nil {
			for j, p := range g.Pos {
				g.Pos[j] = at[p]
			}
		}
	}
	for _, p := range shared {
		calls = append(calls, e.AcquireCall(reqs[p]))
	}
	return AcquireBatch{Calls: calls, n: len(reqs), groups: groups, shared: shared}
}

// AcquireBatchReply parses the replies of b's calls: one BatchGrant per
// request, in request order; a full queue is that request's Err, and so is
// ErrNotReplicated for a grant too few replicas acknowledged, which the
// adapter releases (Runner.Unconfirmed). On a failure out holds the
// requests parsed before it.
func (e *Engine) AcquireBatchReply(b AcquireBatch, rs []Reply) (out []backend.BatchGrant, err error) {
	out = make([]backend.BatchGrant, b.n)
	for i, g := range b.groups {
		if err := replyErr(rs[i].Err); err != nil {
			return out, err
		}
		if err := scripts.ScatterAcquireMany(out, g, rs[i].Ints); err != nil {
			return out, fmt.Errorf("%s: %w", e.cfg.Adapter, err)
		}
		if !e.short(rs[i].Acks) {
			continue
		}
		for _, j := range g.Pos {
			if out[j].Err == nil && out[j].Acquired {
				out[j] = backend.BatchGrant{Err: e.notReplicated(rs[i].Acks)}
			}
		}
	}
	for i, p := range b.shared {
		g, err := e.AcquireReply(rs[len(b.groups)+i])
		if err != nil && !errors.Is(err, backend.ErrQueueFull) && !errors.Is(err, backend.ErrCapacity) &&
			!errors.Is(err, backend.ErrNotReplicated) {
			return out, err
		}
		out[p] = backend.BatchGrant{Grant: g, Err: err}
	}
	return out, nil
}

// InspectCall is the read-only inspect script. Waiters' QueuedFor is 0:
// Redis does not record when a waiter was queued.
func (e *Engine) InspectCall(id string, maxWaiters int) Call {
	k, a := scripts.InspectCall(e.cfg.Keys.For(id), maxWaiters)
	return Call{Script: scripts.Inspect, Keys: k, Args: a, Strings: true}
}

// InspectReply parses inspect's reply for id.
func (e *Engine) InspectReply(id string, r Reply) (backend.Inspection, error) {
	if err := replyErr(r.Err); err != nil {
		return backend.Inspection{ID: id}, err
	}
	return scripts.ParseInspect(id, r.Strs)
}

// ForceReleaseCall is an operator's forced release of id (lockctl
// release): it deletes the lock whatever its holder's token, but only
// while the holder's fence is fence (as Inspect reported it), so that it
// can never end a newer holder's lease. Then, as a release does, it hands
// the lock off to the live head of the queue, or wakes it: the next
// grant's fence is above fence. It is one force_release script, with the
// Backend's purge limit and wake-up command, and no WAIT. A bad id or a
// fence of 0 is an *backend.ArgumentError.
func (e *Engine) ForceReleaseCall(id string, fence uint64) (Call, error) {
	switch {
	case id == "":
		return Call{}, &backend.ArgumentError{Arg: "id", Reason: "empty"}
	case len(id) > backend.MaxIDLength:
		return Call{}, &backend.ArgumentError{Arg: "id", Reason: fmt.Sprintf("%d bytes, more than %d", len(id), backend.MaxIDLength)}
	case fence == 0:
		return Call{}, &backend.ArgumentError{Arg: "fence", Reason: "must be positive: the holder's fence, as Inspect reports it"}
	}
	k, a := scripts.ForceReleaseCall(e.cfg.Keys.For(id), fence, e.cfg.Limits.PurgeLimit, e.publish)
	return Call{Script: scripts.ForceRelease, Keys: k, Args: a}, nil
}

// ForceReleaseReply parses force_release's reply: nil when it released
// the lock, and an error that matches backend.ErrNotHeld, and says why,
// when it refused (the id is not held, or its holder has another fence).
func (e *Engine) ForceReleaseReply(r Reply) error {
	if err := replyErr(r.Err); !errors.Is(err, backend.ErrNotHeld) {
		return err
	}
	if r.First != nil && !fallback.Unsent(r.First) {
		// The first send may have released the lock before its connection
		// broke; then the resend finds it free, or granted to the head:
		// the outcome is unknown, not a refusal.
		return r.First
	}
	msg := strings.TrimPrefix(r.Err.Error(), "ERR ")
	return &refused{reason: strings.TrimPrefix(msg, scripts.CodeNotHeld+" ")}
}

// refused is ForceRelease's refusal; it matches backend.ErrNotHeld.
type refused struct{ reason string }

func (e *refused) Error() string { return "not released: " + e.reason }

// Is reports whether target is backend.ErrNotHeld.
func (e *refused) Is(target error) bool { return target == backend.ErrNotHeld }

// replyErr maps the scripts' error replies to the backend's sentinels and
// marks every other error reply as the store's answer. (The Runner
// returns a failed round trip as its own error: an error left in a Reply
// is the server's.)
func replyErr(err error) error {
	if err == nil {
		return nil
	}
	if m := scripts.MapError(err.Error()); m != nil {
		return m
	}
	return backend.WithKind(backend.KindAnswer, err)
}

// short reports whether acks, the WAIT reply of a call with Wait, is too
// few replicas.
func (e *Engine) short(acks int64) bool {
	return e.cfg.Wait.Replicas > 0 && acks < int64(e.cfg.Wait.Replicas)
}

// notReplicated returns backend.ErrNotReplicated with the counts.
func (e *Engine) notReplicated(acked int64) error {
	return fmt.Errorf("%w: %d of %d replicas within %v", backend.ErrNotReplicated, acked, e.cfg.Wait.Replicas, e.cfg.Wait.Timeout)
}
