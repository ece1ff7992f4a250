// Package embedredis runs miniredis, an in-process imitation of Redis,
// with its clock following the wall clock, so that key TTLs run down as on
// a real server. The quick start uses it when REDIS_ADDR is unset, and the
// Redis adapters' tests use it to run the conformance suite without a
// server.
//
// miniredis on its own never expires a key unless told to (FastForward);
// Server moves its clock forward every Tick, so a TTL ends at most one tick
// late: on the safe side of every lock guarantee, but not exact.
package embedredis

import (
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Tick is how often a Server moves miniredis's clock.
const Tick = 2 * time.Millisecond

// Server is a running miniredis with a wall-clock pump.
type Server struct {
	m    *miniredis.Miniredis
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// Start starts a miniredis on a free loopback port and its clock pump.
func Start() (*Server, error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, err
	}
	s := &Server{m: m, stop: make(chan struct{})}
	s.wg.Add(1)
	go s.pump()
	return s, nil
}

// Addr returns the host:port to dial.
func (s *Server) Addr() string { return s.m.Addr() }

// Close stops the pump and the server. It is idempotent.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.stop)
		s.wg.Wait()
		s.m.Close()
	})
}

func (s *Server) pump() {
	defer s.wg.Done()
	last := time.Now()
	t := time.NewTicker(Tick)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.m.FastForward(now.Sub(last))
			last = now
		}
	}
}
