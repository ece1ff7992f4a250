package postgres

import (
	"context"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redislocker/lock/backend"
)

// listener is a Backend's one listening connection (checklist item 8),
// shared by every subscription. It LISTENs on the Backend's own channel,
// which every waiter the Backend queues records, so that the steps NOTIFY
// a waiter's wake-up to its process only (see wake in schema.sql), and
// calls the subscriptions of the id. When the connection fails it
// reconnects; once it listens again it wakes every subscription with All,
// for what it missed.
type listener struct {
	cfg     *pgx.ConnConfig
	channel string
	stop    context.CancelFunc
	done    chan struct{} // closed when run returns
	pid     atomic.Uint32 // the listening connection's server process
	delay   atomic.Int64  // a test hook: subscriptions are registered this late

	mu   sync.Mutex
	subs map[string]map[*func(backend.Wake)]struct{}
	live chan struct{} // closed while listening
}

func newListener(cfg *pgx.ConnConfig, channel string) *listener {
	ctx, stop := context.WithCancel(context.Background())
	l := &listener{cfg: cfg, channel: channel, stop: stop, done: make(chan struct{}),
		subs: map[string]map[*func(backend.Wake)]struct{}{}, live: make(chan struct{})}
	go l.run(ctx)
	return l
}

func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	backoff := 50 * time.Millisecond
	for reconnect := false; ; backoff = min(2*backoff, 2*time.Second) {
		if conn, err := pgx.ConnectConfig(ctx, l.cfg); err == nil {
			if _, err = conn.Exec(ctx, "LISTEN "+l.channel); err == nil {
				l.pid.Store(conn.PgConn().PID())
				l.listening(reconnect)
				reconnect, backoff = true, 50*time.Millisecond
				for err == nil {
					var n *pgconn.Notification
					if n, err = conn.WaitForNotification(ctx); err == nil {
						l.deliver(n.Payload)
					}
				}
				l.mu.Lock()
				l.live = make(chan struct{})
				l.mu.Unlock()
			}
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(cctx)
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// listening marks the connection live; after a reconnect it wakes every
// subscription with All.
func (l *listener) listening(reconnect bool) {
	var calls []func()
	l.mu.Lock()
	close(l.live)
	for id, fns := range l.subs {
		for fn := range fns {
			if reconnect {
				calls = append(calls, func() { (*fn)(backend.Wake{ID: id, All: true}) })
			}
		}
	}
	l.mu.Unlock()
	for _, c := range calls {
		c()
	}
}

// deliver calls the subscriptions of the notified id with the wake-up
// "hex(id) hex(token) holder_ttl fence ttl store_time" (µs; fence 0: no
// grant), as written by wake in schema.sql.
func (l *listener) deliver(payload string) {
	f := strings.Split(payload, " ")
	if len(f) != 6 {
		return
	}
	id, _ := hex.DecodeString(f[0])
	tok, _ := hex.DecodeString(f[1])
	var n [4]int64
	for i := range n {
		n[i], _ = strconv.ParseInt(f[2+i], 10, 64)
	}
	w := backend.Wake{ID: string(id), Token: string(tok), HolderTTL: dur(n[0])}
	if n[1] > 0 {
		w.Grant = &backend.HandOff{Fence: uint64(n[1]), TTL: dur(n[2]), StoreTime: time.UnixMicro(n[3])}
	}
	var fns []func(backend.Wake)
	l.mu.Lock()
	for fn := range l.subs[w.ID] {
		fns = append(fns, *fn)
	}
	l.mu.Unlock()
	for _, fn := range fns {
		fn(w)
	}
}

// subscribe registers fn for id and waits until the connection listens.
func (l *listener) subscribe(ctx context.Context, id string, fn func(backend.Wake)) (func(), error) {
	if d := time.Duration(l.delay.Load()); d > 0 { // the test hook: a slow store
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	key := &fn
	l.mu.Lock()
	if l.subs[id] == nil {
		l.subs[id] = map[*func(backend.Wake)]struct{}{}
	}
	l.subs[id][key] = struct{}{}
	live := l.live
	l.mu.Unlock()
	cancel := func() {
		l.mu.Lock()
		if delete(l.subs[id], key); len(l.subs[id]) == 0 {
			delete(l.subs, id)
		}
		l.mu.Unlock()
	}
	select {
	case <-live:
		return cancel, nil
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	case <-l.done:
		cancel()
		return nil, backend.ErrClosed
	}
}

// close stops the connection and drops every subscription.
func (l *listener) close() {
	l.stop()
	<-l.done
	l.mu.Lock()
	clear(l.subs)
	l.mu.Unlock()
}
