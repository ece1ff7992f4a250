// Package locktest holds helpers for tests that drive a Locker: what
// several test packages do the same way.
package locktest

import (
	"context"
	"errors"
	"time"

	"github.com/redislocker/lock"
)

// Worked counts what WorkAll saw.
type Worked struct {
	Snapshots int // snapshots the stream yielded
	Released  int // leases released without error
	NotHeld   int // releases answered ErrNotHeld: the lease was lost
}

// WorkAll acquires ids with l.AcquireMany for ttl (with opts) and, as each
// snapshot comes, works on each lease it holds (sleeps each) and releases
// it. An error of the stream, or of a release other than ErrNotHeld, ends
// it.
func WorkAll(ctx context.Context, l *lock.Locker, ids []string, ttl, each time.Duration, opts *lock.AcquireOptions) (Worked, error) {
	var w Worked
	for snap, err := range l.AcquireMany(ctx, ids, ttl, opts) {
		if err != nil {
			return w, err
		}
		w.Snapshots++
		for _, le := range snap.Acquired {
			time.Sleep(each) // the work on one id
			switch err := le.Release(ctx); {
			case err == nil:
				w.Released++
			case errors.Is(err, lock.ErrNotHeld):
				w.NotHeld++
			default:
				return w, err
			}
		}
	}
	return w, nil
}
