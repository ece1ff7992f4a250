//go:build unix

package redisserver

import (
	"fmt"
	"syscall"
	"time"
)

// PauseTimeout bounds the wait for a SIGSTOPped process to show as stopped.
const PauseTimeout = 10 * time.Second

// Pause sends SIGSTOP and returns once the kernel shows the process as
// stopped (see [WaitStopped]): from then on it answers nothing, and a
// replica acknowledges nothing, until Resume. Its clock keeps running, so
// keys expire by wall time.
func (s *Server) Pause() error {
	cmd, _ := s.current()
	if cmd == nil {
		return fmt.Errorf("redisserver: no process on port %d", s.Port)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("redisserver: SIGSTOP to %d: %w", cmd.Process.Pid, err)
	}
	return WaitStopped(cmd.Process.Pid, PauseTimeout)
}

// Resume sends SIGCONT after Pause.
func (s *Server) Resume() error {
	cmd, _ := s.current()
	if cmd == nil {
		return fmt.Errorf("redisserver: no process on port %d", s.Port)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("redisserver: SIGCONT to %d: %w", cmd.Process.Pid, err)
	}
	return nil
}
