package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/wakeup"
)

// subscriber is a Backend's wake-up source: a wakeup.Supervisor on
// go-redis pub/sub connections, each channel reference-counted by its
// subscribers. On one server (or a failover client) there is one
// connection, which holds every channel: SUBSCRIBE, or SSUBSCRIBE with
// sharded pub/sub. On Redis Cluster with sharded pub/sub (clusterDialer) a
// shard channel can only be subscribed on the master that serves its
// slot, so there is one connection per master that serves a subscribed
// channel.
//
// Each connection is a PubSub of its own, never reconnected by go-redis:
// its Receive would re-subscribe every channel in one command, which Redis
// Cluster refuses (CROSSSLOT) as soon as they span two slots, and
// go-redis's SUBSCRIBE does not wait for the confirmation. The Supervisor
// opens a new connection instead, subscribes every channel again and wakes
// their waiters (Wake{All}).
type subscriber struct {
	*wakeup.Supervisor
}

// shardSubscriber is a client that can open a sharded pub/sub connection.
type shardSubscriber interface {
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Timings of the pub/sub connections.
const (
	// pubsubHealthCheck is how long a connection may be quiet before it is
	// PINGed (go-redis's own default, 3 s, would be the only traffic of an
	// idle waiter's process; a lost wake-up is caught by the core's
	// heartbeat anyway, so ping rarely).
	pubsubHealthCheck = 30 * time.Second
	// shardOpTimeout bounds a connection's first PING and a route lookup.
	shardOpTimeout = 5 * time.Second
)

func newSubscriber(client Client, sharded bool) *subscriber {
	d := &serverDialer{client: client, sharded: sharded}
	// go-redis reports a server that does not answer when the connection
	// is opened: a Subscribe waiting for its first confirmation gets that.
	return &subscriber{wakeup.NewSupervisor(d, wakeup.SupervisorOptions{FailUnconfirmed: true})}
}

func newClusterSubscriber(cc *redis.ClusterClient) *subscriber {
	d := &clusterDialer{cc: cc, clients: make(map[string]*redis.Client)}
	return &subscriber{wakeup.NewSupervisor(d, wakeup.SupervisorOptions{})}
}

func (s *subscriber) subscribe(ctx context.Context, id, channel string, fn func(backend.Wake)) (func(), error) {
	return s.Subscribe(ctx, id, channel, fn)
}

func (s *subscriber) close() error { return s.Close() }

// serverDialer opens the one connection of a client of one server.
type serverDialer struct {
	client  Client
	sharded bool
}

func (d *serverDialer) Open(ctx context.Context, _ string, events func(wakeup.Event)) (wakeup.Conn, error) {
	var ps *redis.PubSub
	if d.sharded {
		ps = d.client.(shardSubscriber).SSubscribe(ctx)
	} else {
		ps = d.client.Subscribe(ctx)
	}
	return openConn(ctx, ps, d.sharded, events)
}

// clusterDialer opens a connection per master of a cluster client, and
// routes a channel to the master of its slot.
type clusterDialer struct {
	cc *redis.ClusterClient

	mu      sync.Mutex
	clients map[string]*redis.Client // by address, as Node found them
}

func (d *clusterDialer) Node(ctx context.Context, channel string, reload bool) (string, error) {
	if reload {
		d.cc.ReloadState(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, shardOpTimeout)
	defer cancel()
	c, err := d.cc.MasterForKey(ctx, channel)
	if err != nil {
		return "", err
	}
	addr := c.Options().Addr
	d.mu.Lock()
	d.clients[addr] = c
	d.mu.Unlock()
	return addr, nil
}

func (d *clusterDialer) Open(ctx context.Context, addr string, events func(wakeup.Event)) (wakeup.Conn, error) {
	d.mu.Lock()
	c := d.clients[addr]
	d.mu.Unlock()
	if c == nil {
		return nil, errors.New("redisbackend: no client for " + addr)
	}
	return openConn(ctx, c.SSubscribe(ctx), true, events)
}

// openConn connects ps (a PING) before the Supervisor uses it, so that a
// node that does not answer is found here.
func openConn(ctx context.Context, ps *redis.PubSub, sharded bool, events func(wakeup.Event)) (wakeup.Conn, error) {
	pctx, cancel := context.WithTimeout(ctx, shardOpTimeout)
	err := ps.Ping(pctx)
	cancel()
	if err != nil {
		_ = ps.Close()
		return nil, err
	}
	return &psConn{ps: ps, sharded: sharded, events: events}, nil
}

// psConn is one go-redis pub/sub connection of a subscriber.
type psConn struct {
	ps      *redis.PubSub
	sharded bool // SSUBSCRIBE, one channel each (one slot per command)
	events  func(wakeup.Event)
}

func (c *psConn) Subscribe(ctx context.Context, channels []string) error {
	if !c.sharded {
		return c.ps.Subscribe(ctx, channels...)
	}
	for _, ch := range channels {
		if err := c.ps.SSubscribe(ctx, ch); err != nil {
			return err
		}
	}
	return nil
}

func (c *psConn) Unsubscribe(ctx context.Context, channels []string) error {
	if !c.sharded {
		return c.ps.Unsubscribe(ctx, channels...)
	}
	for _, ch := range channels {
		if err := c.ps.SUnsubscribe(ctx, ch); err != nil {
			return err
		}
	}
	return nil
}

func (c *psConn) Close() { _ = c.ps.Close() } // an error here is the dead connection's

// Serve reads replies and messages, and PINGs an idle connection, until
// the connection fails.
func (c *psConn) Serve(ctx context.Context) error {
	idle := 0
	for {
		m, err := c.ps.ReceiveTimeout(ctx, pubsubHealthCheck)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
				idle++
				if idle > 1 { // a PING went unanswered for a whole period
					return err
				}
				if err := c.ps.Ping(ctx); err != nil {
					return err
				}
				continue
			}
			var re redis.Error
			if errors.As(err, &re) && !errors.Is(err, redis.Nil) {
				if ev, ok := replyEvent(re); ok {
					c.events(ev)
					continue
				}
			}
			return err
		}
		idle = 0
		if ev, ok := messageEvent(m); ok {
			c.events(ev)
		}
	}
}

// messageEvent returns the event that a message of go-redis's Receive is.
func messageEvent(m any) (wakeup.Event, bool) {
	switch m := m.(type) {
	case *redis.Message:
		return wakeup.Event{Kind: wakeup.Message, Channel: m.Channel, Payload: m.Payload}, true
	case *redis.Subscription:
		switch m.Kind {
		case "subscribe", "ssubscribe":
			return wakeup.Event{Kind: wakeup.Confirmed, Channel: m.Channel}, true
		case "sunsubscribe":
			// The reply to our own SUNSUBSCRIBE, or the node telling that
			// it no longer serves the channel's slot.
			return wakeup.Event{Kind: wakeup.Dropped, Channel: m.Channel}, true
		}
	}
	return wakeup.Event{}, false
}

// replyEvent returns the event that an error reply is; ok is false when
// the connection is no good any more.
func replyEvent(re redis.Error) (ev wakeup.Event, ok bool) {
	f := strings.Fields(re.Error())
	switch {
	case len(f) == 3 && (f[0] == "MOVED" || f[0] == "ASK"):
		// A SSUBSCRIBE reached a node that does not serve the slot.
		slot, err := strconv.Atoi(f[1])
		if err != nil {
			slot = -1
		}
		return wakeup.Event{Kind: wakeup.Moved, Slot: slot}, true
	case len(f) > 0 && f[0] == "CROSSSLOT":
		return wakeup.Event{}, false
	default:
		// Refused (e.g. an ACL, or a server without sharded pub/sub): the
		// channels never confirmed get the error; the others stay.
		return wakeup.Event{Kind: wakeup.Refused, Err: fmt.Errorf("redisbackend: subscription refused: %w", re)}, true
	}
}
