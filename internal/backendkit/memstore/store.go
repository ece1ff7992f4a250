package memstore

import (
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redislocker/lock/backend"
)

// Options configures a Store. A nil *Options means every default; so does
// a zero field. NewStore refuses a negative one with a
// *backend.ArgumentError naming it.
type Options struct {
	// Clock measures every lease expiry and waiter deadline.
	// Default: the real clock (time.Now).
	Clock Clock
	// MaxWaiters caps the queue of one id; an Acquire with Wait that would
	// enqueue beyond it gets backend.ErrQueueFull and enqueues nothing.
	// Default: 10000.
	MaxWaiters int
	// PurgeLimit is the most expired waiters one step purges per id.
	// Default: 100.
	PurgeLimit int
	// NoHandOff turns direct hand-off off (see backend.HandOffer): a step
	// that frees the lock then wakes the head, which takes the lock with
	// its own Acquire step. Default false: the Store hands off.
	NoHandOff bool
}

const (
	// DefaultMaxWaiters is the default of Options.MaxWaiters.
	DefaultMaxWaiters = 10000
	// DefaultPurgeLimit is the default of Options.PurgeLimit.
	DefaultPurgeLimit = 100
)

const (
	numShards   = 64
	entryPool   = 16 // free entries kept per shard
	sweepEvery  = 16 // new entries between two opportunistic sweeps
	sweepProbes = 4  // entries looked at by one sweep
)

// Store is the shared state of every lock id: one "server". Many Backends
// on one Store contend like separate processes on one Redis. Create it with
// NewStore; it is goroutine-safe.
type Store struct {
	clock      Clock
	maxWaiters int
	purgeLimit int
	handsOff   bool
	seed       maphash.Seed

	fence  atomic.Uint64 // last fence handed out (see nextFence)
	_      [56]byte
	ticket atomic.Uint64 // last ticket handed out
	_      [56]byte

	shards [numShards]shard
}

type shard struct {
	mu      sync.Mutex
	ids     map[string]*entry
	subs    map[string][]*subscription // copy-on-write slices
	free    []*entry
	creates uint32
	_       [64]byte
}

// NewStore returns an empty Store configured by opts (nil for defaults). A
// nil *Options never fails.
func NewStore(opts *Options) (*Store, error) {
	if opts != nil {
		switch {
		case opts.MaxWaiters < 0:
			return nil, &backend.ArgumentError{Arg: "opts.MaxWaiters", Reason: fmt.Sprintf("must not be negative, got %d", opts.MaxWaiters)}
		case opts.PurgeLimit < 0:
			return nil, &backend.ArgumentError{Arg: "opts.PurgeLimit", Reason: fmt.Sprintf("must not be negative, got %d", opts.PurgeLimit)}
		}
	}
	s := &Store{
		clock:      realClock{},
		maxWaiters: DefaultMaxWaiters,
		purgeLimit: DefaultPurgeLimit,
		handsOff:   true,
		seed:       maphash.MakeSeed(),
	}
	if opts != nil {
		if opts.Clock != nil {
			s.clock = opts.Clock
		}
		if opts.MaxWaiters > 0 {
			s.maxWaiters = opts.MaxWaiters
		}
		if opts.PurgeLimit > 0 {
			s.purgeLimit = opts.PurgeLimit
		}
		s.handsOff = !opts.NoHandOff
	}
	for i := range s.shards {
		s.shards[i].ids = make(map[string]*entry)
		s.shards[i].subs = make(map[string][]*subscription)
	}
	return s, nil
}

// NewBackend returns a new Backend on s: one "process", with its own
// subscriptions and its own Close.
func (s *Store) NewBackend() *Backend {
	return &Backend{s: s}
}

// New returns a Backend on a new Store made by NewStore(opts), or NewStore's
// error. A nil *Options never fails.
func New(opts *Options) (*Backend, error) {
	s, err := NewStore(opts)
	if err != nil {
		return nil, err
	}
	return s.NewBackend(), nil
}

func (s *Store) shard(id string) *shard {
	return &s.shards[maphash.String(s.seed, id)%numShards]
}

// ExpireNow ends the leases of id now (every one of a shared id), with no
// wake-up, like a Redis key expiring. Waiters stay queued. It does nothing
// when id is not held.
func (s *Store) ExpireNow(id string) {
	s.withEntry(id, func(sh *shard, e *entry) {
		e.clearLeases()
		if e.head == nil {
			sh.drop(id, e)
		}
	})
}

// Holder returns the token that holds id now, by the store's clock, and
// whether any does; for a shared id, the holder of the live lease granted
// last (see Holders).
func (s *Store) Holder(id string) (token string, ok bool) {
	s.withEntry(id, func(_ *shard, e *entry) {
		if l := e.last(s.clock.Now()); l != nil {
			token, ok = l.token, true
		}
	})
	return token, ok
}

// Holders returns the tokens of the live leases of id now, by the store's
// clock, in grant order: at most one for a mutex.
func (s *Store) Holders(id string) []string {
	var out []string
	s.withEntry(id, func(_ *shard, e *entry) {
		now := s.clock.Now()
		for _, l := range e.leases {
			if l.expiry.After(now) {
				out = append(out, l.token)
			}
		}
	})
	return out
}

// Waiters returns the tokens of the live queue entries of id (deadline
// after now, by the store's clock) in ticket order, head first.
func (s *Store) Waiters(id string) []string {
	var out []string
	s.withEntry(id, func(_ *shard, e *entry) {
		now := s.clock.Now()
		for w := e.head; w != nil; w = w.next {
			if w.deadline.After(now) {
				out = append(out, w.token)
			}
		}
	})
	return out
}

// withEntry calls f with id's shard locked and id's entry, when id has one.
func (s *Store) withEntry(id string, f func(sh *shard, e *entry)) {
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.ids[id]; e != nil {
		f(sh, e)
	}
}

// Len returns the number of ids that have any state left: a live lease or a
// live waiter. It is 0 when everything was released, left or has expired
// (H2). Entries found with nothing live are deleted on the way.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		now := s.clock.Now()
		for id, e := range sh.ids {
			if e.live(now) || hasLiveWaiter(e, now) {
				n++
				continue
			}
			sh.drop(id, e)
		}
		sh.mu.Unlock()
	}
	return n
}

func hasLiveWaiter(e *entry, now time.Time) bool {
	for w := e.head; w != nil; w = w.next {
		if w.deadline.After(now) {
			return true
		}
	}
	return false
}

// create adds a fresh entry for id. Every sweepEvery creations it also
// deletes a few entries left with nothing live (an expired lease nobody
// touched since), so that abandoned ids do not pile up.
func (sh *shard) create(s *Store, id string, now time.Time) *entry {
	sh.creates++
	if sh.creates%sweepEvery == 0 {
		probes := 0
		for oid, e := range sh.ids {
			if probes++; probes > sweepProbes {
				break
			}
			if e.live(now) {
				continue
			}
			e.clearLeases()
			e.purge(now, s.purgeLimit)
			if e.head == nil {
				sh.drop(oid, e)
			}
		}
	}
	var e *entry
	if n := len(sh.free); n > 0 {
		e = sh.free[n-1]
		sh.free[n-1] = nil
		sh.free = sh.free[:n-1]
	} else {
		e = new(entry)
	}
	sh.ids[id] = e
	return e
}

// drop deletes id's entry and keeps it for reuse.
func (sh *shard) drop(id string, e *entry) {
	delete(sh.ids, id)
	e.reset()
	if len(sh.free) < entryPool {
		sh.free = append(sh.free, e)
	}
}

// mark is an entry's state at the start of a step, to decide the wake-ups
// at its end.
type mark struct {
	drops  uint64      // e.drops at the start: a lease removed since freed permits
	head   *waiter     // e.head at the start
	grants []addressed // the hand-offs made by the step, to deliver at its end
}

// open starts a step on id: it loads the entry (nil if none), frees the
// leases that have ended and purges expired waiters. Then it hands off to
// the heads that fit (direct hand-off), up to self, the step's requester,
// which its own step grants.
func (s *Store) open(sh *shard, id string, now time.Time, self string) (*entry, mark) {
	e := sh.ids[id]
	if e == nil {
		return nil, mark{}
	}
	m := mark{drops: e.drops, head: e.head}
	e.expire(now)
	e.purge(now, s.purgeLimit)
	s.handOff(id, e, now, &m, self)
	return e, m
}

// handOff grants the id to e's heads, one after another, while the head
// is live, fits, and is not self (direct hand-off): each its TTL, a new
// fence, its entry removed. Their wake-ups go in m, to be delivered by
// finish. A dead head that the purge limit left in place is not granted,
// and blocks the ones behind it until a step purges it.
func (s *Store) handOff(id string, e *entry, now time.Time, m *mark, self string) {
	if !s.handsOff {
		return
	}
	for h := e.head; h != nil && h.token != self && h.deadline.After(now) && e.fits(h.permits); h = e.head {
		e.remove(h)
		f := s.nextFence(now)
		e.add(lease{token: h.token, expiry: now.Add(h.ttl), fence: f, permits: h.permits})
		m.grants = append(m.grants, addressed{
			wake: backend.Wake{ID: id, Token: h.token, Grant: &backend.HandOff{Fence: f, TTL: h.ttl, StoreTime: now}},
			to:   h.owner,
		})
	}
}

// finish ends a step on id at now: it hands off what the step freed,
// deletes the entry if nothing is left, and otherwise collects the
// wake-ups. When the live head fits (no hand-off), the heads are woken,
// in ticket order while they fit, if the step freed permits or changed
// the head (or always, with force). When the head does not fit and the
// step changed the head, the new head is told, with the remaining TTL of
// the lease that ends first, unless it is self, the step's requester (its
// reply tells it).
func (s *Store) finish(sh *shard, id string, e *entry, m mark, now time.Time, self string, force bool) wakeCall {
	s.handOff(id, e, now, &m, "")
	wc := wakeCall{wakes: m.grants}
	if len(sh.subs[id]) > 0 {
		wc.subs = sh.subs[id]
	}
	if e.head == nil {
		if len(e.leases) == 0 {
			sh.drop(id, e)
		}
		return wc
	}
	// The head as the queue stands: a dead one that the purge limit left
	// in place is woken or told like a live one (its owner finds it gone),
	// and is purged by a later step, which then wakes the next.
	h := e.head
	if !e.fits(h.permits) {
		if h == m.head || h.token == self {
			return wc
		}
		wc.add(backend.Wake{ID: id, Token: h.token, HolderTTL: e.minTTL(now)}, h.owner)
		return wc
	}
	if !force && e.drops == m.drops && h == m.head {
		return wc
	}
	for used := e.used; h != nil && used+h.permits <= e.capacity; h = h.next {
		used += h.permits
		wc.add(backend.Wake{ID: id, Token: h.token}, h.owner)
	}
	return wc
}

// grant gives req.Token a lease of permits with a new fence.
func (s *Store) grant(e *entry, req *backend.AcquireRequest, permits int, now time.Time) backend.Grant {
	f := s.nextFence(now)
	e.add(lease{token: req.Token, expiry: now.Add(req.TTL), fence: f, permits: permits})
	return backend.Grant{Acquired: true, Fence: f, TTL: req.TTL}
}

// nextFence returns a new fence: the store's clock in microseconds, or the
// last fence + 1 when that is not below it. Fences so increase across the
// store's life, and past it too (a new Store after a restart) as long as
// the clock does not step back. A Store with an injected Clock counts its
// fences from 1 instead.
func (s *Store) nextFence(now time.Time) uint64 {
	if _, real := s.clock.(realClock); !real {
		return s.fence.Add(1) // an injected (test) clock: fences count from 1
	}
	us := uint64(max(now.UnixMicro(), 0))
	for {
		last := s.fence.Load()
		f := max(last+1, us)
		if s.fence.CompareAndSwap(last, f) {
			return f
		}
	}
}

// capacityOf returns the capacity and permits of req as the entry keeps
// them: a mutex (Capacity 0 or 1) is capacity 1 with leases of 1 permit.
// checkRequest has validated req.
func capacityOf(req *backend.AcquireRequest) (capacity, permits int) {
	if req.Capacity < 2 {
		return 1, 1
	}
	return req.Capacity, req.Permits
}

// acquire is the Acquire step of owner, the Backend it came through; the
// caller holds sh.mu. The waiter it queues or refreshes records owner, so
// that its wake-ups reach only owner's subscriptions.
func (s *Store) acquire(sh *shard, req *backend.AcquireRequest, owner *Backend) (backend.Grant, wakeCall, error) {
	now := s.clock.Now()
	capacity, permits := capacityOf(req)
	e, m := s.open(sh, req.ID, now, req.Token)
	if e == nil {
		e = sh.create(s, req.ID, now)
		e.capacity = capacity
		return s.grant(e, req, permits, now), wakeCall{}, nil
	}
	if e.capacity != capacity {
		if len(e.leases) > 0 || hasLiveWaiter(e, now) {
			// Another capacity while the id is in use: nothing changes
			// but what the step's purge removed (dead state).
			return backend.Grant{}, s.finish(sh, req.ID, e, m, now, req.Token, false), backend.ErrCapacity
		}
		e.capacity = capacity // idle: the id takes the request's capacity
	}
	if l := e.lease(req.Token); l != nil {
		// Retry by a holder: a no-op (S6).
		return backend.Grant{Acquired: true, Fence: l.fence, TTL: l.expiry.Sub(now)}, s.finish(sh, req.ID, e, m, now, req.Token, false), nil
	}
	w := e.lookup(req.Token, now)
	if e.fits(permits) && (e.head == nil || e.head == w) {
		if w != nil {
			e.remove(w)
		}
		// The next waiters, if any, are the heads now: they are granted
		// (if they fit) or told.
		return s.grant(e, req, permits, now), s.finish(sh, req.ID, e, m, now, req.Token, false), nil
	}
	var g backend.Grant
	var err error
	if len(e.leases) > 0 {
		g.HolderTTL = e.minTTL(now)
	}
	if req.Wait {
		deadline := now.Add(req.WaiterTTL)
		switch {
		case w != nil:
			e.refresh(w, deadline)
			w.ttl = req.TTL
			w.owner = owner
		case e.queueLen() >= s.maxWaiters:
			err = backend.ErrQueueFull
		default:
			w = e.enqueue(req.Token, s.ticket.Add(1), deadline)
			w.since = now // for Inspect
			w.ttl = req.TTL
			w.permits = permits
			w.owner = owner
		}
	}
	if w != nil {
		g.Queued = true
		g.Ticket = w.ticket
		g.Head = e.head == w
		if s.handsOff {
			g.StoreTime = now
		}
	}
	return g, s.finish(sh, req.ID, e, m, now, req.Token, false), err
}

// release is the Release step; the caller holds sh.mu.
func (s *Store) release(sh *shard, id, token string) (wakeCall, error) {
	return s.byHolder(sh, id, token, func(e *entry, _ *lease, _ time.Time) { e.drop(token) })
}

// extend is the Extend step; the caller holds sh.mu.
func (s *Store) extend(sh *shard, id, token string, ttl time.Duration) (wakeCall, error) {
	return s.byHolder(sh, id, token, func(_ *entry, l *lease, now time.Time) { l.expiry = now.Add(ttl) })
}

// byHolder applies change to token's lease of id when it has one
// (ErrNotHeld otherwise), then finishes the step; the caller holds sh.mu.
func (s *Store) byHolder(sh *shard, id, token string, change func(e *entry, l *lease, now time.Time)) (wakeCall, error) {
	now := s.clock.Now()
	e, m := s.open(sh, id, now, "")
	if e == nil {
		return wakeCall{}, backend.ErrNotHeld
	}
	var err error
	if l := e.lease(token); l != nil {
		change(e, l, now)
	} else {
		err = backend.ErrNotHeld
	}
	return s.finish(sh, id, e, m, now, "", false), err
}

// leave is the Leave step; the caller holds sh.mu.
func (s *Store) leave(sh *shard, id, token string) wakeCall {
	now := s.clock.Now()
	e, m := s.open(sh, id, now, "")
	if e == nil {
		return wakeCall{}
	}
	if w := e.lookup(token, now); w != nil {
		e.remove(w)
	}
	e.drop(token)
	return s.finish(sh, id, e, m, now, "", false)
}

// heartbeat is one waiter's Heartbeat step; the caller holds sh.mu.
func (s *Store) heartbeat(sh *shard, wt backend.Waiter, waiterTTL time.Duration) (backend.HeartbeatResult, wakeCall) {
	now := s.clock.Now()
	e, m := s.open(sh, wt.ID, now, "")
	if e == nil {
		return backend.HeartbeatResult{}, wakeCall{}
	}
	var r backend.HeartbeatResult
	// Granted by hand-off in this step: it was queued, and its wake-up
	// carries the grant.
	for _, g := range m.grants {
		r.Queued = r.Queued || g.wake.Token == wt.Token
	}
	if w := e.lookup(wt.Token, now); w != nil {
		e.refresh(w, now.Add(waiterTTL))
		r.Queued = true
		r.Ready = e.head == w && e.fits(w.permits)
	}
	return r, s.finish(sh, wt.ID, e, m, now, "", true)
}

// subscription is one Subscribe registration of owner.
type subscription struct {
	id    string
	fn    func(backend.Wake)
	owner *Backend
}

func (s *Store) addSub(sub *subscription) {
	sh := s.shard(sub.id)
	sh.mu.Lock()
	old := sh.subs[sub.id]
	// Copy on write: a wakeCall may be iterating the old slice.
	sh.subs[sub.id] = append(old[:len(old):len(old)], sub)
	sh.mu.Unlock()
}

func (s *Store) removeSub(sub *subscription) {
	sh := s.shard(sub.id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := sh.subs[sub.id]
	if len(old) <= 1 {
		if len(old) == 1 && old[0] == sub {
			delete(sh.subs, sub.id)
		}
		return
	}
	subs := make([]*subscription, 0, len(old)-1)
	for _, x := range old {
		if x != sub {
			subs = append(subs, x)
		}
	}
	sh.subs[sub.id] = subs
}

// wakeCall is the wake-ups collected inside a critical section, to be
// delivered after it: the hand-offs' first, then the heads' woken or told.
// Each goes to the subscriptions of the process of the waiter it names,
// or to every one when that process is unknown (nil).
type wakeCall struct {
	subs  []*subscription
	wakes []addressed
}

// addressed is one wake-up and the process it is for (nil: unknown).
type addressed struct {
	wake backend.Wake
	to   *Backend
}

// add appends the wake-up w for the process to.
func (c *wakeCall) add(w backend.Wake, to *Backend) {
	c.wakes = append(c.wakes, addressed{wake: w, to: to})
}

// plainOnly returns the token of c's one wake-up when it is a plain one (no
// grant, no holder TTL), and whether it is.
func (c *wakeCall) plainOnly() (string, bool) {
	if len(c.wakes) != 1 || c.wakes[0].wake.Grant != nil {
		return "", false
	}
	return c.wakes[0].wake.Token, true
}

func (c *wakeCall) fire() {
	for _, a := range c.wakes {
		c.deliver(a.wake, a.to)
	}
}

// deliver calls the subscriptions of to with w, or every subscription when
// to is nil.
func (c *wakeCall) deliver(w backend.Wake, to *Backend) {
	for _, sub := range c.subs {
		if to == nil || sub.owner == to {
			sub.fn(w)
		}
	}
}
