package rueidisbackend

//lint:file-ignore SA1019 the dialer honours the deprecated ClientOption.DialFn, as rueidis does

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// connWatch watches the connections of a Tracking-mode client, so that
// the tracker can tell a lost listener from a connection the client closed
// while it listened for nothing.
//
// rueidis reports every closed connection as a nil invalidation, the same
// as a FLUSHALL, without saying which one closed. Not every close can lose
// an invalidation: a cluster client closes the spare connections its
// start-up dialled to one node twice, and its dedicated connections come
// and go beside a node's pipelined one. A close can lose one only if the
// connection carried a command after its handshake (the client used it,
// so it may have been the node's listener) and no other tracking
// connection to the same address was listening before it closed and still
// is.
type connWatch struct {
	mu     sync.Mutex
	seq    uint64                  // orders handshakes and closes
	open   map[*watchedConn]uint64 // open connections: the seq of their handshake's reply, 0 before it
	closes []closedConn            // closes since the last lost call
	over   bool                    // closes overflowed: count it as a loss
}

// closedConn is one close that lost may have to explain.
type closedConn struct {
	addr string
	used bool   // it carried a command after its answered handshake
	seq  uint64 // when it closed
}

// maxCloses bounds closes between two recoveries; more is a loss.
const maxCloses = 1024

func newConnWatch() *connWatch {
	return &connWatch{open: make(map[*watchedConn]uint64)}
}

// dialer returns a ClientOption.DialCtxFn that dials as o would (its
// DialCtxFn, its DialFn, or rueidis's own way) and watches the connection.
func (w *connWatch) dialer(o rueidis.ClientOption) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		var nc net.Conn
		var err error
		switch {
		case o.DialCtxFn != nil:
			nc, err = o.DialCtxFn(ctx, addr, d, cfg)
		case o.DialFn != nil:
			nc, err = o.DialFn(addr, d, cfg)
		case cfg != nil:
			nc, err = (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, "tcp", addr)
		default:
			nc, err = d.DialContext(ctx, "tcp", addr)
		}
		if err != nil {
			return nil, err
		}
		c := &watchedConn{Conn: nc, w: w, addr: addr}
		w.mu.Lock()
		w.open[c] = 0
		w.mu.Unlock()
		return c, nil
	}
}

// lost reports whether a close since the last call may have lost an
// invalidation, or whether there was no close to explain the nil
// invalidation that led here (a flush: the server dropped every key).
func (w *connWatch) lost() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	closes, over := w.closes, w.over
	w.closes, w.over = nil, false
	if over || len(closes) == 0 {
		return true
	}
	for _, c := range closes {
		if c.used && !w.covered(c) {
			return true
		}
	}
	return false
}

// covered reports whether an open connection to c's address had its
// handshake answered (tracking on) before c closed. Callers hold w.mu.
func (w *connWatch) covered(c closedConn) bool {
	for o, ready := range w.open {
		if o.addr == c.addr && ready != 0 && ready < c.seq {
			return true
		}
	}
	return false
}

// watchedConn is one connection of the client.
type watchedConn struct {
	net.Conn
	w      *connWatch
	addr   string
	writes atomic.Int32 // up to 2: the handshake, then a command (not a PING)
	ready  atomic.Bool  // its handshake was answered
	closed atomic.Bool
}

var (
	// trackingCmd is in the handshake's CLIENT TRACKING.
	trackingCmd = []byte("TRACKING")
	// pingCmd is a PING, which uses no connection: rueidis sends one to
	// close a connection, and to keep an idle one alive.
	pingCmd = []byte("*1\r\n$4\r\nPING\r\n")
)

// onlyPings reports whether b is one or more PINGs.
func onlyPings(b []byte) bool {
	if len(b) == 0 || len(b)%len(pingCmd) != 0 {
		return false
	}
	for ; len(b) > 0; b = b[len(pingCmd):] {
		if !bytes.Equal(b[:len(pingCmd)], pingCmd) {
			return false
		}
	}
	return true
}

func (c *watchedConn) Write(b []byte) (int, error) {
	if n := c.writes.Load(); n == 0 && bytes.Contains(b, trackingCmd) || n == 1 && !onlyPings(b) {
		c.writes.Add(1)
	}
	return c.Conn.Write(b)
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.ready.Load() && c.writes.Load() > 0 && c.ready.CompareAndSwap(false, true) {
		w := c.w
		w.mu.Lock()
		if _, ok := w.open[c]; ok {
			w.seq++
			w.open[c] = w.seq
		}
		w.mu.Unlock()
	}
	return n, err
}

func (c *watchedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		w := c.w
		w.mu.Lock()
		if ready, ok := w.open[c]; ok {
			delete(w.open, c)
			w.seq++
			if len(w.closes) < maxCloses {
				used := ready != 0 && c.writes.Load() > 1
				w.closes = append(w.closes, closedConn{addr: c.addr, used: used, seq: w.seq})
			} else {
				w.over = true
			}
		}
		w.mu.Unlock()
	}
	return c.Conn.Close()
}
