//go:build unix

package redisserver

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// LockFile is the file whose flock is the machine-wide lock of Exclusive.
var LockFile = filepath.Join(os.TempDir(), "redislocker-lock-redis-tests.lock")

// Exclusive blocks until this process holds the machine-wide lock of the
// test binaries that start redis-servers (a flock on LockFile), and
// returns its release. The kernel releases it when the process exits, so
// a TestMain may take it and never release it. Two test binaries holding
// it never run at once, whatever go test's -p: heavy tests, which start
// several servers and check bounded delays, do not starve each other.
func Exclusive() (release func(), err error) {
	f, err := os.OpenFile(LockFile, os.O_CREATE|os.O_RDONLY, 0o666) // read-only: another user's file still locks
	if err != nil {
		return nil, fmt.Errorf("redisserver: machine-wide test lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("redisserver: flock %s: %w", LockFile, err)
	}
	return func() { _ = f.Close() }, nil
}
