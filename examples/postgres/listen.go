package postgres

import (
	"context"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redislocker/lock/backend"
)

// listener is a Backend's one listening connection (checklist item 8),
// shared by every subscription. It LISTENs on the schema's channel, where
// the steps NOTIFY "hex(id) hex(head)", and calls the subscriptions of the
// id. When the connection fails it reconnects; once it listens again it
// wakes every subscription with All, for what it missed.
type listener struct {
	cfg     *pgx.ConnConfig
	channel string
	stop    context.CancelFunc
	done    chan struct{} // closed when run returns
	pid     atomic.Uint32 // the listening connection's server process

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

// deliver calls the subscriptions of the notified id with its head.
func (l *listener) deliver(payload string) {
	hid, htok, _ := strings.Cut(payload, " ")
	id, _ := hex.DecodeString(hid) // written by finish: valid
	tok, _ := hex.DecodeString(htok)
	var fns []func(backend.Wake)
	l.mu.Lock()
	for fn := range l.subs[string(id)] {
		fns = append(fns, *fn)
	}
	l.mu.Unlock()
	for _, fn := range fns {
		fn(backend.Wake{ID: string(id), Token: string(tok)})
	}
}

// subscribe registers fn for id and waits until the connection listens.
func (l *listener) subscribe(ctx context.Context, id string, fn func(backend.Wake)) (func(), error) {
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
