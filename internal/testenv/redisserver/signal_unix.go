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
	pid, err := s.signal(syscall.SIGSTOP)
	if err != nil {
		return err
	}
	return WaitStopped(pid, PauseTimeout)
}

// Resume sends SIGCONT after Pause.
func (s *Server) Resume() error {
	_, err := s.signal(syscall.SIGCONT)
	return err
}

// signal sends sig to the current process and returns its id.
func (s *Server) signal(sig syscall.Signal) (int, error) {
	cmd, _ := s.current()
	if cmd == nil {
		return 0, fmt.Errorf("redisserver: no process on port %d", s.Port)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return 0, fmt.Errorf("redisserver: %v to %d: %w", sig, cmd.Process.Pid, err)
	}
	return cmd.Process.Pid, nil
}
