package rueidisbackend

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
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
//
// The loop that drains and recovers is a wakeup.Supervisor with one
// channel (trackChannel) on one "connection" (trackConn): connecting is
// the PING, subscribing the drain of the subscribed ids' inboxes, serving
// the drains of the written keys until a nil invalidation or a failed
// drain; the Supervisor backs off between attempts, and its Wake{All} of a
// confirmation after the first is the recovery's.
type tracker struct {
	base  string                       // every inbox key starts with it
	inbox *wakeup.Inbox                // the Backend's: registrations, delivery
	watch *connWatch                   // the client's connections; nil: every nil invalidation is a loss
	user  func([]rueidis.RedisMessage) // the caller's own OnInvalidations, if any
	ping  func(context.Context) error
	drain func(context.Context, []string) ([][]string, error)
	sup   *wakeup.Supervisor // its one "connection" is trackConn

	mu      sync.Mutex
	pending map[string]bool // inbox keys written since their last drain
	lost    bool            // a nil invalidation came since the last recovery
	opened  bool            // the first trackConn was opened
	closed  bool
	kick    chan struct{} // capacity 1: keys to drain
	lostc   chan struct{} // capacity 1: a nil invalidation
}

// pingTimeout bounds one PING of the recovery, and one drain.
const pingTimeout = 5 * time.Second

// trackChannel names the one entry of the tracker's Supervisor: every
// inbox key the Backend tracks.
const trackChannel = "tracked inbox keys"

func newTracker(base string, inbox *wakeup.Inbox, watch *connWatch, user func([]rueidis.RedisMessage)) *tracker {
	return &tracker{
		base: base, inbox: inbox, watch: watch, user: user,
		pending: make(map[string]bool),
		kick:    make(chan struct{}, 1),
		lostc:   make(chan struct{}, 1),
	}
}

// trackingOptions returns the CLIENT TRACKING options of a Backend whose
// inbox keys start with base.
func trackingOptions(base string) []string {
	return []string{"BCAST", "PREFIX", base, "NOLOOP"}
}

// start sets how the tracker checks that the server answers again, and
// how it drains inbox keys, once the client exists, and starts its
// Supervisor.
func (t *tracker) start(ping func(context.Context) error, drain func(context.Context, []string) ([][]string, error)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.sup != nil {
		return
	}
	t.ping, t.drain = ping, drain
	t.sup = wakeup.NewSupervisor(t, wakeup.SupervisorOptions{})
	_ = t.sup.Keep("", trackChannel, t.recovered)
}

// onInvalidations is the client's OnInvalidations. rueidis calls it on the
// connection's reading goroutine, so it must not block: it only notes the
// inbox keys to drain (or the loss) and wakes the Supervisor's goroutine.
func (t *tracker) onInvalidations(msgs []rueidis.RedisMessage) {
	if t.user != nil {
		t.user(msgs)
	}
	if msgs == nil {
		t.mu.Lock()
		started := t.sup != nil && !t.closed
		t.lost = t.lost || started
		t.mu.Unlock()
		if started {
			signal(t.lostc)
		}
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
		signal(t.kick)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Open is the tracker's Supervisor connecting: a PING through the client,
// until the server answers (a connection that is gone is dialled again on
// the next command). The first one sends nothing: the client has just
// connected.
func (t *tracker) Open(ctx context.Context, _ string, events func(wakeup.Event)) (wakeup.Conn, error) {
	t.mu.Lock()
	first := !t.opened
	t.opened = true
	t.mu.Unlock()
	if !first {
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err := t.ping(pctx)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	return trackConn{t, events}, nil
}

// recovered gets the Wake{All} of the tracker's entry, confirmed again
// after a reconnect. After a nil invalidation it wakes every subscribed
// id, unless the connWatch shows that no invalidation can have been lost.
func (t *tracker) recovered(backend.Wake) {
	t.mu.Lock()
	lost := t.lost
	t.lost = false
	t.mu.Unlock()
	if lost && (t.watch == nil || t.watch.lost()) {
		t.inbox.Resubscribed("")
	}
}

// trackConn is the tracker's "connection": subscribing drains the inboxes
// that serve a subscribed id, and the written keys; serving drains the
// keys as they are written, until a nil invalidation or a drain fails.
type trackConn struct {
	t      *tracker
	events func(wakeup.Event)
}

func (c trackConn) Subscribe(ctx context.Context, channels []string) error {
	t := c.t
	if err := t.drainNow(ctx, t.inbox.Channels()); err != nil {
		return err
	}
	if err := t.drainPending(ctx); err != nil {
		return err
	}
	for _, ch := range channels {
		c.events(wakeup.Event{Kind: wakeup.Confirmed, Channel: ch})
	}
	return nil
}

func (trackConn) Unsubscribe(context.Context, []string) error { return nil }

func (trackConn) Close() {}

func (c trackConn) Serve(ctx context.Context) error {
	t := c.t
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.lostc:
			return nil // connect again at once: ping, drain, wake all
		case <-t.kick:
			if err := t.drainPending(ctx); err != nil {
				return err
			}
		}
	}
}

// drainPending drains the written inbox keys, all of them in one round
// trip; a failed drain leaves them pending.
func (t *tracker) drainPending(ctx context.Context) error {
	t.mu.Lock()
	keys := make([]string, 0, len(t.pending))
	for k := range t.pending {
		keys = append(keys, k)
	}
	clear(t.pending)
	t.mu.Unlock()
	err := t.drainNow(ctx, keys)
	if err != nil {
		t.mu.Lock()
		for _, k := range keys {
			t.pending[k] = true
		}
		t.mu.Unlock()
	}
	return err
}

// drainNow drains keys and delivers their messages.
func (t *tracker) drainNow(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	msgs, err := t.drain(ctx, keys)
	cancel()
	for _, ms := range msgs {
		for _, m := range ms {
			t.inbox.Message(m)
		}
	}
	return err
}

// close stops delivering and waits for the goroutines.
func (t *tracker) close() {
	t.mu.Lock()
	t.closed = true
	sup := t.sup
	t.mu.Unlock()
	if sup != nil {
		_ = sup.Close()
	}
}
