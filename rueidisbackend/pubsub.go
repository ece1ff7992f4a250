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

// pubsub is a Backend's one pub/sub connection (PubSub mode): a dedicated
// connection of the client, shared by every id and reference-counted per
// channel.
//
// One goroutine, the supervisor, owns the connection and sends every
// SUBSCRIBE and UNSUBSCRIBE, one at a time, each waiting for the server's
// confirmation. So the order on the wire is the order of the decisions,
// and a channel's confirmation always belongs to the entry that is in the
// map. An entry leaves the map only in the supervisor, after its SUBSCRIBE
// was confirmed (or failed). A new entry for the same channel is
// subscribed after the old one's UNSUBSCRIBE.
//
// Reconnects: when the connection breaks (rueidis pings an idle one), the
// supervisor takes a new dedicated connection and subscribes every channel
// again; a confirmation for an entry that was confirmed before becomes
// Wake{ID, All: true}, since messages may have been lost in between.
type pubsub struct {
	client rueidis.Client
	life   wakeup.Life // ends at close; bounds the supervisor's commands

	mu      sync.Mutex
	chans   map[string]*psEntry
	started bool
	closed  bool
	kick    chan struct{} // capacity 1: the supervisor has work
	done    chan struct{} // closed when the supervisor has returned
}

type psEntry struct {
	wakeup.Entry      // no Fns = idle: the supervisor unsubscribes it
	sent         bool // SUBSCRIBE sent on the current connection
}

func newPubsub(client rueidis.Client) *pubsub {
	return &pubsub{
		client: client,
		life:   wakeup.NewLife(),
		chans:  make(map[string]*psEntry),
		kick:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
}

func (s *pubsub) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *pubsub) subscribe(ctx context.Context, id, channel string, fn func(backend.Wake)) (func(), error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, backend.ErrClosed
	}
	if !s.started {
		s.started = true
		go s.supervise()
	}
	e := s.chans[channel]
	if e == nil {
		e = &psEntry{Entry: wakeup.NewEntry(id, channel)}
		s.chans[channel] = e
		s.wake()
	}
	return e.Join(ctx, fn, s.mu.Unlock, s.life.Done(), func(key uint64) { s.unsubscribe(e, key) })
}

func (s *pubsub) unsubscribe(e *psEntry, key uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Fns.Remove(key) == 0 && s.chans[e.Channel] == e {
		s.wake() // the supervisor unsubscribes it unless it is used again by then
	}
}

// supervise keeps a connection and its subscriptions until close.
func (s *pubsub) supervise() {
	defer close(s.done)
	delay := time.Duration(0)
	for {
		if delay > 0 {
			if !wakeup.Sleep(s.life.Done(), delay) {
				return
			}
		}
		if s.life.Ended() {
			return
		}
		dc, release := s.client.Dedicate()
		errs := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: s.onMessage, OnSubscription: s.onSubscription})
		s.mu.Lock()
		for _, e := range s.chans {
			e.sent = false
		}
		s.mu.Unlock()
		start := time.Now()
		err := s.serve(dc, errs)
		dc.SetPubSubHooks(rueidis.PubSubHooks{})
		release()
		if s.life.Ended() {
			return
		}
		// Callers still waiting for a first confirmation get the error; the
		// subscriptions already confirmed are restored on the next connection.
		s.failUnconfirmed(err)
		if time.Since(start) > wakeup.MaxDelay {
			delay = 0 // it worked for a while: retry soon
		}
		delay = wakeup.NextDelay(delay)
	}
}

// serve sends the pending SUBSCRIBEs and UNSUBSCRIBEs until the connection
// fails (it returns the error) or close.
func (s *pubsub) serve(dc rueidis.DedicatedClient, errs <-chan error) error {
	for {
		subs, unsubs := s.pending()
		if len(unsubs) > 0 {
			if err := dc.Do(s.life.Ctx(), dc.B().Unsubscribe().Channel(unsubs...).Build()).Error(); err != nil {
				return err
			}
		}
		if len(subs) > 0 {
			err := dc.Do(s.life.Ctx(), dc.B().Subscribe().Channel(subs...).Build()).Error()
			if _, ok := rueidis.IsRedisErr(err); ok {
				s.fail(subs, err) // refused (e.g. an ACL): the connection is fine
			} else if err != nil {
				return err
			}
		}
		select {
		case <-s.kick:
		case err, ok := <-errs:
			if !ok || err == nil {
				err = errors.New("rueidisbackend: pub/sub connection closed")
			}
			return err
		case <-s.life.Done():
			return backend.ErrClosed
		}
	}
}

// pending returns the channels to subscribe on the current connection and
// the idle ones to unsubscribe, which it removes from the map.
func (s *pubsub) pending() (subs, unsubs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch, e := range s.chans {
		if e.Fns.Len() == 0 {
			delete(s.chans, ch)
			if e.sent {
				unsubs = append(unsubs, ch)
			}
			continue
		}
		if !e.sent {
			e.sent = true
			subs = append(subs, ch)
		}
	}
	return subs, unsubs
}

// fail ends the entries of channels with err.
func (s *pubsub) fail(channels []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range channels {
		if e := s.chans[ch]; e != nil && e.Fail(err) {
			delete(s.chans, ch)
		}
	}
}

// failUnconfirmed ends every entry that was never confirmed with err.
func (s *pubsub) failUnconfirmed(err error) {
	s.mu.Lock()
	var chs []string
	for ch, e := range s.chans {
		if !e.Settled() {
			chs = append(chs, ch)
		}
	}
	s.mu.Unlock()
	s.fail(chs, err)
}

func (s *pubsub) onMessage(m rueidis.PubSubMessage) {
	wakeup.Receive(&s.mu, func() *wakeup.Entry {
		if e := s.chans[m.Channel]; e != nil && e.Settled() && !s.closed {
			return &e.Entry
		}
		return nil
	}, m.Message)
}

func (s *pubsub) onSubscription(sub rueidis.PubSubSubscription) {
	if sub.Kind != "subscribe" {
		return
	}
	s.mu.Lock()
	e := s.chans[sub.Channel]
	if e == nil || s.closed {
		s.mu.Unlock()
		return
	}
	fns, again := e.Confirm()
	s.mu.Unlock()
	if again {
		fns.Deliver(e.All()) // a re-subscription on a new connection
	}
}

// close stops the supervisor and waits for it; its connection goes back
// to the client's pool without subscriptions.
func (s *pubsub) close() {
	s.mu.Lock()
	s.closed = true
	started := s.started
	s.life.End()
	s.mu.Unlock()
	if started {
		<-s.done
	}
}
