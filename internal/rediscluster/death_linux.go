package rediscluster

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill a node when the test process
// dies, so that a crashed or killed test binary leaves no server behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
