package redisserver

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// SetDeathSignal makes the kernel kill cmd's process when the process that
// started it dies, so that a crashed or killed test binary leaves nothing
// behind.
func SetDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// WaitStopped polls /proc/<pid>/stat until the process's state is "T"
// (stopped by a signal), so that a test relies on a SIGSTOP only once it
// took effect. It fails after d, naming the last state seen.
func WaitStopped(pid int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		state, err := procState(pid)
		if err == nil && state == "T" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped within %v after SIGSTOP: state %q, %v", pid, d, state, err)
		}
		time.Sleep(time.Millisecond) // poll interval of a condition with a deadline
	}
}

// procState returns the state letter of /proc/<pid>/stat: the field after
// the parenthesised command name.
func procState(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+3 > len(s) {
		return "", fmt.Errorf("unexpected /proc/%d/stat: %q", pid, s)
	}
	return s[i+2 : i+3], nil
}
