package rueidisbackend

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/keys"
	"github.com/redislocker/lock/internal/wakefns"
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
//
// A connection that is gone is not re-established at once: rueidis dials
// again on the next command. The wake-up that makes every waiter re-check
// is delivered once it can succeed: a goroutine PINGs through the client
// (which dials a new tracking connection) until the server answers, and
// only then delivers Wake{ID, All: true}, as the pub/sub mode does on
// re-subscription. A re-check sent while the server is unreachable would
// fail the waiting call instead.
type tracker struct {
	ks   keys.Keyspace
	user func([]rueidis.RedisMessage) // the caller's own OnInvalidations, if any
	ping func(context.Context) error  // set once the client exists

	mu         sync.Mutex
	byKey      map[string]*trackEntry // lock key -> entry
	closed     bool
	recovering bool // a recover goroutine runs
	again      bool // another nil invalidation came while it ran
	closing    chan struct{}
	ctx        context.Context // cancelled by close; bounds the PINGs
	stop       context.CancelFunc
	wg         sync.WaitGroup // the recover goroutine
}

// pingTimeout bounds one PING of the recovery.
const pingTimeout = 5 * time.Second

type trackEntry struct {
	id  string
	key string
	fns wakefns.List // copy-on-write: deliver reads it without the lock
}

func newTracker(ks keys.Keyspace, user func([]rueidis.RedisMessage)) *tracker {
	ctx, stop := context.WithCancel(context.Background())
	return &tracker{ks: ks, user: user, byKey: make(map[string]*trackEntry), closing: make(chan struct{}), ctx: ctx, stop: stop}
}

// setPing sets how the recovery checks that the server answers again.
func (t *tracker) setPing(ping func(context.Context) error) {
	t.mu.Lock()
	t.ping = ping
	t.mu.Unlock()
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
	key := e.fns.Add(fn)
	var once sync.Once
	return func() { once.Do(func() { t.unsubscribe(e, key) }) }, nil
}

func (t *tracker) unsubscribe(e *trackEntry, key uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.fns.Remove(key) == 0 && t.byKey[e.key] == e {
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
		t.lost()
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

// recover PINGs until the server answers on a new connection, then wakes
// every subscribed id with All.
func (t *tracker) recover() {
	defer t.wg.Done()
	delay := time.Duration(0)
	for {
		if delay > 0 {
			tm := time.NewTimer(delay)
			select {
			case <-t.closing:
				tm.Stop()
				return
			case <-tm.C:
			}
		}
		t.mu.Lock()
		t.again = false
		t.mu.Unlock()
		ctx, cancel := context.WithTimeout(t.ctx, pingTimeout)
		err := t.ping(ctx)
		cancel()
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return
		}
		if err == nil && !t.again {
			t.recovering = false
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
		t.mu.Unlock()
		switch {
		case err == nil:
			delay = 0 // lost again meanwhile: ping again at once
		case delay < minRedial:
			delay = minRedial
		default:
			delay = min(2*delay, maxRedial)
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
	fns := e.fns.Snapshot()
	t.mu.Unlock()
	fns.Deliver(w)
}

// close stops delivering and waits for the recover goroutine.
func (t *tracker) close() {
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		close(t.closing)
		t.stop()
	}
	t.byKey = make(map[string]*trackEntry)
	t.mu.Unlock()
	t.wg.Wait()
}
