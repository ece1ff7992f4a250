package lock_test

import (
	"io"
	"log/slog"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
)

// must returns v, and panics on err: for test set-up whose input is known
// to be valid (nil options never fail).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// mustLocker is lock.New for set-up with valid options.
func mustLocker(b backend.Backend, o *lock.Options) *lock.Locker {
	return must(lock.New(b, o))
}

// quietLogger returns a Logger that writes nothing, for Lockers whose
// warnings a test expects.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
