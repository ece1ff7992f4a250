package conformance

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// Errors the spy injects.
var (
	// errKilled is what every step of a killed spy returns: the process
	// crashed (or is partitioned away) and will never speak again.
	errKilled = errors.New("conformance: injected: the process was killed")
	// errLostReply is what an injected failure returns after the inner
	// step took effect: the reply was lost, the outcome is unknown to the
	// caller.
	errLostReply = errors.New("conformance: injected: the step took effect but its reply was lost")
)

// spy wraps a backend: it records the steps and the wake-ups a Locker
// sees, and injects faults (dropped wake-ups, a killed process, lost
// replies, a lease taken away). It forwards every optional capability of
// package backend (Batcher, ExtendBatcher, Resolver, HandOffer, Inspector,
// Sharer)
// to the inner backend, through the core's fallback where the inner
// backend lacks it, so that the core treats it exactly like the backend
// it wraps: a wrapper that drops a capability hides it from the suite.
type spy struct {
	inner backend.Backend
	hung  *atomic.Bool // shared by the spies of a Run: a step went unanswered

	dropWakes   atomic.Bool  // wake-ups are recorded, not delivered
	killed      atomic.Bool  // every step fails with errKilled; wake-ups are dropped
	loseAcquire atomic.Int32 // lose the reply of the next Acquire: 1 any, 2 only one with Wait
	loseExtend  atomic.Bool  // every Extend reports ErrNotHeld without reaching the store

	mu         sync.Mutex
	calls      int // steps that reached the spy, Close excepted
	acquires   []acquireRecord
	heartbeats []heartbeatRecord
	wakes      []wakeRecord
}

type acquireRecord struct {
	req   backend.AcquireRequest
	grant backend.Grant
	err   error
	at    time.Time // when the step returned
}

type heartbeatRecord struct {
	waiter backend.Waiter
	result backend.HeartbeatResult
	at     time.Time // when the step returned
}

type wakeRecord struct {
	wake    backend.Wake
	dropped bool
}

var (
	_ backend.Backend       = (*spy)(nil)
	_ backend.Batcher       = (*spy)(nil)
	_ backend.ExtendBatcher = (*spy)(nil)
	_ backend.Resolver      = (*spy)(nil)
	_ backend.HandOffer     = (*spy)(nil)
	_ backend.Inspector     = (*spy)(nil)
	_ backend.Sharer        = (*spy)(nil)
)

// newSpy wraps inner; hung (nil for none) is set when an Acquire waits
// prompt or more and ends with its ctx's deadline (see env.probe).
func newSpy(inner backend.Backend, hung *atomic.Bool) *spy { return &spy{inner: inner, hung: hung} }

// kill makes the spy a crashed process: every later step fails and no
// wake-up is delivered.
func (s *spy) kill() { s.killed.Store(true) }

// step counts one step and reports whether the process is dead.
func (s *spy) step() error {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	if s.killed.Load() {
		return errKilled
	}
	return nil
}

// loseReply reports whether the reply of this Acquire is to be lost.
func (s *spy) loseReply(req backend.AcquireRequest) bool {
	switch s.loseAcquire.Load() {
	case 1:
		return s.loseAcquire.CompareAndSwap(1, 0)
	case 2:
		return req.Wait && s.loseAcquire.CompareAndSwap(2, 0)
	}
	return false
}

func (s *spy) recordAcquire(req backend.AcquireRequest, g backend.Grant, err error) {
	s.mu.Lock()
	s.acquires = append(s.acquires, acquireRecord{req: req, grant: g, err: err, at: time.Now()})
	s.mu.Unlock()
}

func (s *spy) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	if err := s.step(); err != nil {
		return backend.Grant{}, err
	}
	start := time.Now()
	g, err := s.inner.Acquire(ctx, req)
	if s.hung != nil && errors.Is(err, context.DeadlineExceeded) && time.Since(start) >= prompt {
		s.hung.Store(true)
	}
	s.recordAcquire(req, g, err)
	if err == nil && s.loseReply(req) {
		return backend.Grant{}, errLostReply
	}
	return g, err
}

func (s *spy) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	if err := s.step(); err != nil {
		return nil, err
	}
	res, err := fallback.AcquireBatch(ctx, s.inner, reqs)
	lost := false
	for i, r := range res {
		if i < len(reqs) {
			s.recordAcquire(reqs[i], r.Grant, r.Err)
			if r.Err == nil && s.loseReply(reqs[i]) {
				lost = true
			}
		}
	}
	if err == nil && lost {
		return nil, errLostReply
	}
	return res, err
}

func (s *spy) Release(ctx context.Context, id, token string) error {
	if err := s.step(); err != nil {
		return err
	}
	return s.inner.Release(ctx, id, token)
}

func (s *spy) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	if err := s.step(); err != nil {
		return err
	}
	if s.loseExtend.Load() {
		return backend.ErrNotHeld
	}
	return s.inner.Extend(ctx, id, token, ttl)
}

// ExtendBatch forwards to the inner ExtendBatcher, or runs the core's
// fallback (one Extend per request) over the inner backend. The call
// counts as one step; loseExtend makes every request ErrNotHeld.
func (s *spy) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]error, error) {
	if err := s.step(); err != nil {
		return nil, err
	}
	if s.loseExtend.Load() {
		out := make([]error, len(reqs))
		for i := range out {
			out[i] = backend.ErrNotHeld
		}
		return out, nil
	}
	return fallback.ExtendBatch(ctx, s.inner, reqs)
}

// Inspect forwards to the inner Inspector; without one it returns
// backend.ErrUnsupported, as the core's fallback does.
func (s *spy) Inspect(ctx context.Context, id string, maxWaiters int) (backend.Inspection, error) {
	if err := s.step(); err != nil {
		return backend.Inspection{ID: id}, err
	}
	return fallback.Inspect(ctx, s.inner, id, maxWaiters)
}

// inspects reports whether the inner backend is a backend.Inspector.
func (s *spy) inspects() bool {
	_, ok := s.inner.(backend.Inspector)
	return ok
}

func (s *spy) Leave(ctx context.Context, id, token string) error {
	if err := s.step(); err != nil {
		return err
	}
	return s.inner.Leave(ctx, id, token)
}

func (s *spy) LeaveBatch(ctx context.Context, waiters []backend.Waiter) error {
	if err := s.step(); err != nil {
		return err
	}
	return fallback.LeaveBatch(ctx, s.inner, waiters)
}

func (s *spy) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	if err := s.step(); err != nil {
		return nil, err
	}
	res, err := s.inner.Heartbeat(ctx, waiters, waiterTTL)
	now := time.Now()
	s.mu.Lock()
	for i, r := range res {
		if i < len(waiters) {
			s.heartbeats = append(s.heartbeats, heartbeatRecord{waiter: waiters[i], result: r, at: now})
		}
	}
	s.mu.Unlock()
	return res, err
}

func (s *spy) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (func(), error) {
	if err := s.step(); err != nil {
		return nil, err
	}
	return s.inner.Subscribe(ctx, id, func(w backend.Wake) {
		drop := s.killed.Load() || s.dropWakes.Load()
		s.mu.Lock()
		s.wakes = append(s.wakes, wakeRecord{wake: w, dropped: drop})
		s.mu.Unlock()
		if !drop {
			fn(w)
		}
	})
}

// Close closes the inner backend, even when the spy was killed (the
// process is gone; its resources go with it).
func (s *spy) Close() error { return s.inner.Close() }

// Resolution is the inner backend's.
func (s *spy) Resolution() time.Duration { return fallback.Resolution(s.inner) }

// HandsOff forwards the inner backend's backend.HandOffer.
func (s *spy) HandsOff() bool { return fallback.HandsOff(s.inner) }

// Shares forwards the inner backend's backend.Sharer: false when the inner
// backend is none.
func (s *spy) Shares() bool {
	sh, ok := s.inner.(backend.Sharer)
	return ok && sh.Shares()
}

// ---- queries ----

// callCount returns the number of steps the spy has seen (Close excepted).
func (s *spy) callCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// queuedToken returns the token of the first Acquire on id that reported
// a queue entry, and whether there was one.
func (s *spy) queuedToken(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.acquires {
		if a.req.ID == id && a.err == nil && !a.grant.Acquired && a.grant.Queued {
			return a.req.Token, true
		}
	}
	return "", false
}

// queued reports whether an Acquire on id has reported a queue entry.
func (s *spy) queued(id string) bool {
	_, ok := s.queuedToken(id)
	return ok
}

// tickets returns the tickets the Acquire steps of token on id reported.
func (s *spy) tickets(id, token string) []uint64 {
	return pick(s, func() []acquireRecord { return s.acquires }, func(a acquireRecord) (uint64, bool) {
		return a.grant.Ticket, a.req.ID == id && a.req.Token == token && a.err == nil && a.grant.Queued
	})
}

// acquiresOf returns how many Acquire steps of id reached the store.
func (s *spy) acquiresOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.acquires {
		if a.req.ID == id {
			n++
		}
	}
	return n
}

// grantsFor returns how many wake-ups carrying a grant by hand-off to
// token reached the spy (delivered or not).
func (s *spy) grantsFor(id, token string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.wakes {
		if w.wake.ID == id && w.wake.Token == token && w.wake.Grant != nil {
			n++
		}
	}
	return n
}

// wakesFor returns how many wake-ups for id, addressed to token (or to
// every or any local waiter), reached the spy; with delivered, only those
// passed on to the Locker.
func (s *spy) wakesFor(id, token string, delivered bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.wakes {
		if w.wake.ID != id || (delivered && w.dropped) {
			continue
		}
		if w.wake.All || w.wake.Token == "" || w.wake.Token == token {
			n++
		}
	}
	return n
}

// heartbeatsOf returns the heartbeat results of (id, token), in order.
func (s *spy) heartbeatsOf(id, token string) []heartbeatRecord {
	return pick(s, func() []heartbeatRecord { return s.heartbeats }, func(h heartbeatRecord) (heartbeatRecord, bool) {
		return h, h.waiter.ID == id && h.waiter.Token == token
	})
}

// pick returns, read with s.mu held, what f makes of each record of
// records() that f keeps, in order.
func pick[R, T any](s *spy, records func() []R, f func(R) (T, bool)) []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []T
	for _, r := range records() {
		if v, ok := f(r); ok {
			out = append(out, v)
		}
	}
	return out
}

// wakeMark returns a mark for wakesSince: the number of wake-ups so far.
func (s *spy) wakeMark() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.wakes)
}

// wakesSince returns the wake-ups for id that reached the spy after mark.
func (s *spy) wakesSince(id string, mark int) []backend.Wake {
	return pick(s, func() []wakeRecord { return s.wakes[min(mark, len(s.wakes)):] }, func(w wakeRecord) (backend.Wake, bool) {
		return w.wake, w.wake.ID == id
	})
}
