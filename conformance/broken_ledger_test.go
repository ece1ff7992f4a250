package conformance_test

// Deliberately broken backends for the properties of suite v3: the bugs
// independently planted in copies of memorybackend and in a PostgreSQL
// backend written from the docs, which the suite used to pass. Each is one
// kind of a single wrapper, ledgerBreakage, which keeps a ledger of the
// grants and queue entries its steps made (the store hands off nothing in
// the broken harness: every grant is some wrapper's Acquire step), so that
// a bug can be planted where the store itself is right.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/memstore"
)

// ledgerKinds are the kinds that ledgerBreakage implements, each with the
// properties that must fail on it (the self-test runs only those); what
// each breaks:
//
//   - expiry-fence-reused: a grant that follows a lease which ended without
//     a release reuses that lease's fence;
//   - expiry-stale-fence: such a grant reports its fence, but the holder's
//     retried Acquire and Inspect report the ended lease's, still stored;
//   - granted-entry-kept: such a grant leaves the requester's queue entry in
//     place: its Heartbeat says queued, and the waiter behind it is refused
//     until that entry's deadline;
//   - inspect-expired-held: Inspect reports a lease that ended, with no step
//     since, as held (with a negative TTL);
//   - inspect-latest-fence: Inspect reports the latest fence of the store,
//     not the holder's;
//   - inspect-writes: Inspect runs a step first (it purges, expires, wakes);
//   - extend-batch-any-token: ExtendBatch extends the holder's lease when a
//     request's token does not hold it, and reports success;
//   - extend-batch-stops: ExtendBatch stops at the first failed request and
//     reports its error for every request after it;
//   - heartbeat-reversed: a Heartbeat of several waiters reports the
//     results in reverse order;
//   - purge-early: every step purges the entries of its id that have used
//     up more than half of their WaiterTTL, before their deadline;
//   - purge-slow: the store purges one dead entry per step, though the
//     harness states a limit of eight (the harness does it);
//   - cancel-all-subs: cancelling one subscription cancels every
//     subscription of its id in the process;
//   - holder-ttl-seconds: the holder's TTL told to a waiter (Grant.HolderTTL,
//     Wake.HolderTTL) is rounded up to whole seconds;
//   - unsent-after-effect: an Acquire whose ctx ends runs to the end all the
//     same and reports the ctx's error as KindUnsent;
//   - release-keeps-entry: a Release that leaves the id with no holder and no
//     waiter leaves an (expired) entry behind in the store.
var ledgerKinds = map[string][]string{
	"expiry-fence-reused":    {"expiry-handoff"},
	"expiry-stale-fence":     {"expiry-handoff"},
	"granted-entry-kept":     {"expiry-handoff"},
	"inspect-expired-held":   {"inspect-read-only"},
	"inspect-latest-fence":   {"inspect-read-only"},
	"inspect-writes":         {"inspect-read-only"},
	"extend-batch-any-token": {"extend-batch"},
	"extend-batch-stops":     {"extend-batch"},
	"heartbeat-reversed":     {"heartbeat-order"},
	"purge-early":            {"purge-exact"},
	"purge-slow":             {"purge-exact"},
	"cancel-all-subs":        {"subscribe-scoped"},
	"holder-ttl-seconds":     {"ttl-precision"},
	"unsent-after-effect":    {"error-kinds"},
	"release-keeps-entry":    {"no-state-left"},
}

func init() {
	for k, props := range ledgerKinds {
		brokenKinds[k] = props
	}
}

// ledger is what the ledgerBreakage backends of one harness did, shared
// like their store. Times are on the real clock, the store's.
type ledger struct {
	mu       sync.Mutex
	grants   map[string]*grantRec // the latest grant of each id
	entries  map[string]entryRec  // queue entries by fakeKey(id, token)
	ghosts   map[string]entryRec  // granted-entry-kept's entries, by id
	maxFence uint64
}

type grantRec struct {
	token  string
	fence  uint64 // reported
	inner  uint64 // the store's
	stale  uint64 // expiry-stale-fence: the ended lease's fence
	expiry time.Time
	ended  bool // released or left
}

type entryRec struct {
	token    string
	ticket   uint64
	deadline time.Time
	ttl      time.Duration // its WaiterTTL
}

func newLedger() *ledger {
	return &ledger{grants: map[string]*grantRec{}, entries: map[string]entryRec{}, ghosts: map[string]entryRec{}}
}

// ledgerBreakage is a memorybackend Backend with one breakage, its kind.
type ledgerBreakage struct {
	wrapped
	kind  string
	store *memstore.Store
	l     *ledger

	subMu sync.Mutex
	subs  map[string][]func() // cancel-all-subs: this process's cancels by id
}

var (
	_ backend.Batcher       = (*ledgerBreakage)(nil)
	_ backend.ExtendBatcher = (*ledgerBreakage)(nil)
	_ backend.Inspector     = (*ledgerBreakage)(nil)
)

// newLedgerBreakage returns the ledgerBreakage of h's kind over inner, or
// nil when the kind is not one of ledgerKinds.
func newLedgerBreakage(h *brokenHarness, inner *memstore.Backend) backend.Backend {
	if _, ok := ledgerKinds[h.kind]; !ok {
		return nil
	}
	return &ledgerBreakage{wrapped: wrapped{inner}, kind: h.kind, store: h.Store, l: h.ledger, subs: map[string][]func(){}}
}

// ceilSecond rounds d > 0 up to whole seconds (holder-ttl-seconds).
func ceilSecond(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// purgeEarly is purge-early's bug: it removes the entries of id that have
// used up more than half of their WaiterTTL.
func (b *ledgerBreakage) purgeEarly(ctx context.Context, id string) {
	if b.kind != "purge-early" {
		return
	}
	now := time.Now()
	b.l.mu.Lock()
	var early []string
	for k, r := range b.l.entries {
		if k == fakeKey(id, r.token) && r.deadline.Sub(now) < r.ttl/2 {
			early = append(early, r.token)
			delete(b.l.entries, k)
		}
	}
	b.l.mu.Unlock()
	for _, tok := range early {
		_ = b.inner.Leave(context.WithoutCancel(ctx), id, tok)
	}
}

// stalled reports whether granted-entry-kept's entry of an earlier grant
// blocks req: it is alive, and its owner no longer holds the lock.
func (b *ledgerBreakage) stalled(req backend.AcquireRequest) (entryRec, bool) {
	if b.kind != "granted-entry-kept" {
		return entryRec{}, false
	}
	b.l.mu.Lock()
	g, ok := b.l.ghosts[req.ID]
	b.l.mu.Unlock()
	if !ok || g.token == req.Token || !time.Now().Before(g.deadline) {
		return entryRec{}, false
	}
	holder, held := b.store.Holder(req.ID)
	return g, !held || holder != g.token
}

func (b *ledgerBreakage) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	b.purgeEarly(ctx, req.ID)
	if _, ok := b.stalled(req); ok {
		b.l.mu.Lock()
		r, queued := b.l.entries[fakeKey(req.ID, req.Token)]
		b.l.mu.Unlock()
		return backend.Grant{Queued: queued, Ticket: r.ticket}, nil // the bug: the old entry is ahead
	}
	sctx := ctx
	if b.kind == "unsent-after-effect" {
		sctx = context.WithoutCancel(ctx)
	}
	g, err := b.inner.Acquire(sctx, req)
	if err == nil {
		g = b.record(req, g)
	}
	if b.kind == "unsent-after-effect" && ctx.Err() != nil {
		return backend.Grant{}, backend.WithKind(backend.KindUnsent, ctx.Err()) // the bug: it ran
	}
	return g, err
}

// record enters the outcome of an Acquire step in the ledger and returns
// the grant as the breakage reports it.
func (b *ledgerBreakage) record(req backend.AcquireRequest, g backend.Grant) backend.Grant {
	now := time.Now()
	b.l.mu.Lock()
	defer b.l.mu.Unlock()
	k := fakeKey(req.ID, req.Token)
	entry, wasQueued := b.l.entries[k]
	if !g.Acquired {
		if b.kind == "holder-ttl-seconds" {
			g.HolderTTL = ceilSecond(g.HolderTTL)
		}
		if g.Queued && req.Wait {
			b.l.entries[k] = entryRec{token: req.Token, ticket: g.Ticket, deadline: now.Add(req.WaiterTTL), ttl: req.WaiterTTL}
		}
		return g
	}
	delete(b.l.entries, k)
	prev := b.l.grants[req.ID]
	if prev != nil && prev.token == req.Token && prev.inner == g.Fence {
		// A retry by the holder.
		if b.kind == "expiry-stale-fence" && prev.stale != 0 {
			g.Fence = prev.stale // the bug: the ended lease's fence is still stored
		} else {
			g.Fence = prev.fence
		}
		return g
	}
	rec := &grantRec{token: req.Token, fence: g.Fence, inner: g.Fence, expiry: now.Add(g.TTL)}
	if prev != nil && !prev.ended && !now.Before(prev.expiry) {
		// The lease before ended without a release.
		switch b.kind {
		case "expiry-fence-reused":
			rec.fence = prev.fence // the bug
		case "expiry-stale-fence":
			rec.stale = prev.fence
		case "granted-entry-kept":
			if wasQueued {
				b.l.ghosts[req.ID] = entry // the bug: its entry stays
			}
		}
	}
	b.l.grants[req.ID] = rec
	b.l.maxFence = max(b.l.maxFence, rec.fence)
	g.Fence = rec.fence
	return g
}

// ended marks (id, token)'s grant as released or left.
func (b *ledgerBreakage) ended(id, token string) {
	b.l.mu.Lock()
	if g := b.l.grants[id]; g != nil && g.token == token {
		g.ended = true
	}
	b.l.mu.Unlock()
}

func (b *ledgerBreakage) Release(ctx context.Context, id, token string) error {
	b.purgeEarly(ctx, id)
	err := b.inner.Release(ctx, id, token)
	if err != nil {
		return err
	}
	b.ended(id, token)
	if b.kind == "release-keeps-entry" && len(b.store.Waiters(id)) == 0 {
		// The bug: an entry stays, a lease that is over at once.
		_, _ = b.inner.Acquire(context.WithoutCancel(ctx), backend.AcquireRequest{ID: id, Token: "kept-" + token, TTL: time.Nanosecond})
	}
	return nil
}

func (b *ledgerBreakage) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	b.purgeEarly(ctx, id)
	return b.inner.Extend(ctx, id, token, ttl)
}

func (b *ledgerBreakage) Leave(ctx context.Context, id, token string) error {
	b.purgeEarly(ctx, id)
	b.l.mu.Lock()
	delete(b.l.entries, fakeKey(id, token))
	if g, ok := b.l.ghosts[id]; ok && g.token == token {
		delete(b.l.ghosts, id)
	}
	b.l.mu.Unlock()
	if holder, held := b.store.Holder(id); held && holder == token {
		b.ended(id, token)
	}
	return b.inner.Leave(ctx, id, token)
}

func (b *ledgerBreakage) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	for _, w := range waiters {
		b.purgeEarly(ctx, w.ID)
	}
	res, err := b.inner.Heartbeat(ctx, waiters, waiterTTL)
	if err != nil {
		return res, err
	}
	now := time.Now()
	b.l.mu.Lock()
	for i, r := range res {
		w := waiters[i]
		k := fakeKey(w.ID, w.Token)
		if e, ok := b.l.entries[k]; ok && r.Queued {
			e.deadline = now.Add(waiterTTL)
			b.l.entries[k] = e
		}
		if g, ok := b.l.ghosts[w.ID]; ok && b.kind == "granted-entry-kept" && g.token == w.Token && now.Before(g.deadline) {
			res[i].Queued = true // the bug: the granted waiter's entry is still there
		}
	}
	b.l.mu.Unlock()
	if b.kind == "heartbeat-reversed" {
		slices.Reverse(res) // the bug
	}
	return res, nil
}

func (b *ledgerBreakage) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (func(), error) {
	deliver := fn
	if b.kind == "holder-ttl-seconds" {
		deliver = func(w backend.Wake) {
			w.HolderTTL = ceilSecond(w.HolderTTL)
			fn(w)
		}
	}
	cancel, err := b.inner.Subscribe(ctx, id, deliver)
	if err != nil || b.kind != "cancel-all-subs" {
		return cancel, err
	}
	b.subMu.Lock()
	b.subs[id] = append(b.subs[id], cancel)
	b.subMu.Unlock()
	return func() {
		// The bug: every subscription of the id in this process goes.
		b.subMu.Lock()
		all := b.subs[id]
		delete(b.subs, id)
		b.subMu.Unlock()
		for _, c := range all {
			c()
		}
	}, nil
}

func (b *ledgerBreakage) Inspect(ctx context.Context, id string, maxWaiters int) (backend.Inspection, error) {
	if b.kind == "inspect-writes" {
		_ = b.inner.Leave(ctx, id, "inspect-writes") // the bug: a step, with its purge and wake-ups
	}
	in, err := b.inner.Inspect(ctx, id, maxWaiters)
	if err != nil {
		return in, err
	}
	b.l.mu.Lock()
	defer b.l.mu.Unlock()
	g := b.l.grants[id]
	switch {
	case b.kind == "inspect-expired-held" && !in.Held && g != nil && !g.ended:
		// The bug: the stored lease, read without its expiry.
		in.Held, in.Fence, in.TTL, in.Holder = true, g.fence, time.Until(g.expiry), backend.Fingerprint(g.token)
	case b.kind == "inspect-latest-fence" && in.Held:
		in.Fence = b.l.maxFence // the bug
	case in.Held && g != nil && g.inner == in.Fence:
		in.Fence = g.fence
	}
	return in, nil
}

func (b *ledgerBreakage) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]error, error) {
	out := make([]error, len(reqs))
	for i, r := range reqs {
		switch b.kind {
		case "extend-batch-stops":
			if i > 0 && out[i-1] != nil {
				out[i] = out[i-1] // the bug: the rest are not run
				continue
			}
		case "extend-batch-any-token":
			err := b.Extend(ctx, r.ID, r.Token, r.TTL)
			if holder, held := b.store.Holder(r.ID); errors.Is(err, backend.ErrNotHeld) && held {
				err = b.Extend(ctx, r.ID, holder, r.TTL) // the bug: whoever holds it
			}
			out[i] = err
			continue
		}
		out[i] = b.Extend(ctx, r.ID, r.Token, r.TTL)
	}
	return out, nil
}

func (b *ledgerBreakage) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	return acquireBatch(ctx, b, reqs)
}

func (b *ledgerBreakage) LeaveBatch(ctx context.Context, waiters []backend.Waiter) error {
	return leaveBatch(ctx, b, waiters)
}
