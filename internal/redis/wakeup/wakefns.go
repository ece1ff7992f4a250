// Package wakeup holds the part that every wake-up subscriber of the Redis
// adapters keeps per channel: the callbacks of the local subscriptions to
// it. They are added and removed under the subscriber's own mutex and read
// without it (copy on write), so a message is delivered after the mutex is
// released (Receive).
//
// It also holds what the subscribers share beyond a channel: a Life that
// ends when the subscriber closes, the delays between attempts after a
// failure (NextDelay, Sleep), and the Supervisor, which runs the
// connections of every Redis adapter's wake-up source (pub/sub, sharded
// pub/sub per node, tracking): connect, subscribe, serve, back off,
// connect again and wake every waiter.
package wakeup

import (
	"context"
	"sync"

	"github.com/redislocker/lock/backend"
)

// List is the callbacks of one channel. The zero value is empty. Add,
// Remove, Len and Snapshot must be called with the owner's mutex held.
type List struct {
	fns  []keyed
	next uint64
}

type keyed struct {
	key uint64
	fn  func(backend.Wake)
}

// Add appends fn and returns the key that removes it.
func (l *List) Add(fn func(backend.Wake)) uint64 {
	l.next++
	// A new backing array: a Snapshot taken before stays as it was.
	l.fns = append(l.fns[:len(l.fns):len(l.fns)], keyed{l.next, fn})
	return l.next
}

// Remove drops the callback of key and returns how many are left.
func (l *List) Remove(key uint64) int {
	fns := make([]keyed, 0, len(l.fns))
	for _, f := range l.fns {
		if f.key != key {
			fns = append(fns, f)
		}
	}
	l.fns = fns
	return len(fns)
}

// Len returns the number of callbacks.
func (l *List) Len() int { return len(l.fns) }

// Snapshot returns the callbacks as they are now; deliver to it after
// releasing the owner's mutex.
func (l *List) Snapshot() Snapshot { return Snapshot(l.fns) }

// Snapshot is the callbacks of a List at one moment.
type Snapshot []keyed

// Deliver calls every callback with w.
func (s Snapshot) Deliver(w backend.Wake) {
	for _, f := range s {
		f.fn(w)
	}
}

// Await ends a Subscribe: it waits until the subscription is confirmed
// (ready is closed) and returns the function that cancels it. If failed
// (may be nil) then reports an error, or ctx ends first, or closing is
// closed first (backend.ErrClosed), it cancels the subscription and
// returns the error. The returned cancel runs unsubscribe at most once.
func Await(ctx context.Context, ready, closing <-chan struct{}, failed func() error, unsubscribe func()) (func(), error) {
	var once sync.Once
	cancel := func() { once.Do(unsubscribe) }
	select {
	case <-ready:
		if failed != nil {
			if err := failed(); err != nil {
				cancel()
				return nil, err
			}
		}
		return cancel, nil
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	case <-closing:
		cancel()
		return nil, backend.ErrClosed
	}
}
