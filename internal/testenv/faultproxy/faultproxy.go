// Package faultproxy is a TCP proxy for tests that sits between a client
// and a server and breaks the connection on demand, each direction on its
// own: it can delay the bytes, blackhole them (read and drop), reset the
// connection (close both sides with RST) when bytes arrive, or cut it after
// exactly N more bytes have passed. It can also cut every connection at
// once and refuse new ones.
//
// Faults apply to every connection of the proxy, open or future, from the
// moment they are set. Decisions are taken when the proxy reads a chunk
// from one side: a delay set later does not speed up or slow down bytes
// already read. A cut (CutAfter, Reset, CutAll) closes both sockets with
// SO_LINGER 0, so each peer reads what reached it before and then gets
// ECONNRESET; on Linux loopback nothing forwarded before the cut is lost.
//
// The proxy only listens on loopback and dials the one target it was made
// for. Close stops every goroutine it started.
package faultproxy

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// Dir is a direction of the traffic.
type Dir int

const (
	// Up is client to server.
	Up Dir = iota
	// Down is server to client.
	Down
)

func (d Dir) String() string {
	switch d {
	case Up:
		return "up"
	case Down:
		return "down"
	}
	return fmt.Sprintf("Dir(%d)", int(d))
}

// Proxy forwards the connections it accepts to one target address.
type Proxy struct {
	target string
	ln     net.Listener

	mu        sync.Mutex
	rules     [2]rule
	refuse    bool
	conns     map[*conn]struct{}
	forwarded [2]int64 // bytes written to the far side, per direction
	dropped   [2]int64 // bytes blackholed, per direction
	accepted  int
	cuts      int
	closed    bool

	wg sync.WaitGroup
}

type rule struct {
	delay     time.Duration
	blackhole bool
	reset     bool
	cutArmed  bool
	cutLeft   int64
}

// New starts a proxy on a free loopback port that forwards to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[*conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Start is New for a test: it fails t on error and closes the proxy at
// t's cleanup.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Delay holds every chunk read in direction d for delay before it is
// written on (order is kept). Zero forwards at once.
func (p *Proxy) Delay(d Dir, delay time.Duration) {
	p.mu.Lock()
	p.rules[d].delay = delay
	p.mu.Unlock()
}

// Blackhole, while on, reads and drops every byte in direction d: the
// connection stays open and the far side hears nothing.
func (p *Proxy) Blackhole(d Dir, on bool) {
	p.mu.Lock()
	p.rules[d].blackhole = on
	p.mu.Unlock()
}

// Reset, while on, cuts (RST, both sides) every connection on which a byte
// arrives in direction d; the byte is not forwarded.
func (p *Proxy) Reset(d Dir, on bool) {
	p.mu.Lock()
	p.rules[d].reset = on
	p.mu.Unlock()
}

// CutAfter arms a one-shot cut: the next n bytes in direction d (counted
// over all connections) are forwarded, and the connection that carries the
// n-th byte is then cut (RST, both sides). With n == 0 the next byte in
// direction d is not forwarded and its connection is cut. The cut is
// disarmed once it fires; a later call re-arms it.
func (p *Proxy) CutAfter(d Dir, n int64) {
	if n < 0 {
		panic("faultproxy: CutAfter with a negative count")
	}
	p.mu.Lock()
	p.rules[d].cutArmed = true
	p.rules[d].cutLeft = n
	p.mu.Unlock()
}

// CutPending reports whether a CutAfter in direction d has not fired yet.
func (p *Proxy) CutPending(d Dir) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rules[d].cutArmed
}

// Refuse, while on, makes the proxy close every new connection as soon as
// it is accepted (with RST), as a server that is down would.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Clear removes every fault (delays, blackholes, resets, armed cuts,
// refusal). Open connections stay open.
func (p *Proxy) Clear() {
	p.mu.Lock()
	p.rules = [2]rule{}
	p.refuse = false
	p.mu.Unlock()
}

// CutAll cuts every open connection now (RST, both sides) and returns how
// many there were. New connections are accepted as usual.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	cs := slices.Collect(maps.Keys(p.conns))
	p.mu.Unlock()
	for _, c := range cs {
		c.cut()
	}
	return len(cs)
}

// Stats is a snapshot of the proxy's counters.
type Stats struct {
	Open      int      // connections open now
	Accepted  int      // connections accepted (refused ones included)
	Cuts      int      // connections cut by a fault or CutAll
	Forwarded [2]int64 // bytes forwarded, indexed by Dir
	Dropped   [2]int64 // bytes blackholed, indexed by Dir
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Open: len(p.conns), Accepted: p.accepted, Cuts: p.cuts, Forwarded: p.forwarded, Dropped: p.dropped}
}

// Close stops accepting, cuts every connection and waits for every
// goroutine of the proxy. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.CutAll()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient accept error: keep serving
		}
		p.mu.Lock()
		p.accepted++
		refuse, closed := p.refuse, p.closed
		p.mu.Unlock()
		if refuse || closed {
			abort(cc)
			continue
		}
		sc, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			abort(cc) // the target is down: the client sees its connection die
			continue
		}
		c := &conn{p: p, sides: [2]net.Conn{cc, sc}, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			abort(cc)
			abort(sc)
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go c.pipe(Up)
		go c.pipe(Down)
	}
}

// abort closes c with RST.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// conn is one proxied connection: sides[0] is the client's socket,
// sides[1] the server's.
type conn struct {
	p     *Proxy
	sides [2]net.Conn
	once  sync.Once
	done  chan struct{} // closed when the connection is cut or ends
}

// src and dst of direction d.
func (c *conn) ends(d Dir) (src, dst net.Conn) {
	if d == Up {
		return c.sides[0], c.sides[1]
	}
	return c.sides[1], c.sides[0]
}

// cut closes both sides with RST; counted as a cut when fault is set.
func (c *conn) cut() { c.finish(true) }

func (c *conn) finish(fault bool) {
	c.once.Do(func() {
		close(c.done)
		abort(c.sides[0])
		abort(c.sides[1])
		c.p.mu.Lock()
		delete(c.p.conns, c)
		if fault {
			c.p.cuts++
		}
		c.p.mu.Unlock()
	})
}

// chunk is a piece of traffic on its way.
type chunk struct {
	data    []byte
	due     time.Time
	cutThen bool // cut the connection once data is written
}

// pipe runs one direction: a reader that applies the faults as it reads,
// and a writer that honours the delays in order.
func (c *conn) pipe(d Dir) {
	defer c.p.wg.Done()
	src, dst := c.ends(d)
	queue := make(chan chunk, 256)
	c.p.wg.Add(1)
	go c.write(d, dst, queue)
	defer close(queue)
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			ch, cutNow, ok := c.p.decide(d, buf[:n])
			if cutNow {
				c.cut()
				return
			}
			if ok {
				select {
				case queue <- ch:
				case <-c.done:
					return
				}
			}
		}
		if err != nil {
			// The peer closed (or the connection was cut): end the whole
			// connection once what is queued has been written.
			select {
			case queue <- chunk{due: time.Now(), cutThen: false, data: nil}:
			case <-c.done:
			}
			return
		}
	}
}

// decide applies direction d's faults to data just read. It returns the
// chunk to forward (ok), or cutNow to cut the connection at once.
func (p *Proxy) decide(d Dir, data []byte) (ch chunk, cutNow, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := &p.rules[d]
	switch {
	case r.reset:
		return chunk{}, true, false
	case r.blackhole:
		p.dropped[d] += int64(len(data))
		return chunk{}, false, false
	}
	ch.due = time.Now().Add(r.delay)
	if r.cutArmed {
		if r.cutLeft == 0 {
			r.cutArmed = false
			return chunk{}, true, false
		}
		if int64(len(data)) >= r.cutLeft {
			data = data[:r.cutLeft]
			r.cutArmed = false
			r.cutLeft = 0
			ch.cutThen = true
		} else {
			r.cutLeft -= int64(len(data))
		}
	}
	ch.data = append([]byte(nil), data...)
	return ch, false, true
}

// write forwards the chunks of one direction in order, each at its due
// time. A nil chunk marks the end of the source: the connection ends.
func (c *conn) write(d Dir, dst net.Conn, queue <-chan chunk) {
	defer c.p.wg.Done()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for ch := range queue {
		if wait := time.Until(ch.due); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-c.done:
				return
			}
		}
		if ch.data == nil {
			c.finish(false)
			return
		}
		// Counted before the write, so that a peer that has read the bytes
		// sees them counted.
		c.p.mu.Lock()
		c.p.forwarded[d] += int64(len(ch.data))
		c.p.mu.Unlock()
		if _, err := dst.Write(ch.data); err != nil {
			c.finish(false)
			return
		}
		if ch.cutThen {
			c.cut()
			return
		}
	}
}
