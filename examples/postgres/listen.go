package postgres

import (
	"context"
	"encoding/hex"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redislocker/lock/backend"
)

// listener is a Backend's one listening connection (checklist item 8). It
// LISTENs on the schema's channel, where the steps NOTIFY "hex(id)
// hex(head)", and calls the subscriptions of the id. Every subscription
// shares it. When the connection fails it reconnects, and once it listens
// again it wakes every subscription with All, for what it missed.
type listener struct {
	cfg     *pgx.ConnConfig
	channel string
	stop    context.CancelFunc
	done    chan struct{} // closed when run returns

	mu        sync.Mutex
	subs      map[string]map[*func(backend.Wake)]struct{}
	live      chan struct{} // closed while listening
	listening bool
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
	const minBackoff, maxBackoff = 50 * time.Millisecond, 2 * time.Second
	backoff := minBackoff
	for reconnect := false; ; {
		if conn, err := pgx.ConnectConfig(ctx, l.cfg); err == nil {
			if _, err = conn.Exec(ctx, "LISTEN "+l.channel); err == nil {
				l.setListening(true, reconnect)
				reconnect, backoff = true, minBackoff
				for err == nil {
					n, werr := conn.WaitForNotification(ctx)
					if err = werr; err == nil {
						l.deliver(n.Payload)
					}
				}
				l.setListening(false, false)
			}
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(cctx)
			cancel()
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// setListening records the connection's state; once it listens again
// after a failure (wakeAll), every subscription gets Wake{All}.
func (l *listener) setListening(on, wakeAll bool) {
	l.mu.Lock()
	if on != l.listening {
		l.listening = on
		if on {
			close(l.live)
		} else {
			l.live = make(chan struct{})
		}
	}
	var calls []func()
	if wakeAll {
		for id, fns := range l.subs {
			for fn := range fns {
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
	id, err1 := hex.DecodeString(hid)
	tok, err2 := hex.DecodeString(htok)
	if err1 != nil || err2 != nil {
		return
	}
	l.mu.Lock()
	var fns []func(backend.Wake)
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
		delete(l.subs[id], key)
		if len(l.subs[id]) == 0 {
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
