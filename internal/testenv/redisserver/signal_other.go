//go:build !unix

package redisserver

import "errors"

var errNoSignals = errors.New("redisserver: pausing a process needs SIGSTOP (unix)")

// Pause is not available without unix signals.
func (s *Server) Pause() error { return errNoSignals }

// Resume is not available without unix signals.
func (s *Server) Resume() error { return errNoSignals }
