package redisbackend

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/wakeup"
)

// subscriber is a Backend's one pub/sub connection, shared by every id and
// reference-counted per channel: SUBSCRIBE, or SSUBSCRIBE (sharded) on a
// client that is not a cluster client (one server, or a failover client),
// where one connection can hold every shard channel.
//
// Confirmation: go-redis's PubSub.Subscribe only writes SUBSCRIBE, so each
// channel's entry waits for the server's "subscribe" reply, which arrives in
// order with the messages on the receive goroutine. An entry is never
// unsubscribed while its SUBSCRIBE is unconfirmed (when its last subscriber
// gives up before the confirmation, the receive goroutine unsubscribes once
// it arrives), so a confirmation always belongs to the entry in the map.
//
// Reconnects: go-redis re-subscribes every channel on its new connection;
// a "subscribe" reply for an entry that is already confirmed is such a
// re-subscription, and becomes Wake{ID, All: true}: messages may have been
// lost while the connection was down.
type subscriber struct {
	client  Client
	sharded bool // SSUBSCRIBE / SUNSUBSCRIBE instead of SUBSCRIBE / UNSUBSCRIBE

	mu      sync.Mutex
	ps      *redis.PubSub // nil until the first subscribe
	chans   map[string]*entry
	closed  bool
	closing chan struct{} // closed by close
	done    chan struct{} // closed when the receive goroutine has returned
}

type entry struct {
	wakeup.Entry
}

// shardSubscriber is a client that can open a sharded pub/sub connection.
type shardSubscriber interface {
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

func newSubscriber(client Client, sharded bool) *subscriber {
	return &subscriber{
		client:  client,
		sharded: sharded,
		chans:   make(map[string]*entry),
		closing: make(chan struct{}),
	}
}

func (s *subscriber) subscribe(ctx context.Context, id, channel string, fn func(backend.Wake)) (func(), error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, backend.ErrClosed
	}
	if s.ps == nil {
		// An empty PubSub connects on first use; the receive goroutine
		// lives until close.
		if s.sharded {
			s.ps = s.client.(shardSubscriber).SSubscribe(context.Background())
		} else {
			s.ps = s.client.Subscribe(context.Background())
		}
		s.done = make(chan struct{})
		// go-redis pings a quiet pub/sub connection to find a dead one;
		// its default (every 3 s) would be the only traffic of an idle
		// waiter's process. A lost wake-up is caught by the core's
		// heartbeat anyway, so ping rarely.
		go s.receive(s.ps.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(pubsubHealthCheck)))
	}
	e := s.chans[channel]
	if e == nil {
		e = &entry{Entry: wakeup.NewEntry(id, channel)}
		if err := s.sub(ctx, channel); err != nil {
			// go-redis keeps the channel in its re-subscribe set even when
			// the write failed; take it out again.
			_ = s.unsub(channel)
			s.mu.Unlock()
			return nil, err
		}
		s.chans[channel] = e
	}
	return e.Join(ctx, fn, s.mu.Unlock, s.closing, func(key uint64) { s.unsubscribe(e, key) })
}

func (s *subscriber) unsubscribe(e *entry, key uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Fns.Remove(key) > 0 || !e.Settled() || s.chans[e.Channel] != e {
		return // still used, or receive unsubscribes on confirmation
	}
	delete(s.chans, e.Channel)
	if !s.closed {
		_ = s.unsub(e.Channel)
	}
}

func (s *subscriber) sub(ctx context.Context, channel string) error {
	if s.sharded {
		return s.ps.SSubscribe(ctx, channel)
	}
	return s.ps.Subscribe(ctx, channel)
}

func (s *subscriber) unsub(channel string) error {
	if s.sharded {
		return s.ps.SUnsubscribe(context.Background(), channel)
	}
	return s.ps.Unsubscribe(context.Background(), channel)
}

// receive dispatches messages and confirmations until go-redis closes ch.
func (s *subscriber) receive(ch <-chan any) {
	defer close(s.done)
	for m := range ch {
		switch m := m.(type) {
		case *redis.Message:
			wakeup.Receive(&s.mu, func() *wakeup.Entry {
				if e := s.chans[m.Channel]; e != nil && e.Settled() {
					return &e.Entry
				}
				return nil
			}, m.Payload)
		case *redis.Subscription:
			if m.Kind != "subscribe" && m.Kind != "ssubscribe" {
				continue
			}
			s.mu.Lock()
			e := s.chans[m.Channel]
			if e == nil {
				s.mu.Unlock()
				continue
			}
			fns, again := e.Confirm()
			if !again && e.Fns.Len() == 0 {
				delete(s.chans, e.Channel)
				if !s.closed {
					_ = s.unsub(e.Channel)
				}
			}
			s.mu.Unlock()
			fns.Deliver(e.All()) // a re-subscription after a reconnect
		}
	}
}

func (s *subscriber) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return backend.ErrClosed
	}
	s.closed = true
	close(s.closing)
	ps, done := s.ps, s.done
	s.mu.Unlock()
	if ps == nil {
		return nil
	}
	_ = ps.Close() // an error here is the dead connection's; nothing to do
	<-done
	return nil
}

// pubsubHealthCheck is how often go-redis pings the shared pub/sub
// connection when no message came (its default is 3 s).
const pubsubHealthCheck = 30 * time.Second
