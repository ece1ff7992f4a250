package lock_test

import (
	"io"
	"log/slog"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// mustLocker is lock.New for set-up with valid options.
func mustLocker(b backend.Backend, o *lock.Options) *lock.Locker {
	return testkit.Must(lock.New(b, o))
}

// quietLogger returns a Logger that writes nothing, for Lockers whose
// warnings a test expects.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
