//go:build !linux

package redisserver

import (
	"os/exec"
	"time"
)

// SetDeathSignal does nothing outside Linux: the servers of a test binary
// that dies are left running.
func SetDeathSignal(cmd *exec.Cmd) {}

// WaitStopped cannot read a process's state outside Linux; it returns at
// once, and a test relying on a SIGSTOP may race it there.
func WaitStopped(pid int, d time.Duration) error { return nil }
