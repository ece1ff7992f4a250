package wakeup

import (
	"context"
	"sync"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

// Kind is what an Event of a connection tells.
type Kind int

// The kinds of Event.
const (
	// Confirmed: the server confirmed the (S)SUBSCRIBE of Channel.
	Confirmed Kind = iota + 1
	// Message: Payload was published to Channel.
	Message
	// Dropped: the server dropped Channel by itself (an "sunsubscribe" it
	// was not asked for: the channel's slot moved to another node).
	Dropped
	// Moved: an (S)SUBSCRIBE of a channel of Slot was redirected (MOVED or
	// ASK): the node does not serve that slot.
	Moved
	// Refused: the server refused the (S)SUBSCRIBE of Channel, or of every
	// channel not confirmed yet on the connection when Channel is "", with
	// Err (an ACL, a server without sharded pub/sub). The connection is
	// still good.
	Refused
)

// Event is one thing a connection heard.
type Event struct {
	Kind    Kind
	Channel string
	Payload string // Message
	Slot    int    // Moved
	Err     error  // Refused
}

// Dialer opens the connections of a Supervisor: one per node.
type Dialer interface {
	// Open connects to node ("" for a Dialer that is not a Router) and
	// returns the connection, which reports what it hears to events (from
	// any goroutine; events does not block). ctx ends when the Supervisor
	// closes.
	Open(ctx context.Context, node string, events func(Event)) (Conn, error)
}

// Router is a Dialer whose channels live on several nodes (sharded pub/sub
// on Redis Cluster).
type Router interface {
	// Node returns the node that serves channel now; reload asks to reload
	// the routing first (it may be out of date).
	Node(ctx context.Context, channel string, reload bool) (string, error)
}

// Conn is one connection of a Supervisor, used by one goroutine (Serve
// runs on another).
type Conn interface {
	// Subscribe sends the (S)SUBSCRIBE of channels; each confirmation (or
	// refusal) comes as an Event. An error means the connection is broken.
	Subscribe(ctx context.Context, channels []string) error
	// Unsubscribe sends the (S)UNSUBSCRIBE of channels. An error means the
	// connection is broken.
	Unsubscribe(ctx context.Context, channels []string) error
	// Serve returns when the connection fails (the error), ends without
	// failing (nil: connect again at once), or ctx ends.
	Serve(ctx context.Context) error
	// Close closes the connection; Serve returns soon after.
	Close()
}

// SupervisorOptions tune a Supervisor.
type SupervisorOptions struct {
	// FailUnconfirmed ends the first Subscribe of every channel that is
	// not confirmed yet with the error of a connection that cannot be
	// opened or breaks; otherwise such a Subscribe waits for a connection
	// (bounded by its ctx).
	FailUnconfirmed bool
}

// routeTimeout bounds one Node lookup.
const routeTimeout = 5 * time.Second

// Supervisor owns the wake-up subscriptions of a Backend: it keeps one
// connection per node (one node when the Dialer is not a Router), each
// served by a goroutine that connects, (re)subscribes the live set of the
// node's channels, sends every (S)SUBSCRIBE and (S)UNSUBSCRIBE in the
// order of the decisions, and backs off after a failure (NextDelay). A
// channel nobody waits on any more leaves its node only in that goroutine,
// after its SUBSCRIBE was confirmed (or failed), so a confirmation always
// belongs to the entry in the map, and a new entry of the same channel is
// subscribed after the old one's UNSUBSCRIBE.
//
// Every confirmation of a channel after its first one (on a new
// connection, or on another node) is delivered as the entry's All: the
// channel was not subscribed for a while, and messages may have been lost.
// Subscribe returns after the first confirmation.
//
// With a Router, a channel is subscribed on the node Node names; one the
// node drops (Dropped) or redirects (Moved), or whose node fails and
// another node serves now, is routed again, with the routing reloaded.
type Supervisor struct {
	dialer Dialer
	router Router // nil: every channel is on node ""
	opts   SupervisorOptions
	life   Life // ends at Close

	mu       sync.Mutex
	chans    map[string]*subEntry
	nodes    map[string]*supNode
	unrouted map[*subEntry]bool // waiting for the router
	routing  bool               // the router goroutine runs
	kick     chan struct{}      // capacity 1: the router has work
	closed   bool
	wg       sync.WaitGroup // node, serve and router goroutines
}

type subEntry struct {
	Entry
	slot   int
	node   *supNode // nil while unrouted
	sent   bool     // (S)SUBSCRIBE sent on node's current connection
	live   bool     // confirmed on node's current connection
	gone   bool     // left the Supervisor
	reload bool     // route it with the routing reloaded
	wait   bool     // route it after MinDelay (redirected)
}

type supNode struct {
	name  string
	chans map[string]*subEntry
	gen   uint64 // the current connection's number; events of another are ignored
	kick  chan struct{}
}

// NewSupervisor returns a Supervisor that connects with d. It does no I/O
// until the first Subscribe.
func NewSupervisor(d Dialer, opts SupervisorOptions) *Supervisor {
	s := &Supervisor{
		dialer:   d,
		opts:     opts,
		life:     NewLife(),
		chans:    make(map[string]*subEntry),
		nodes:    make(map[string]*supNode),
		unrouted: make(map[*subEntry]bool),
		kick:     make(chan struct{}, 1),
	}
	s.router, _ = d.(Router)
	return s
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Subscribe delivers the wake-ups of channel to fn (the entry's All, with
// id, after a resubscription) and returns once the channel is subscribed;
// cancel ends it. The error is the subscription's refusal, ctx's, or
// backend.ErrClosed.
func (s *Supervisor) Subscribe(ctx context.Context, id, channel string, fn func(backend.Wake)) (func(), error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, backend.ErrClosed
	}
	e := s.chans[channel]
	if e == nil {
		e = s.newEntryLocked(id, channel)
	}
	return e.Join(ctx, fn, s.mu.Unlock, s.life.Done(), func(key uint64) { s.unsubscribe(e, key) })
}

// Keep subscribes fn to channel as Subscribe does, until Close, without
// waiting for the confirmation.
func (s *Supervisor) Keep(id, channel string, fn func(backend.Wake)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return backend.ErrClosed
	}
	e := s.chans[channel]
	if e == nil {
		e = s.newEntryLocked(id, channel)
	}
	e.Fns.Add(fn)
	return nil
}

// newEntryLocked adds the entry of channel and places it.
func (s *Supervisor) newEntryLocked(id, channel string) *subEntry {
	e := &subEntry{Entry: NewEntry(id, channel), slot: -1}
	if s.router != nil {
		e.slot = keys.Slot(channel)
	}
	s.chans[channel] = e
	s.placeLocked(e)
	return e
}

func (s *Supervisor) unsubscribe(e *subEntry, key uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Fns.Remove(key) > 0 || e.gone {
		return
	}
	if e.node != nil {
		kick(e.node.kick) // its goroutine unsubscribes it, unless used again by then
	} else {
		kick(s.kick)
	}
}

// placeLocked gives e to its node, or to the router.
func (s *Supervisor) placeLocked(e *subEntry) {
	if s.router == nil {
		s.assignLocked(e, "")
		return
	}
	s.unrouted[e] = true
	if !s.routing {
		s.routing = true
		s.wg.Add(1)
		go s.route()
	}
	kick(s.kick)
}

// assignLocked puts e on the node named name, starting its goroutine if
// there is none.
func (s *Supervisor) assignLocked(e *subEntry, name string) {
	n := s.nodes[name]
	if n == nil {
		n = &supNode{name: name, chans: make(map[string]*subEntry), kick: make(chan struct{}, 1)}
		s.nodes[name] = n
		s.wg.Add(1)
		go s.serve(n)
	}
	e.node, e.sent, e.live = n, false, false
	n.chans[e.Channel] = e
	kick(n.kick)
}

// removeLocked takes e out of the Supervisor.
func (s *Supervisor) removeLocked(e *subEntry) {
	e.gone = true
	if s.chans[e.Channel] == e {
		delete(s.chans, e.Channel)
	}
	if n := e.node; n != nil && n.chans[e.Channel] == e {
		delete(n.chans, e.Channel)
	}
	delete(s.unrouted, e)
	e.node, e.sent, e.live = nil, false, false
}

// unrouteLocked takes e off its node and gives it to the router, which
// reloads the routing; wait delays it by MinDelay.
func (s *Supervisor) unrouteLocked(e *subEntry, wait bool) {
	if n := e.node; n != nil && n.chans[e.Channel] == e {
		delete(n.chans, e.Channel)
	}
	e.node, e.sent, e.live = nil, false, false
	e.reload, e.wait = true, wait
	s.placeLocked(e)
}

// route routes the entries of unrouted until Close.
func (s *Supervisor) route() {
	defer s.wg.Done()
	delay := time.Duration(0)
	for {
		if delay > 0 {
			if !Sleep(s.life.Done(), delay) {
				return
			}
		} else {
			select {
			case <-s.kick:
			case <-s.life.Done():
				return
			}
		}
		s.mu.Lock()
		var batch []*subEntry
		reload, wait := false, false
		for e := range s.unrouted {
			batch = append(batch, e)
			reload = reload || e.reload
			wait = wait || e.wait
			e.wait = false
		}
		s.mu.Unlock()
		if len(batch) == 0 {
			delay = 0
			continue
		}
		if wait && !Sleep(s.life.Done(), MinDelay) {
			return
		}
		failed := false
		for _, e := range batch {
			ctx, cancel := context.WithTimeout(s.life.Ctx(), routeTimeout)
			name, err := s.router.Node(ctx, e.Channel, reload)
			cancel()
			if err == nil {
				reload = false
			}
			s.mu.Lock()
			switch {
			case s.closed:
				s.mu.Unlock()
				return
			case !s.unrouted[e]:
			case e.Fns.Len() == 0:
				s.removeLocked(e) // nobody waits: nothing to subscribe
			case err != nil:
				failed = true
				e.reload = true
			default:
				delete(s.unrouted, e)
				e.reload = false
				s.assignLocked(e, name)
			}
			s.mu.Unlock()
		}
		if failed {
			delay = NextDelay(delay)
		} else {
			delay = 0
		}
	}
}

// serve owns n's connection until n has no channel left, or Close.
func (s *Supervisor) serve(n *supNode) {
	defer s.wg.Done()
	delay := time.Duration(0)
	for {
		if delay > 0 {
			if !Sleep(s.life.Done(), delay) {
				s.forget(n)
				return
			}
			if s.router != nil {
				s.recheck(n)
			}
		}
		s.mu.Lock()
		for _, e := range n.chans {
			if e.Fns.Len() == 0 {
				s.removeLocked(e) // not on a connection: dropped at once
			}
		}
		if s.forgetLocked(n) {
			s.mu.Unlock()
			return
		}
		n.gen++
		gen := n.gen
		s.mu.Unlock()
		c, err := s.dialer.Open(s.life.Ctx(), n.name, func(ev Event) { s.event(n, gen, ev) })
		if err != nil {
			if s.life.Ended() {
				s.forget(n)
				return
			}
			if s.opts.FailUnconfirmed {
				s.failUnconfirmed(n, err)
			}
			delay = NextDelay(delay)
			continue
		}
		start := time.Now()
		done, err := s.run(n, gen, c)
		if done {
			return
		}
		if s.life.Ended() {
			s.forget(n)
			return
		}
		if s.opts.FailUnconfirmed && err != nil {
			s.failUnconfirmed(n, err)
		}
		switch {
		case err == nil:
			delay = 0 // it ended without failing: connect again at once
			continue
		case time.Since(start) > MaxDelay:
			delay = 0 // it worked for a while: retry soon
		}
		delay = NextDelay(delay)
	}
}

// run serves n on c until c fails (the error), n has nothing left (done),
// or Close; it closes c and waits for its Serve.
func (s *Supervisor) run(n *supNode, gen uint64, c Conn) (done bool, err error) {
	ctx, cancel := context.WithCancel(s.life.Ctx())
	served := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		served <- c.Serve(ctx)
	}()
	defer func() {
		cancel()
		c.Close()
		<-served
		s.mu.Lock()
		if n.gen == gen {
			n.gen++ // what c still reports is stale
		}
		for _, e := range n.chans {
			e.sent, e.live = false, false
		}
		s.mu.Unlock()
	}()
	for {
		subs, unsubs, done := s.pending(n)
		if done {
			return true, nil
		}
		if len(subs) > 0 {
			if err := c.Subscribe(s.life.Ctx(), subs); err != nil {
				return false, err
			}
		}
		if len(unsubs) > 0 {
			if err := c.Unsubscribe(s.life.Ctx(), unsubs); err != nil {
				return false, err
			}
			continue // n may have nothing left now
		}
		select {
		case <-n.kick:
		case err := <-served:
			served <- err // for the deferred wait
			return false, err
		case <-s.life.Done():
			return false, backend.ErrClosed
		}
	}
}

// pending returns the channels of n to subscribe on its connection and the
// idle ones to unsubscribe, which it takes out. done reports that n had
// nothing left and is forgotten.
func (s *Supervisor) pending(n *supNode) (subs, unsubs []string, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch, e := range n.chans {
		switch idle := e.Fns.Len() == 0; {
		case idle && e.live:
			s.removeLocked(e)
			unsubs = append(unsubs, ch)
		case idle && !e.sent:
			s.removeLocked(e)
		case idle:
			// Sent, not confirmed: its confirmation unsubscribes it.
		case !e.sent:
			e.sent = true
			subs = append(subs, ch)
		}
	}
	if len(unsubs) == 0 && s.forgetLocked(n) {
		return nil, nil, true
	}
	return subs, unsubs, false
}

// forgetLocked forgets n when it has no channel left, or on close (its
// channels leave then too), and reports whether it did.
func (s *Supervisor) forgetLocked(n *supNode) bool {
	if !s.closed && len(n.chans) > 0 {
		return false
	}
	if s.nodes[n.name] == n {
		delete(s.nodes, n.name)
	}
	for _, e := range n.chans {
		s.removeLocked(e)
	}
	return true
}

// forget forgets n on close.
func (s *Supervisor) forget(n *supNode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetLocked(n)
}

// recheck routes the channels of n that another node serves now to that
// node; it runs before n connects again after a failure.
func (s *Supervisor) recheck(n *supNode) {
	s.mu.Lock()
	var entries []*subEntry
	for _, e := range n.chans {
		entries = append(entries, e)
	}
	s.mu.Unlock()
	reload := true
	for _, e := range entries {
		ctx, cancel := context.WithTimeout(s.life.Ctx(), routeTimeout)
		name, err := s.router.Node(ctx, e.Channel, reload)
		cancel()
		if err != nil {
			continue // unknown: keep it here for now
		}
		reload = false
		if name == n.name {
			continue
		}
		s.mu.Lock()
		if e.node == n && !e.gone && !s.closed {
			delete(n.chans, e.Channel)
			s.assignLocked(e, name)
		}
		s.mu.Unlock()
	}
}

// failUnconfirmed ends the first Subscribe of every channel of n not
// confirmed yet with err.
func (s *Supervisor) failUnconfirmed(n *supNode, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range n.chans {
		if e.Fail(err) {
			s.removeLocked(e)
		}
	}
}

// event handles what the connection gen of n heard.
func (s *Supervisor) event(n *supNode, gen uint64, ev Event) {
	s.mu.Lock()
	if s.closed || n.gen != gen {
		s.mu.Unlock()
		return
	}
	e := n.chans[ev.Channel]
	switch ev.Kind {
	case Message:
		var fns Snapshot
		if e != nil && e.live {
			fns = e.Fns.Snapshot()
		}
		s.mu.Unlock()
		if len(fns) > 0 {
			if w, ok := e.Wake(ev.Payload); ok {
				fns.Deliver(w)
			}
		}
		return
	case Confirmed:
		// Confirmed again on a live connection: its client reconnected
		// and subscribed again by itself.
		if e == nil {
			break
		}
		e.sent, e.live = true, true
		fns, again := e.Confirm()
		if e.Fns.Len() == 0 {
			kick(n.kick) // nobody waits any more: unsubscribe it
			break
		}
		s.mu.Unlock()
		if again {
			fns.Deliver(e.All()) // subscribed again: on a new connection or another node
		}
		return
	case Dropped:
		if e == nil || !e.live {
			break // the reply to our own unsubscribe, or stale
		}
		if s.router != nil {
			s.unrouteLocked(e, false)
		} else {
			e.sent, e.live = false, false
			kick(n.kick)
		}
	case Moved:
		for _, e := range n.chans {
			if e.sent && !e.live && (ev.Slot < 0 || e.slot == ev.Slot) {
				if s.router != nil {
					s.unrouteLocked(e, true)
				}
			}
		}
	case Refused:
		for _, x := range n.chans {
			if (ev.Channel == "" || x == e) && x.sent && !x.live && x.Fail(ev.Err) {
				s.removeLocked(x)
			}
		}
	}
	s.mu.Unlock()
}

// Close ends every subscription and waits for the goroutines; its
// connections are closed. Later calls return backend.ErrClosed.
func (s *Supervisor) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return backend.ErrClosed
	}
	s.closed = true
	s.mu.Unlock()
	s.life.End()
	s.wg.Wait()
	return nil
}
