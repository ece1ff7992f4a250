//go:build !linux

package rediscluster

import "os/exec"

func setDeathSignal(cmd *exec.Cmd) {}
