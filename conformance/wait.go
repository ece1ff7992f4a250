package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/redislocker/lock"
)

// eventually polls cond until it holds or timeout passes, and reports
// whether it held. The poll interval starts at 1ms and grows to 10ms.
func eventually(t testing.TB, timeout time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return cond()
		}
		timer.Reset(wait)
		<-timer.C
		if wait < 10*time.Millisecond {
			wait += wait / 2
		}
	}
}

// waitFor is eventually, failing the subtest with what when cond does not
// hold in time.
func (e *env) waitFor(timeout time.Duration, what string, cond func() bool) {
	e.t.Helper()
	if !eventually(e.t, timeout, cond) {
		e.fatalf("%s: not within %v", what, timeout)
	}
}

// waitUntil blocks until the clock passes at (a known time, such as a TTL
// running out: there is no condition to poll).
func waitUntil(at time.Time) {
	d := time.Until(at)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}

// pending is an Acquire running in the background.
type pending struct {
	done  chan struct{}
	res   lock.Result
	err   error
	start time.Time
	end   time.Time
}

// acquireAsync starts l.Acquire(ctx, id, ttl) in a goroutine.
func (e *env) acquireAsync(ctx context.Context, l *lock.Locker, id string, ttl time.Duration) *pending {
	p := &pending{done: make(chan struct{}), start: time.Now()}
	e.goFn(func() {
		defer close(p.done)
		p.res, p.err = l.Acquire(ctx, id, ttl, nil)
		p.end = time.Now()
	})
	return p
}

// queuedAsync starts an Acquire of id by l in the background, as
// acquireAsync does, and waits until s, l's spy, has seen it queued.
func (e *env) queuedAsync(ctx context.Context, l *lock.Locker, s *spy, id string, ttl time.Duration) *pending {
	e.t.Helper()
	p := e.acquireAsync(ctx, l, id, ttl)
	e.waitFor(prompt, "the waiter queued", func() bool { return s.queued(id) })
	return p
}

// wait waits up to timeout for the Acquire to return, failing the subtest
// with what otherwise.
func (p *pending) wait(e *env, timeout time.Duration, what string) (lock.Result, error) {
	e.t.Helper()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.res, p.err
	case <-t.C:
		e.fatalf("%s: the Acquire did not return within %v", what, timeout)
		return lock.Result{}, nil
	}
}

// granted waits up to timeout for the Acquire to be granted, failing the
// subtest otherwise, and returns the lease.
func (p *pending) granted(e *env, timeout time.Duration, what string) *lock.Lease {
	e.t.Helper()
	res, err := p.wait(e, timeout, what)
	if err != nil || !res.Acquired || res.Lease == nil {
		e.fatalf("%s: Acquired=%v Lease=%v err=%v, want a lease", what, res.Acquired, res.Lease != nil, err)
	}
	return res.Lease
}
