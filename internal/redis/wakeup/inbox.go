package wakeup

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

// ParseInbox returns the wake-up that an inbox message carries. The
// scripts send "<n>:<enc(id)><payload>": n is the length of the id's
// encoding (its keys' hash tag, see package keys) and payload is one of
// the wake-up payloads (see Parse). ok is false for any other message.
func ParseInbox(msg string) (w backend.Wake, ok bool) {
	ns, rest, found := strings.Cut(msg, ":")
	if !found || ns == "" || ns[0] == '+' {
		return backend.Wake{}, false
	}
	n, err := strconv.Atoi(ns)
	if err != nil || n < 1 || n > len(rest) {
		return backend.Wake{}, false
	}
	id, err := keys.Decode(rest[:n])
	if err != nil {
		return backend.Wake{}, false
	}
	return Parse(id, rest[n:])
}

// Inbox routes the wake-ups of a process's inboxes to the subscribers of
// each id. A process subscribes to its inbox channel once (once per hash
// slot where the inbox must share the id's slot); after that, subscribing
// to an id is a local registration, which costs no command.
type Inbox struct {
	mu       sync.Mutex
	ids      map[string]*inboxID
	chans    map[string]*inboxChan
	closed   bool
	received atomic.Int64
}

type inboxID struct {
	channel string // the inbox that serves the id
	fns     List
}

// inboxChan is one inbox channel's subscription, made by the first
// Subscribe that needs it and kept until Close.
type inboxChan struct {
	ready  chan struct{} // closed once settled
	err    error         // the failure, when settled without a subscription
	cancel func()
}

// NewInbox returns an empty Inbox.
func NewInbox() *Inbox {
	return &Inbox{ids: make(map[string]*inboxID), chans: make(map[string]*inboxChan)}
}

// Received returns how many messages the inboxes have delivered so far
// (wake-ups for one id; not the Wake.All of a resubscription).
func (in *Inbox) Received() int64 { return in.received.Load() }

// Subscribe registers fn for id's wake-ups, which come through channel,
// and returns once that channel is subscribed. The first Subscribe through
// a channel subscribes it with open (its messages go to Message, its
// resubscriptions to Resubscribed); the others wait for it. A failed open
// is tried again by the next Subscribe.
func (in *Inbox) Subscribe(ctx context.Context, id, channel string, fn func(backend.Wake),
	open func(ctx context.Context, deliver func(backend.Wake)) (cancel func(), err error)) (func(), error) {
	for attempt := 0; ; attempt++ {
		own, err := in.channel(ctx, channel, open)
		if err == nil {
			break
		}
		// A failure of another caller's open (its ctx ended, say) is
		// tried once more with this caller's own.
		if own || errors.Is(err, backend.ErrClosed) || attempt > 0 || ctx.Err() != nil {
			return nil, err
		}
	}
	return in.Register(id, channel, fn)
}

// channel waits until channel's subscription is settled, and opens it
// when nobody has (own). The error is the subscription's failure, or the
// end of this caller's wait.
func (in *Inbox) channel(ctx context.Context, channel string,
	open func(ctx context.Context, deliver func(backend.Wake)) (cancel func(), err error)) (own bool, err error) {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return false, backend.ErrClosed
	}
	if c := in.chans[channel]; c != nil {
		in.mu.Unlock()
		select {
		case <-c.ready:
			return false, c.err
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	c := &inboxChan{ready: make(chan struct{})}
	in.chans[channel] = c
	in.mu.Unlock()
	cancel, err := open(ctx, func(w backend.Wake) { in.fromChannel(channel, w) })
	in.mu.Lock()
	c.cancel, c.err = cancel, err
	if err != nil && in.chans[channel] == c {
		delete(in.chans, channel)
	}
	closed := in.closed
	close(c.ready)
	in.mu.Unlock()
	if closed && err == nil {
		cancel() // Close ran meanwhile and did not see it
		return true, backend.ErrClosed
	}
	return true, err
}

// Register adds fn for id's wake-ups, which come through channel (a name
// used by Resubscribed), with no command: for an inbox that needs no
// subscription (a tracked inbox key).
func (in *Inbox) Register(id, channel string, fn func(backend.Wake)) (func(), error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil, backend.ErrClosed
	}
	e := in.ids[id]
	if e == nil {
		e = &inboxID{channel: channel}
		in.ids[id] = e
	}
	key := e.fns.Add(fn)
	var once sync.Once
	return func() {
		once.Do(func() {
			in.mu.Lock()
			defer in.mu.Unlock()
			if e.fns.Remove(key) == 0 && in.ids[id] == e {
				delete(in.ids, id)
			}
		})
	}, nil
}

// fromChannel is what an inbox channel's subscription delivers: decoded
// messages, and its entry's All (ID "") after a resubscription.
func (in *Inbox) fromChannel(channel string, w backend.Wake) {
	if w.All && w.ID == "" {
		in.Resubscribed(channel)
		return
	}
	in.received.Add(1)
	in.Deliver(w)
}

// Message delivers one inbox message (see ParseInbox); it reports false,
// and delivers nothing, for a message it cannot parse.
func (in *Inbox) Message(msg string) bool {
	in.received.Add(1)
	w, ok := ParseInbox(msg)
	if ok {
		in.Deliver(w)
	}
	return ok
}

// Deliver sends w to the subscribers of w.ID, if any.
func (in *Inbox) Deliver(w backend.Wake) {
	in.mu.Lock()
	var fns Snapshot
	if e := in.ids[w.ID]; e != nil && !in.closed {
		fns = e.fns.Snapshot()
	}
	in.mu.Unlock()
	fns.Deliver(w)
}

// Resubscribed wakes every local waiter of every id served by channel
// (Wake{ID, All: true}), or of every id when channel is "": messages may
// have been lost while the inbox was not subscribed or tracked.
func (in *Inbox) Resubscribed(channel string) {
	type pending struct {
		id  string
		fns Snapshot
	}
	in.mu.Lock()
	var all []pending
	if !in.closed {
		for id, e := range in.ids {
			if channel == "" || e.channel == channel {
				all = append(all, pending{id, e.fns.Snapshot()})
			}
		}
	}
	in.mu.Unlock()
	for _, p := range all {
		p.fns.Deliver(backend.Wake{ID: p.id, All: true})
	}
}

// Channels returns the inboxes that serve the ids registered now, each
// once.
func (in *Inbox) Channels() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	seen := make(map[string]bool)
	var out []string
	for _, e := range in.ids {
		if !seen[e.channel] {
			seen[e.channel] = true
			out = append(out, e.channel)
		}
	}
	return out
}

// Close ends every inbox channel's subscription and every registration;
// later calls of Subscribe and Register return backend.ErrClosed.
func (in *Inbox) Close() {
	in.mu.Lock()
	in.closed = true
	var cancels []func()
	for ch, c := range in.chans {
		select {
		case <-c.ready:
			if c.cancel != nil {
				cancels = append(cancels, c.cancel)
			}
		default:
		}
		delete(in.chans, ch)
	}
	in.ids = make(map[string]*inboxID)
	in.mu.Unlock()
	for _, c := range cancels {
		c()
	}
}
