package rueidisbackend

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/internal/redis/wakeup"
)

// tracker hears the writes of other processes to the Backend's inbox keys
// and delivers their messages (Tracking mode).
//
// The client tracks in broadcasting mode: CLIENT TRACKING ON BCAST PREFIX
// <the Backend's inbox base> NOLOOP. Redis then tells the connection of
// every write, by another connection, to a key that starts with that
// prefix: the Backend's inbox keys, which no other process reads. It
// tracks nothing else: no key a step reads, so a lock's changes reach no
// process, and the uncontended path costs the server no tracking at all.
//
// A script that wakes one of this Backend's waiters pushes the message to
// the inbox key of the id's slot. The invalidation of that key makes the
// tracker drain it (LPOP with a count) on its own goroutine, and deliver
// the messages through the Inbox. The drain is a plain command of this
// connection, which NOLOOP keeps from coming back. A script's write is not
// kept back (Redis 7.0 ignores NOLOOP for scripts in broadcasting mode),
// so the Backend's own steps' wake-ups for its own waiters come too.
//
// A nil invalidation is rueidis telling that a connection is gone or the
// server flushed everything. A connection that is gone is dialled again on
// the next command, and a write while it was down told nobody. So the
// tracker PINGs through the client until the server answers, drains every
// inbox that serves a subscribed id, and only then delivers Wake{ID, All:
// true} to every subscribed id, as the pub/sub mode does on
// re-subscription. A re-check sent while the server is unreachable would
// fail the waiting call instead. The drain delivers what was written to
// the inboxes meanwhile; the Wake{All} covers what the server lost. It is
// left out when the connWatch shows that every connection that closed
// listened for nothing, or that another connection to its node listened
// all along (the spare connections a cluster client's start-up closes).
type tracker struct {
	base  string                       // every inbox key starts with it
	inbox *wakeup.Inbox                // the Backend's: registrations, delivery
	watch *connWatch                   // the client's connections; nil: every nil invalidation is a loss
	user  func([]rueidis.RedisMessage) // the caller's own OnInvalidations, if any
	ping  func(context.Context) error
	drain func(context.Context, []string) ([][]string, error)

	mu         sync.Mutex
	pending    map[string]bool // inbox keys written since their last drain
	started    bool            // the drain goroutine runs
	closed     bool
	recovering bool // a recover goroutine runs
	again      bool // another nil invalidation came while it ran
	kick       chan struct{}
	life       wakeup.Life    // ends at close; bounds the commands
	wg         sync.WaitGroup // the drain and recover goroutines
}

// pingTimeout bounds one PING of the recovery, and one drain.
const pingTimeout = 5 * time.Second

func newTracker(base string, inbox *wakeup.Inbox, watch *connWatch, user func([]rueidis.RedisMessage)) *tracker {
	return &tracker{
		base: base, inbox: inbox, watch: watch, user: user,
		pending: make(map[string]bool),
		kick:    make(chan struct{}, 1),
		life:    wakeup.NewLife(),
	}
}

// trackingOptions returns the CLIENT TRACKING options of a Backend whose
// inbox keys start with base.
func trackingOptions(base string) []string {
	return []string{"BCAST", "PREFIX", base, "NOLOOP"}
}

// start sets how the tracker checks that the server answers again, and
// how it drains inbox keys, once the client exists.
func (t *tracker) start(ping func(context.Context) error, drain func(context.Context, []string) ([][]string, error)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ping, t.drain = ping, drain
	if !t.closed && !t.started {
		t.started = true
		t.wg.Add(1)
		go t.drainLoop()
	}
}

// onInvalidations is the client's OnInvalidations. rueidis calls it on the
// connection's reading goroutine, so it must not block: it only notes the
// inbox keys to drain and wakes the drain goroutine.
func (t *tracker) onInvalidations(msgs []rueidis.RedisMessage) {
	if t.user != nil {
		t.user(msgs)
	}
	if msgs == nil {
		t.lost()
		return
	}
	t.mu.Lock()
	n := 0
	for _, m := range msgs {
		key, err := m.ToString()
		if err != nil || !strings.HasPrefix(key, t.base) {
			continue
		}
		t.pending[key] = true
		n++
	}
	t.mu.Unlock()
	if n > 0 {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// drainLoop drains the written inbox keys, all of them in one round trip,
// until close. A drain that failed is tried again after a growing delay;
// meanwhile the messages wait in their keys.
func (t *tracker) drainLoop() {
	defer t.wg.Done()
	delay := time.Duration(0)
	for {
		select {
		case <-t.life.Done():
			return
		case <-t.kick:
		}
		t.mu.Lock()
		keys := make([]string, 0, len(t.pending))
		for k := range t.pending {
			keys = append(keys, k)
		}
		clear(t.pending)
		t.mu.Unlock()
		if len(keys) == 0 {
			continue
		}
		if err := t.drainNow(keys); err == nil {
			delay = 0
			continue
		}
		t.mu.Lock()
		for _, k := range keys {
			t.pending[k] = true
		}
		t.mu.Unlock()
		delay = wakeup.NextDelay(delay)
		if !wakeup.Sleep(t.life.Done(), delay) {
			return
		}
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// drainNow drains keys and delivers their messages.
func (t *tracker) drainNow(keys []string) error {
	ctx, cancel := context.WithTimeout(t.life.Ctx(), pingTimeout)
	msgs, err := t.drain(ctx, keys)
	cancel()
	for _, ms := range msgs {
		for _, m := range ms {
			t.inbox.Message(m)
		}
	}
	return err
}

// lost starts the recovery after a nil invalidation (or asks the running
// one to check again).
func (t *tracker) lost() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.ping == nil {
		return
	}
	if t.recovering {
		t.again = true
		return
	}
	t.recovering = true
	t.wg.Add(1)
	go t.recover()
}

// recover PINGs until the server answers on a new connection, drains the
// inboxes of the subscribed ids, then wakes every subscribed id with All
// if an invalidation may have been lost.
func (t *tracker) recover() {
	defer t.wg.Done()
	delay := time.Duration(0)
	for {
		if delay > 0 && !wakeup.Sleep(t.life.Done(), delay) {
			return
		}
		t.mu.Lock()
		t.again = false
		t.mu.Unlock()
		ctx, cancel := context.WithTimeout(t.life.Ctx(), pingTimeout)
		err := t.ping(ctx)
		cancel()
		if err == nil {
			if keys := t.inbox.Channels(); len(keys) > 0 {
				err = t.drainNow(keys)
			}
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return
		}
		if err == nil && !t.again {
			t.recovering = false
			t.mu.Unlock()
			if t.watch == nil || t.watch.lost() {
				t.inbox.Resubscribed("")
			}
			return
		}
		t.mu.Unlock()
		if err == nil {
			delay = 0 // lost again meanwhile: ping again at once
		} else {
			delay = wakeup.NextDelay(delay)
		}
	}
}

// close stops delivering and waits for the goroutines.
func (t *tracker) close() {
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		t.life.End()
	}
	t.mu.Unlock()
	t.wg.Wait()
}
