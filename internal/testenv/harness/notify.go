package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"regexp"
	"sync"
	"testing"
	"time"
)

// notifyConns wraps the connections a Redis client dials so that a test
// can find the ones that carry wake-ups (a connection that sent SUBSCRIBE,
// SSUBSCRIBE or CLIENT TRACKING) and disturb them: hold back what they
// send for a while, so that a subscription becomes live late, or close
// them, so that the client must reconnect. It serves the Redis harnesses'
// SubscribeDelayer and NotifierDropper capabilities. Its methods are
// goroutine-safe.
type notifyConns struct {
	mu    sync.Mutex
	delay time.Duration
	conns map[*notifyConn]struct{}
}

// newNotifyConns returns an empty notifyConns.
func newNotifyConns() *notifyConns {
	return &notifyConns{conns: make(map[*notifyConn]struct{})}
}

// Dialer returns a go-redis Options.Dialer that dials addr, over TLS
// with cfg when it is not nil (go-redis leaves TLS to a Dialer of its
// options), and wraps the conn.
func (c *notifyConns) Dialer(cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var nc net.Conn
		var err error
		if cfg != nil {
			td := tls.Dialer{Config: cfg}
			nc, err = td.DialContext(ctx, network, addr)
		} else {
			var d net.Dialer
			nc, err = d.DialContext(ctx, network, addr)
		}
		if err != nil {
			return nil, err
		}
		return c.wrap(nc), nil
	}
}

// DialCtx is a rueidis ClientOption.DialCtxFn.
func (c *notifyConns) DialCtx(ctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	var nc net.Conn
	var err error
	if cfg != nil {
		td := tls.Dialer{NetDialer: d, Config: cfg}
		nc, err = td.DialContext(ctx, "tcp", addr)
	} else {
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	return c.wrap(nc), nil
}

// DelaySubscribe makes a connection that sends a subscribe command from
// now on hold back that command and everything after it on the connection
// by d: the server hears of the subscription d late. d == 0 ends it for
// later commands.
func (c *notifyConns) DelaySubscribe(d time.Duration) {
	c.mu.Lock()
	c.delay = d
	c.mu.Unlock()
}

// DropNotifiers closes every connection that subscribed or turned on
// tracking, as a network failure would, and returns how many it closed.
func (c *notifyConns) DropNotifiers() int {
	c.mu.Lock()
	var drop []*notifyConn
	for cn := range c.conns {
		if cn.notifier() {
			drop = append(drop, cn)
		}
	}
	c.mu.Unlock()
	for _, cn := range drop {
		_ = cn.Close()
	}
	return len(drop)
}

func (c *notifyConns) wrap(nc net.Conn) net.Conn {
	cn := &notifyConn{Conn: nc, owner: c}
	c.mu.Lock()
	c.conns[cn] = struct{}{}
	c.mu.Unlock()
	return cn
}

func (c *notifyConns) currentDelay() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.delay
}

// Commands that make a connection a notifier, as RESP arrays: the command
// name right after the array's header, so that a key or argument that
// merely spells one never matches.
var (
	subscribeCmd = regexp.MustCompile(`(?i)\*\d+\r\n\$(9\r\nsubscribe|10\r\nssubscribe|10\r\npsubscribe)\r\n`)
	trackingCmd  = regexp.MustCompile(`(?i)\*\d+\r\n\$6\r\nclient\r\n\$8\r\ntracking\r\n`)
)

type notifyConn struct {
	net.Conn
	owner *notifyConns

	mu       sync.Mutex
	isNotify bool
	queue    chan pendingWrite // non-nil once writes are held back
	closed   bool
	done     chan struct{}
}

type pendingWrite struct {
	b   []byte
	due time.Time
}

func (cn *notifyConn) notifier() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.isNotify
}

func (cn *notifyConn) Write(b []byte) (int, error) {
	subscribe := subscribeCmd.Match(b)
	if subscribe || trackingCmd.Match(b) {
		cn.mu.Lock()
		cn.isNotify = true
		cn.mu.Unlock()
	}
	cn.mu.Lock()
	if cn.closed {
		cn.mu.Unlock()
		return 0, net.ErrClosed
	}
	var d time.Duration
	if subscribe {
		d = cn.owner.currentDelay()
	}
	if cn.queue == nil && d <= 0 {
		cn.mu.Unlock()
		return cn.Conn.Write(b)
	}
	if cn.queue == nil {
		cn.queue = make(chan pendingWrite, 1024)
		cn.done = make(chan struct{})
		go cn.writer(cn.queue, cn.done)
	}
	cn.queue <- pendingWrite{b: bytes.Clone(b), due: time.Now().Add(d)}
	cn.mu.Unlock()
	return len(b), nil
}

// writer sends the held-back writes in order, each at its due time.
func (cn *notifyConn) writer(q <-chan pendingWrite, done chan<- struct{}) {
	defer close(done)
	for w := range q {
		if d := time.Until(w.due); d > 0 {
			t := time.NewTimer(d)
			<-t.C
		}
		if _, err := cn.Conn.Write(w.b); err != nil {
			_ = cn.Conn.Close()
		}
	}
}

func (cn *notifyConn) Close() error {
	cn.mu.Lock()
	if cn.closed {
		cn.mu.Unlock()
		return nil
	}
	cn.closed = true
	q, done := cn.queue, cn.done
	cn.mu.Unlock()
	err := cn.Conn.Close()
	if q != nil {
		close(q)
		<-done
	}
	cn.owner.mu.Lock()
	delete(cn.owner.conns, cn)
	cn.owner.mu.Unlock()
	return err
}

// notifySet maps the backends a test harness made to the notifyConns of their
// clients. Its methods are goroutine-safe.
type notifySet struct {
	mu sync.Mutex
	m  map[any]*notifyConns
}

// Add registers c as the notifyConns of backend b.
func (s *notifySet) Add(b any, c *notifyConns) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[any]*notifyConns)
	}
	s.m[b] = c
}

func (s *notifySet) of(t testing.TB, b any) *notifyConns {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.m[b]
	if c == nil {
		t.Fatalf("harness: %T is not a backend of this harness", b)
	}
	return c
}

// DropNotifier closes backend b's connections that subscribed or track,
// failing t when it has none.
func (s *notifySet) DropNotifier(t testing.TB, b any) {
	t.Helper()
	if s.of(t, b).DropNotifiers() == 0 {
		t.Fatal("harness: the backend has no pub/sub or tracking connection to drop")
	}
}

// DelaySubscribe is notifyConns.DelaySubscribe for backend b.
func (s *notifySet) DelaySubscribe(t testing.TB, b any, d time.Duration) {
	t.Helper()
	s.of(t, b).DelaySubscribe(d)
}
