package rueidisbackend

import (
	"sync"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/keys"
)

// tracker routes the invalidations of the Backend's tracking connection to
// the subscribers of the invalidated lock keys (Tracking mode).
//
// Invalidations name keys; a key that is the lock key of a subscribed id
// becomes Wake{ID: id} for that id's subscribers, and nothing else: the
// queue keys that the scripts also read (and so also track) are ignored, as
// are lock keys nobody here waits on. A nil invalidation is rueidis telling
// that the connection is gone or the server flushed everything: every
// tracked key is forgotten, so every subscribed id gets Wake{ID, All: true}.
type tracker struct {
	ks   keys.Keyspace
	user func([]rueidis.RedisMessage) // the caller's own OnInvalidations, if any

	mu      sync.Mutex
	byKey   map[string]*trackEntry // lock key -> entry
	nextKey uint64
	closed  bool
}

type trackEntry struct {
	id  string
	key string
	fns []keyedFn // copy-on-write: deliver reads it without the lock
}

type keyedFn struct {
	key uint64
	fn  func(backend.Wake)
}

func newTracker(ks keys.Keyspace, user func([]rueidis.RedisMessage)) *tracker {
	return &tracker{ks: ks, user: user, byKey: make(map[string]*trackEntry)}
}

// subscribe registers fn for the invalidations of lockKey. It costs no
// command: the tracking is set up by the reads of the steps that follow.
func (t *tracker) subscribe(id, lockKey string, fn func(backend.Wake)) (func(), error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, backend.ErrClosed
	}
	e := t.byKey[lockKey]
	if e == nil {
		e = &trackEntry{id: id, key: lockKey}
		t.byKey[lockKey] = e
	}
	t.nextKey++
	key := t.nextKey
	e.fns = append(e.fns[:len(e.fns):len(e.fns)], keyedFn{key, fn})
	var once sync.Once
	return func() { once.Do(func() { t.unsubscribe(e, key) }) }, nil
}

func (t *tracker) unsubscribe(e *trackEntry, key uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fns := make([]keyedFn, 0, len(e.fns))
	for _, f := range e.fns {
		if f.key != key {
			fns = append(fns, f)
		}
	}
	e.fns = fns
	if len(fns) == 0 && t.byKey[e.key] == e {
		delete(t.byKey, e.key)
	}
}

// onInvalidations is the client's OnInvalidations. rueidis calls it on the
// connection's reading goroutine, after the reply of the command that
// tracked the key, so it must not block: it only looks up and calls the
// subscribers' fns, which do not block either.
func (t *tracker) onInvalidations(msgs []rueidis.RedisMessage) {
	if t.user != nil {
		t.user(msgs)
	}
	if msgs == nil {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return
		}
		entries := make([]*trackEntry, 0, len(t.byKey))
		for _, e := range t.byKey {
			entries = append(entries, e)
		}
		t.mu.Unlock()
		for _, e := range entries {
			t.deliverTo(e, backend.Wake{ID: e.id, All: true})
		}
		return
	}
	for _, m := range msgs {
		key, err := m.ToString()
		if err != nil {
			continue
		}
		t.mu.Lock()
		e := t.byKey[key]
		closed := t.closed
		t.mu.Unlock()
		if e != nil && !closed {
			t.deliverTo(e, backend.Wake{ID: e.id})
		}
	}
}

// deliver sends w to the subscribers of id, if any.
func (t *tracker) deliver(id string, w backend.Wake) {
	key := t.ks.Key(id, keys.SuffixLock)
	t.mu.Lock()
	e := t.byKey[key]
	closed := t.closed
	t.mu.Unlock()
	if e != nil && !closed {
		t.deliverTo(e, w)
	}
}

func (t *tracker) deliverTo(e *trackEntry, w backend.Wake) {
	t.mu.Lock()
	fns := e.fns
	t.mu.Unlock()
	for _, f := range fns {
		f.fn(w)
	}
}

func (t *tracker) close() {
	t.mu.Lock()
	t.closed = true
	t.byKey = make(map[string]*trackEntry)
	t.mu.Unlock()
}
