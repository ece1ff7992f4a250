package wakeup

import (
	"context"
	"sync"

	"github.com/redislocker/lock/backend"
)

// Entry is one channel of a wake-up source: an inbox (see ParseInbox), the
// id its Wake.All names, its subscribers, and the outcome of its first
// SUBSCRIBE. Fns and the outcome are guarded by the source's lock.
type Entry struct {
	ID, Channel string
	Fns         List // copy-on-write: delivery reads a Snapshot without the lock
	confirmed   bool // settled: confirmed once, or failed; ready is closed
	err         error
	ready       chan struct{}
}

// NewEntry returns the entry of the inbox channel. Its messages name their
// id (see ParseInbox); id is the one its Wake.All names: "" (every id of
// the inbox) for an adapter's inbox.
func NewEntry(id, channel string) Entry {
	return Entry{ID: id, Channel: channel, ready: make(chan struct{})}
}

// Settled reports whether the first SUBSCRIBE was confirmed, or failed.
func (e *Entry) Settled() bool { return e.confirmed }

// Confirm records a confirmation of the channel. The first one settles the
// entry (again is false). A later one, subscribed again after a reconnect
// or on another node, returns the subscribers: the caller delivers
// e.All() to them, without the lock.
func (e *Entry) Confirm() (fns Snapshot, again bool) {
	if !e.confirmed {
		e.confirmed = true
		close(e.ready)
		return nil, false
	}
	return e.Fns.Snapshot(), true
}

// Fail ends the first SUBSCRIBE with err: its subscribers get err. It
// reports false, and does nothing, when the entry was settled already.
func (e *Entry) Fail(err error) bool {
	if e.confirmed {
		return false
	}
	e.err, e.confirmed = err, true
	close(e.ready)
	return true
}

// Join ends a Subscribe of fn to e: called with the source's lock held, it
// adds fn, calls unlock, and waits as [Await] does until e is settled.
// unsubscribe(key) removes fn again (the returned cancel calls it).
func (e *Entry) Join(ctx context.Context, fn func(backend.Wake), unlock func(), closing <-chan struct{}, unsubscribe func(key uint64)) (func(), error) {
	key := e.Fns.Add(fn)
	unlock()
	return Await(ctx, e.ready, closing, func() error { return e.err }, func() { unsubscribe(key) })
}

// Wake returns the wake-up a message on e's channel carries; ok is false
// for a message that does not parse (nothing to deliver).
func (e *Entry) Wake(msg string) (w backend.Wake, ok bool) { return ParseInbox(msg) }

// Receive delivers the wake-up that msg carries to the subscribers of the
// entry find returns: nil (none) for a channel given up or not confirmed.
// find runs with mu, the source's lock, held; delivery runs without it.
func Receive(mu sync.Locker, find func() *Entry, msg string) {
	mu.Lock()
	e := find()
	var fns Snapshot
	if e != nil {
		fns = e.Fns.Snapshot()
	}
	mu.Unlock()
	if len(fns) == 0 {
		return
	}
	if w, ok := e.Wake(msg); ok {
		fns.Deliver(w)
	}
}

// All returns the wake-up that asks every subscriber of e to re-check.
func (e *Entry) All() backend.Wake { return backend.Wake{ID: e.ID, All: true} }
