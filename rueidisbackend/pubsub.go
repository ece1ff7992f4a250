package rueidisbackend

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/wakeup"
)

// pubsub is a Backend's wake-up source in PubSub mode: a wakeup.Supervisor
// on connections of the client, each channel reference-counted by its
// subscribers. The classic one (newPubsub) holds every channel on one
// dedicated connection. The sharded one (newSpubsub) sends each channel's
// SSUBSCRIBE through client.Receive, which rueidis sends on its connection
// to the node that serves the channel's slot (on Redis Cluster; the one
// server otherwise), following MOVED, multiplexing every subscription of a
// node on one connection: so each channel is a "connection" of the
// Supervisor of its own (a shard channel cannot share an SSUBSCRIBE with a
// channel of another slot).
//
// The Supervisor connects again after a failure, and after a node dropped
// a shard channel (its slot moved), subscribes every channel again, and
// delivers Wake{ID, All: true} for it: messages may have been lost in
// between.
type pubsub struct {
	*wakeup.Supervisor
}

func newPubsub(client rueidis.Client) *pubsub {
	// A connection that fails ends the first Subscribe of a channel with
	// its error: a server that is gone does not make Subscribe hang.
	return &pubsub{wakeup.NewSupervisor(dedicatedDialer{client}, wakeup.SupervisorOptions{FailUnconfirmed: true})}
}

func (s *pubsub) subscribe(ctx context.Context, id, channel string, fn func(backend.Wake)) (func(), error) {
	return s.Subscribe(ctx, id, channel, fn)
}

// close ends the subscriptions and waits for the goroutines; the
// connections go back to the client without subscriptions.
func (s *pubsub) close() { _ = s.Close() }

// dedicatedDialer opens a dedicated connection of the client.
type dedicatedDialer struct{ client rueidis.Client }

func (d dedicatedDialer) Open(_ context.Context, _ string, events func(wakeup.Event)) (wakeup.Conn, error) {
	dc, release := d.client.Dedicate()
	c := &dedicatedConn{dc: dc, release: release, events: events}
	c.errs = dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			events(wakeup.Event{Kind: wakeup.Message, Channel: m.Channel, Payload: m.Message})
		},
		OnSubscription: func(s rueidis.PubSubSubscription) {
			if s.Kind == "subscribe" {
				events(wakeup.Event{Kind: wakeup.Confirmed, Channel: s.Channel})
			}
		},
	})
	return c, nil
}

// dedicatedConn is a dedicated connection with pub/sub hooks.
type dedicatedConn struct {
	dc      rueidis.DedicatedClient
	release func()
	errs    <-chan error
	events  func(wakeup.Event)
}

func (c *dedicatedConn) Subscribe(ctx context.Context, channels []string) error {
	err := c.dc.Do(ctx, c.dc.B().Subscribe().Channel(channels...).Build()).Error()
	if _, ok := rueidis.IsRedisErr(err); ok {
		for _, ch := range channels { // refused (e.g. an ACL): the connection is fine
			c.events(wakeup.Event{Kind: wakeup.Refused, Channel: ch, Err: err})
		}
		return nil
	}
	return err
}

func (c *dedicatedConn) Unsubscribe(ctx context.Context, channels []string) error {
	return c.dc.Do(ctx, c.dc.B().Unsubscribe().Channel(channels...).Build()).Error()
}

func (c *dedicatedConn) Serve(ctx context.Context) error {
	select {
	case err, ok := <-c.errs:
		if !ok || err == nil {
			err = errors.New("rueidisbackend: pub/sub connection closed")
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *dedicatedConn) Close() {
	c.dc.SetPubSubHooks(rueidis.PubSubHooks{})
	c.release()
}

// unsubscribeTimeout bounds the SUNSUBSCRIBE of a channel nobody waits on.
const unsubscribeTimeout = 5 * time.Second

func newSpubsub(client rueidis.Client) *pubsub {
	return &pubsub{wakeup.NewSupervisor(receiveDialer{client}, wakeup.SupervisorOptions{})}
}

// receiveDialer makes a "connection" of each shard channel: its
// client.Receive.
type receiveDialer struct{ client rueidis.Client }

// Node names the channel itself: rueidis routes its SSUBSCRIBE.
func (receiveDialer) Node(_ context.Context, channel string, _ bool) (string, error) {
	return channel, nil
}

func (d receiveDialer) Open(ctx context.Context, channel string, events func(wakeup.Event)) (wakeup.Conn, error) {
	rctx, cancel := context.WithCancel(ctx)
	return &receiveConn{client: d.client, channel: channel, events: events, ctx: rctx, cancel: cancel,
		start: make(chan struct{}), served: make(chan struct{})}, nil
}

// receiveConn is the SSUBSCRIBE of one channel, which lasts as long as its
// client.Receive.
type receiveConn struct {
	client  rueidis.Client
	channel string
	events  func(wakeup.Event)
	ctx     context.Context    // the Receive's
	cancel  context.CancelFunc // ends the Receive
	start   chan struct{}      // closed by Subscribe
	served  chan struct{}      // closed when Serve returns

	mu      sync.Mutex
	started bool
	failed  bool // the Receive ended by itself: the server has no subscription
	left    bool // SUNSUBSCRIBE sent
}

func (c *receiveConn) Subscribe(context.Context, []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		c.started = true
		close(c.start)
	}
	return nil
}

// Unsubscribe ends the Receive and tells the server, so that a client the
// caller keeps (NewWithClient) carries no subscription of ours.
func (c *receiveConn) Unsubscribe(context.Context, []string) error {
	c.cancel()
	<-c.served
	c.leave()
	return nil
}

func (c *receiveConn) leave() {
	c.mu.Lock()
	send := c.started && !c.failed && !c.left
	c.left = true
	c.mu.Unlock()
	if !send {
		return
	}
	uctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
	defer cancel()
	_ = c.client.Do(uctx, c.client.B().Sunsubscribe().Channel(c.channel).Build()).Error()
}

func (c *receiveConn) Serve(context.Context) error {
	defer close(c.served)
	select {
	case <-c.start:
	case <-c.ctx.Done():
		return nil
	}
	hctx := rueidis.WithOnSubscriptionHook(c.ctx, func(sub rueidis.PubSubSubscription) {
		if sub.Kind == "ssubscribe" && sub.Channel == c.channel {
			c.events(wakeup.Event{Kind: wakeup.Confirmed, Channel: c.channel})
		}
	})
	err := c.client.Receive(hctx, c.client.B().Ssubscribe().Channel(c.channel).Build(), func(m rueidis.PubSubMessage) {
		c.events(wakeup.Event{Kind: wakeup.Message, Channel: c.channel, Payload: m.Message})
	})
	c.mu.Lock()
	ours := c.ctx.Err() != nil
	c.failed = !ours
	c.mu.Unlock()
	switch {
	case ours, err == nil:
		// Ended here, or the node dropped the channel (its slot moved):
		// subscribe again at once, on the node that serves it now.
		return nil
	}
	if re, ok := rueidis.IsRedisErr(err); ok && !redirect(re) {
		// Refused (an ACL, a server without sharded pub/sub): the first
		// subscriber gets the error.
		c.events(wakeup.Event{Kind: wakeup.Refused, Channel: c.channel, Err: err})
	}
	return err
}

// Close ends the Receive; on close of the Backend the server is told.
func (c *receiveConn) Close() {
	c.cancel()
	<-c.served
	c.leave()
}

// redirect reports whether a Redis error reply tells to try elsewhere or
// later (a slot that moved, a cluster or server not ready).
func redirect(re *rueidis.RedisError) bool {
	_, moved := re.IsMoved()
	_, ask := re.IsAsk()
	return moved || ask || re.IsTryAgain() || re.IsClusterDown() || re.IsLoading()
}
