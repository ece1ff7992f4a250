package redisserver

import (
	"net"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// MiniredisTick is how often a Miniredis moves miniredis's clock between commands.
const MiniredisTick = 2 * time.Millisecond

// Miniredis runs miniredis, an in-process imitation of Redis, with its
// clock following the wall clock, so that key TTLs run down as on a real
// server. The Redis adapters' tests use it to run the conformance suite
// without a server.
//
// miniredis on its own never expires a key unless told to (FastForward),
// and FastForward charges every key alike. A Miniredis moves the clock
// each time bytes arrive from a client, before miniredis reads them, and
// every [MiniredisTick] in between. A key set by a command is therefore
// charged only time after the command's bytes arrived: it expires no
// earlier than its TTL after that, and at most one tick late when nobody
// asks. Expiry errs late, never early: on the safe side of every lock
// guarantee, but not exact.
type Miniredis struct {
	m    *miniredis.Miniredis
	ln   net.Listener
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	clock sync.Mutex // serializes reading the time and charging it
	last  time.Time  // the time charged up to
}

// StartMiniredis starts a miniredis on a free loopback port and its
// clock pump.
func StartMiniredis() (*Miniredis, error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, err
	}
	// Clients dial a listener of ours, whose connections move the clock
	// when bytes arrive; miniredis serves them as its own.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		m.Close()
		return nil, err
	}
	s := &Miniredis{m: m, ln: ln, stop: make(chan struct{}), last: time.Now()}
	s.wg.Add(2)
	go s.pump()
	go s.accept()
	return s, nil
}

// Addr returns the host:port to dial.
func (s *Miniredis) Addr() string { return s.ln.Addr().String() }

// Close stops the pump and the server. It is idempotent.
func (s *Miniredis) Close() {
	s.once.Do(func() {
		close(s.stop)
		_ = s.ln.Close()
		s.wg.Wait()
		s.m.Close() // closes the connections it serves
	})
}

// advance charges miniredis's keys the time since the last charge. The
// time is read and charged under one lock, so charges never overlap: a
// key set after a charge is never charged for time before it.
func (s *Miniredis) advance() {
	s.clock.Lock()
	defer s.clock.Unlock()
	now := time.Now()
	if d := now.Sub(s.last); d > 0 {
		s.m.FastForward(d)
		s.last = now
	}
}

// accept hands each connection to miniredis, wrapped in a clockConn.
func (s *Miniredis) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.m.Server().ServeConn(clockConn{c, s})
	}
}

// clockConn moves the clock after each read that brought bytes, before
// miniredis parses them: the commands they hold run after the charge.
type clockConn struct {
	net.Conn
	s *Miniredis
}

func (c clockConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.s.advance()
	}
	return n, err
}

func (s *Miniredis) pump() {
	defer s.wg.Done()
	t := time.NewTicker(MiniredisTick)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.advance()
		}
	}
}
