package redisbackend

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/redis/wakeup"
)

// clusterSubscriber holds a Backend's sharded subscriptions on Redis
// Cluster (Options.ShardedPubSub with a *redis.ClusterClient): a shard
// channel can only be subscribed on the master that serves its slot, and
// one SSUBSCRIBE may only name channels of one slot. So there is one
// pub/sub connection per master that serves a subscribed channel, shared by
// every channel of that master and reference-counted per channel, and every
// channel is subscribed with an SSUBSCRIBE of its own.
//
// Each node has a goroutine that owns its connection: it reads replies and
// messages, PINGs an idle connection, and rebuilds the connection after any
// failure. go-redis re-subscribes a broken connection with one SSUBSCRIBE
// of every channel, which Redis Cluster refuses (CROSSSLOT) as soon as they
// span two slots; so the goroutine closes that connection, opens a new one
// and subscribes each channel again, checking first that the node still
// serves its slot (a failover moves it to another address).
//
// A channel whose slot moves away (a slot migration or a failover) is
// dropped by its node with an "sunsubscribe" message; a SSUBSCRIBE sent to a
// node that does not serve the slot is answered with MOVED. Either way the
// channel is routed again: the client's slot map is reloaded and the
// channel subscribed on the master it names, retried with a growing delay
// until the map has caught up.
//
// Every confirmation of a channel after its first one (on a new connection
// or another node) is delivered as Wake{ID, All: true}: messages may have
// been lost while it was not subscribed. Subscribe returns after the first
// confirmation.
type clusterSubscriber struct {
	cc *redis.ClusterClient

	life wakeup.Life // ends at close

	mu     sync.Mutex
	chans  map[string]*shardEntry
	nodes  map[string]*shardNode // by address
	closed bool
	wg     sync.WaitGroup // node and route goroutines
}

type shardEntry struct {
	wakeup.Entry
	slot int
	node *shardNode // where it is subscribed or pending; nil while routed
	live bool       // confirmed on node's current connection
	gone bool       // removed from chans: no subscriber left
}

type shardNode struct {
	addr  string
	ps    *redis.PubSub // nil while the node goroutine rebuilds it
	chans map[string]*shardEntry
}

// Timings of the cluster subscriber.
const (
	shardIdle      = pubsubHealthCheck // PING a connection quiet this long
	shardOpTimeout = 5 * time.Second   // bounds a route lookup
)

func newClusterSubscriber(cc *redis.ClusterClient) *clusterSubscriber {
	return &clusterSubscriber{
		cc:    cc,
		life:  wakeup.NewLife(),
		chans: make(map[string]*shardEntry),
		nodes: make(map[string]*shardNode),
	}
}

func (s *clusterSubscriber) subscribe(ctx context.Context, id, channel string, fn func(backend.Wake)) (func(), error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, backend.ErrClosed
	}
	e := s.chans[channel]
	if e == nil {
		e = &shardEntry{Entry: wakeup.NewEntry(id, channel), slot: keys.Slot(channel)}
		s.chans[channel] = e
		s.routeLocked(e, 0, false)
	}
	return e.Join(ctx, fn, s.mu.Unlock, s.life.Done(), func(key uint64) { s.unsubscribe(e, key) })
}

func (s *clusterSubscriber) unsubscribe(e *shardEntry, key uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Fns.Remove(key) == 0 {
		s.dropLocked(e)
	}
}

// dropLocked forgets an entry nobody subscribes to any more. A pending
// SSUBSCRIBE is left to its confirmation (which unsubscribes then), so that
// a confirmation always belongs to the entry in the node's map.
func (s *clusterSubscriber) dropLocked(e *shardEntry) {
	if e.gone || e.Fns.Len() > 0 {
		return
	}
	n := e.node
	if n != nil && !e.live && n.ps != nil {
		return // pending on n: the confirmation drops it
	}
	e.gone = true
	if s.chans[e.Channel] == e {
		delete(s.chans, e.Channel)
	}
	if n != nil {
		delete(n.chans, e.Channel)
		if e.live && n.ps != nil && !s.closed {
			_ = n.ps.SUnsubscribe(context.Background(), e.Channel)
		}
		e.node, e.live = nil, false
	}
}

// routeLocked starts a goroutine that finds the master of e's slot and
// subscribes e there, after delay; reload asks the client to reload its
// slot map first.
func (s *clusterSubscriber) routeLocked(e *shardEntry, delay time.Duration, reload bool) {
	if s.closed {
		return
	}
	if n := e.node; n != nil {
		delete(n.chans, e.Channel)
	}
	e.node, e.live = nil, false
	s.wg.Add(1)
	go s.route(e, delay, reload)
}

func (s *clusterSubscriber) route(e *shardEntry, delay time.Duration, reload bool) {
	defer s.wg.Done()
	for {
		if delay > 0 {
			if !wakeup.Sleep(s.life.Done(), delay) {
				return
			}
		}
		if reload {
			s.cc.ReloadState(s.life.Ctx())
		}
		ctx, cancel := context.WithTimeout(s.life.Ctx(), shardOpTimeout)
		client, err := s.cc.MasterForKey(ctx, e.Channel)
		cancel()
		s.mu.Lock()
		if s.closed || e.gone {
			s.mu.Unlock()
			return
		}
		if e.Fns.Len() == 0 {
			s.dropLocked(e) // not on a node: dropped at once
			s.mu.Unlock()
			return
		}
		if err == nil {
			addr := client.Options().Addr
			n := s.nodes[addr]
			if n == nil {
				n = &shardNode{addr: addr, chans: make(map[string]*shardEntry)}
				s.nodes[addr] = n
				s.wg.Add(1)
				go s.serve(n, client)
			}
			e.node, e.live = n, false
			n.chans[e.Channel] = e
			if n.ps != nil {
				err = n.ps.SSubscribe(s.life.Ctx(), e.Channel)
			}
			// With n.ps nil the node goroutine is rebuilding its
			// connection and subscribes every entry of n.chans.
			s.mu.Unlock()
			if err != nil {
				s.failed(n)
			}
			return
		}
		s.mu.Unlock()
		delay = wakeup.NextDelay(delay)
		reload = true
	}
}

// failed tells n's goroutine that its connection failed outside a read.
func (s *clusterSubscriber) failed(n *shardNode) {
	s.mu.Lock()
	ps := n.ps
	s.mu.Unlock()
	if ps != nil {
		_ = ps.Close() // the node goroutine's read fails and it rebuilds
	}
}

// serve owns n's connection until n has no channel left or close.
func (s *clusterSubscriber) serve(n *shardNode, client *redis.Client) {
	defer s.wg.Done()
	delay := time.Duration(0)
	for {
		ps, done := s.open(n, client)
		if done {
			return
		}
		if ps != nil {
			start := time.Now()
			s.read(n, ps)
			_ = ps.Close()
			s.mu.Lock()
			if n.ps == ps {
				n.ps = nil
			}
			for _, e := range n.chans {
				e.live = false
			}
			s.mu.Unlock()
			if time.Since(start) > wakeup.MaxDelay {
				delay = 0 // it worked for a while: retry soon
			}
		}
		for {
			delay = wakeup.NextDelay(delay)
			if !wakeup.Sleep(s.life.Done(), delay) {
				return
			}
			// Route away the channels whose slot n no longer serves, and
			// take the client the cluster client has for n now.
			var done bool
			if client, done = s.recheck(n); done {
				return
			}
			if client != nil {
				break
			}
		}
	}
}

// open makes n's connection and subscribes every channel of n on it, one
// SSUBSCRIBE each. It reports done when n has nothing left to serve (n is
// then forgotten) or on close, and returns no connection when it could not
// connect (the caller tries again later). It connects (a PING) before it
// takes the lock, so that a node that does not answer holds up no other.
func (s *clusterSubscriber) open(n *shardNode, client *redis.Client) (ps *redis.PubSub, done bool) {
	s.mu.Lock()
	for _, e := range n.chans {
		if e.Fns.Len() == 0 {
			s.dropLocked(e) // not live (n.ps is nil): dropped at once
		}
	}
	done = s.forgetLocked(n)
	s.mu.Unlock()
	if done {
		return nil, true
	}
	ps = client.SSubscribe(s.life.Ctx())
	ctx, cancel := context.WithTimeout(s.life.Ctx(), shardOpTimeout)
	err := ps.Ping(ctx)
	cancel()
	if err != nil {
		_ = ps.Close()
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forgetLocked(n) {
		_ = ps.Close()
		return nil, true
	}
	n.ps = ps
	for ch, e := range n.chans {
		e.live = false
		if err := ps.SSubscribe(s.life.Ctx(), ch); err != nil {
			break // the read fails too, and the next round subscribes again
		}
	}
	return ps, false
}

// forgetLocked forgets n when it has nothing left to serve or on close,
// and reports whether it did.
func (s *clusterSubscriber) forgetLocked(n *shardNode) bool {
	if !s.closed && len(n.chans) > 0 {
		return false
	}
	if s.nodes[n.addr] == n {
		delete(s.nodes, n.addr)
	}
	return true
}

// recheck reloads the slot map and routes the channels of n whose slot
// another master serves now to that master. It returns the cluster
// client's client of n (nil when no channel's master could be looked up),
// and done when n has nothing left (n is then forgotten) or on close.
func (s *clusterSubscriber) recheck(n *shardNode) (client *redis.Client, done bool) {
	s.cc.ReloadState(s.life.Ctx())
	s.mu.Lock()
	entries := make([]*shardEntry, 0, len(n.chans))
	for _, e := range n.chans {
		entries = append(entries, e)
	}
	s.mu.Unlock()
	for _, e := range entries {
		ctx, cancel := context.WithTimeout(s.life.Ctx(), shardOpTimeout)
		c, err := s.cc.MasterForKey(ctx, e.Channel)
		cancel()
		if err != nil {
			continue // unknown: keep it here for now
		}
		if c.Options().Addr == n.addr {
			client = c
			continue
		}
		s.mu.Lock()
		if e.node == n && !e.gone {
			s.routeLocked(e, 0, false)
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return client, s.forgetLocked(n)
}

// read dispatches what ps receives until it fails.
func (s *clusterSubscriber) read(n *shardNode, ps *redis.PubSub) {
	idle := 0
	for {
		m, err := ps.ReceiveTimeout(s.life.Ctx(), shardIdle)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !s.life.Ended() {
				idle++
				if idle > 1 { // a PING went unanswered for a whole period
					return
				}
				if ps.Ping(s.life.Ctx()) != nil {
					return
				}
				continue
			}
			var re redis.Error
			if errors.As(err, &re) && !errors.Is(err, redis.Nil) {
				if s.reply(n, re.Error()) {
					continue
				}
			}
			return
		}
		idle = 0
		switch m := m.(type) {
		case *redis.Message:
			wakeup.Receive(&s.mu, func() *wakeup.Entry {
				if e := n.chans[m.Channel]; e != nil && e.live {
					return &e.Entry
				}
				return nil
			}, m.Payload)
		case *redis.Subscription:
			switch m.Kind {
			case "ssubscribe":
				s.confirm(n, ps, m.Channel)
			case "sunsubscribe":
				s.dropped(n, m.Channel)
			}
		}
	}
}

// confirm handles the confirmation of channel on n.
func (s *clusterSubscriber) confirm(n *shardNode, ps *redis.PubSub, channel string) {
	s.mu.Lock()
	e := n.chans[channel]
	if e == nil || n.ps != ps || e.live {
		s.mu.Unlock()
		return
	}
	e.live = true
	fns, again := e.Confirm()
	if e.Fns.Len() == 0 {
		s.dropLocked(e)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if again {
		fns.Deliver(e.All()) // subscribed again: on a new connection or another node
	}
}

// dropped handles an sunsubscribe of channel on n: the reply to the
// Backend's own SUNSUBSCRIBE (the entry is gone from n then), or the node
// telling that it no longer serves the channel's slot.
func (s *clusterSubscriber) dropped(n *shardNode, channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := n.chans[channel]
	if e == nil || !e.live {
		return
	}
	s.routeLocked(e, 0, true)
}

// reply handles an error reply on n's connection and reports whether the
// connection is still good.
func (s *clusterSubscriber) reply(n *shardNode, msg string) bool {
	f := strings.Fields(msg)
	switch {
	case len(f) == 3 && (f[0] == "MOVED" || f[0] == "ASK"):
		// A SSUBSCRIBE reached a node that does not serve the slot: route
		// the pending channels of that slot again.
		slot, err := strconv.Atoi(f[1])
		if err != nil {
			return true
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, e := range n.chans {
			if e.slot == slot && !e.live {
				s.routeLocked(e, wakeup.MinDelay, true)
			}
		}
		return true
	case len(f) > 0 && f[0] == "CROSSSLOT":
		// go-redis re-subscribed every channel in one command after a
		// reconnect: start over on a connection of our own.
		return false
	default:
		// Refused (e.g. an ACL, or a server without sharded pub/sub): the
		// channels never confirmed get the error; the others stay.
		err := errors.New("redisbackend: SSUBSCRIBE refused: " + msg)
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, e := range n.chans {
			if !e.live && e.Fail(err) {
				e.gone = true
				delete(n.chans, e.Channel)
				if s.chans[e.Channel] == e {
					delete(s.chans, e.Channel)
				}
			}
		}
		return true
	}
}

func (s *clusterSubscriber) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return backend.ErrClosed
	}
	s.closed = true
	var pss []*redis.PubSub
	for _, n := range s.nodes {
		if n.ps != nil {
			pss = append(pss, n.ps)
		}
	}
	s.mu.Unlock()
	s.life.End()
	for _, ps := range pss {
		_ = ps.Close()
	}
	s.wg.Wait()
	return nil
}
