package rueidisbackend

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/wakeup"
)

// spubsub holds a Backend's sharded subscriptions (PubSub mode with
// Options.ShardedPubSub). Each channel is one SSUBSCRIBE sent through
// client.Receive. rueidis sends it on its connection to the node that
// serves the channel's slot (on Redis Cluster; the one server otherwise),
// following MOVED. It multiplexes every subscription of a node on one
// connection, so this costs no connection per channel. It costs one
// goroutine per subscribed channel (a shard channel cannot share an
// SSUBSCRIBE with a channel of another slot), reference-counted by the
// Backend's waiters.
//
// A Receive ends when its connection breaks, and when the node stops
// serving the slot (a slot migration or failover: the node sends
// "sunsubscribe"). The goroutine then subscribes again: at once after a
// slot move, with a growing delay after a failure. Every confirmation
// after the first one becomes Wake{ID, All: true}: messages may have been
// lost meanwhile. Subscribe returns after the first
// confirmation. The goroutine of a channel nobody waits on sends
// SUNSUBSCRIBE and ends; a new subscription of the same channel waits for
// that, so that the old SUNSUBSCRIBE never undoes the new SSUBSCRIBE.
type spubsub struct {
	client rueidis.Client
	life   wakeup.Life // ends at close

	mu       sync.Mutex
	chans    map[string]*spEntry
	retiring map[string]*spEntry // dropped, still unsubscribing
	closed   bool
	wg       sync.WaitGroup
}

type spEntry struct {
	wakeup.Entry
	cancel context.CancelFunc // ends the Receive once nobody waits
	prev   <-chan struct{}    // done of the entry it replaced, or nil
	done   chan struct{}      // closed when its goroutine has unsubscribed
}

// unsubscribeTimeout bounds the SUNSUBSCRIBE of a channel nobody waits on.
const unsubscribeTimeout = 5 * time.Second

func newSpubsub(client rueidis.Client) *spubsub {
	return &spubsub{client: client, life: wakeup.NewLife(), chans: map[string]*spEntry{}, retiring: map[string]*spEntry{}}
}

func (s *spubsub) subscribe(ctx context.Context, id, channel string, fn func(backend.Wake)) (func(), error) {
	s.mu.Lock()
	e := s.chans[channel]
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, backend.ErrClosed
	case e == nil:
		// A new entry with a goroutine of its own, which waits for the
		// one it replaces (retiring) to have unsubscribed.
		rctx, cancel := context.WithCancel(s.life.Ctx())
		e = &spEntry{Entry: wakeup.NewEntry(id, channel), cancel: cancel, done: make(chan struct{})}
		if old := s.retiring[channel]; old != nil {
			e.prev = old.done
		}
		s.chans[channel] = e
		s.wg.Add(1)
		go s.run(e, rctx)
	}
	return e.Join(ctx, fn, s.mu.Unlock, s.life.Done(), func(key uint64) { s.unsubscribe(e, key) })
}

func (s *spubsub) unsubscribe(e *spEntry, key uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Fns.Remove(key) == 0 && s.chans[e.Channel] == e {
		delete(s.chans, e.Channel)
		s.retiring[e.Channel] = e
		e.cancel()
	}
}

// run keeps e's channel subscribed until e is dropped or close.
func (s *spubsub) run(e *spEntry, ctx context.Context) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		if s.retiring[e.Channel] == e {
			delete(s.retiring, e.Channel)
		}
		s.mu.Unlock()
		close(e.done)
	}()
	if e.prev != nil {
		select {
		case <-e.prev:
		case <-ctx.Done():
			return
		}
	}
	delay := time.Duration(0)
	sent := false
	for ctx.Err() == nil {
		hctx := rueidis.WithOnSubscriptionHook(ctx, func(sub rueidis.PubSubSubscription) {
			if sub.Kind == "ssubscribe" && sub.Channel == e.Channel {
				s.confirm(e)
			}
		})
		sent = true
		start := time.Now()
		err := s.client.Receive(hctx, s.client.B().Ssubscribe().Channel(e.Channel).Build(), func(m rueidis.PubSubMessage) {
			s.message(e, m)
		})
		if ctx.Err() != nil {
			break
		}
		if err == nil {
			// The node dropped the channel (its slot moved): subscribe
			// again, on the node that serves it now.
			delay = 0
			continue
		}
		if re, ok := rueidis.IsRedisErr(err); ok && !redirect(re) {
			// Refused (an ACL, a server without sharded pub/sub): the
			// first subscriber gets the error.
			if s.fail(e, err) {
				return
			}
		}
		if time.Since(start) > wakeup.MaxDelay {
			delay = 0
		}
		delay = wakeup.NextDelay(delay)
		wakeup.Sleep(ctx.Done(), delay)
	}
	if !sent {
		return
	}
	// Dropped or closed: tell the server, so that a client the caller
	// keeps (NewWithClient) carries no subscription of ours.
	uctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
	defer cancel()
	_ = s.client.Do(uctx, s.client.B().Sunsubscribe().Channel(e.Channel).Build()).Error()
}

// confirm handles a confirmation of e's SSUBSCRIBE; it runs on rueidis's
// reading goroutine and does not block.
func (s *spubsub) confirm(e *spEntry) {
	s.mu.Lock()
	fns, again := e.Confirm()
	closed := s.closed
	s.mu.Unlock()
	if again && !closed {
		fns.Deliver(e.All()) // subscribed again: on a new connection or another node
	}
}

func (s *spubsub) message(e *spEntry, m rueidis.PubSubMessage) {
	wakeup.Receive(&s.mu, func() *wakeup.Entry {
		if s.closed {
			return nil
		}
		return &e.Entry
	}, m.Message)
}

// fail ends e's first Subscribe with err and reports whether e is done
// (it had never been confirmed; its subscribers get err and leave).
func (s *spubsub) fail(e *spEntry, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !e.Fail(err) {
		return false
	}
	if s.chans[e.Channel] == e {
		delete(s.chans, e.Channel)
	}
	return true
}

// close ends every subscription and waits for the goroutines, which
// unsubscribe (each bounded by unsubscribeTimeout).
func (s *spubsub) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.life.End()
	s.wg.Wait()
}

// redirect reports whether a Redis error reply tells to try elsewhere or
// later (a slot that moved, a cluster or server not ready).
func redirect(re *rueidis.RedisError) bool {
	_, moved := re.IsMoved()
	_, ask := re.IsAsk()
	return moved || ask || re.IsTryAgain() || re.IsClusterDown() || re.IsLoading()
}
