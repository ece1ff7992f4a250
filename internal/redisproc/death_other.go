//go:build !linux

package redisproc

import "os/exec"

func setDeathSignal(cmd *exec.Cmd) {}
