//go:build unix

package rediscluster

import (
	"fmt"
	"syscall"
)

// Pause stops the node's process (SIGSTOP): it answers nothing, and a
// replica acknowledges nothing, until Resume.
func (n *Node) Pause() error { return n.signal(syscall.SIGSTOP) }

// Resume continues a paused node's process (SIGCONT).
func (n *Node) Resume() error { return n.signal(syscall.SIGCONT) }

func (n *Node) signal(s syscall.Signal) error {
	if n.cmd == nil {
		return fmt.Errorf("rediscluster: node %s was not started here", n.Addr)
	}
	return n.cmd.Process.Signal(s)
}
