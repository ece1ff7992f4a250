//go:build !unix

package rediscluster

import "errors"

var errNoSignals = errors.New("rediscluster: pausing a node needs SIGSTOP (unix)")

// Pause is not available without unix signals.
func (n *Node) Pause() error { return errNoSignals }

// Resume is not available without unix signals.
func (n *Node) Resume() error { return errNoSignals }
