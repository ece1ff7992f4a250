package lock

import (
	"context"
	"sync"
	"time"
)

// lifecycle is a Locker's life: the calls in flight, the steps that no
// caller waits for any more (stray steps), and the signal of Close. The
// other parts of a Locker watch done (or ctx) to stop; a call in flight
// keeps Close waiting until it returns.
type lifecycle struct {
	done   chan struct{}   // closed by shut
	ctx    context.Context // cancelled by shut: the context of background steps
	cancel context.CancelFunc
	calls  sync.WaitGroup // calls in flight
	steps  tracker        // stray steps and their cleanups

	mu     sync.Mutex
	closed bool

	once     sync.Once
	closeErr error
}

func newLifecycle() *lifecycle {
	ctx, cancel := context.WithCancel(context.Background())
	return &lifecycle{done: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// begin registers a call in flight; it fails once the Locker is closing.
func (lc *lifecycle) begin() error {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.closed {
		return ErrClosed
	}
	lc.calls.Add(1)
	return nil
}

// end ends a call that begin registered.
func (lc *lifecycle) end() { lc.calls.Done() }

// shut refuses new calls, tells the waiting ones and the background loops
// to stop (done), cancels the background steps, and waits for the calls
// in flight to return.
func (lc *lifecycle) shut() {
	lc.mu.Lock()
	lc.closed = true
	close(lc.done)
	lc.cancel()
	lc.mu.Unlock()
	lc.calls.Wait()
}

// closeOnce runs f the first time it is called, and returns its
// error then and on every later call.
func (lc *lifecycle) closeOnce(f func() error) error {
	lc.once.Do(func() { lc.closeErr = f() })
	return lc.closeErr
}

// closing reports whether shut has begun.
func (lc *lifecycle) closing() bool {
	select {
	case <-lc.done:
		return true
	default:
		return false
	}
}

// goStep runs f, a backend step that no caller waits for, in a goroutine
// that Close waits for like a stray step of await.
func (lc *lifecycle) goStep(f func()) {
	lc.steps.add()
	go func() {
		defer lc.steps.done()
		f()
	}()
}

// tracker counts the goroutines of steps that no caller waits for.
type tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // made by wait, closed when n drops to 0
}

func (t *tracker) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
	t.mu.Unlock()
}

// wait waits until no step runs, for d at most, and returns the number
// still running.
func (t *tracker) wait(d time.Duration) int {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return 0
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	idle := t.idle
	t.mu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-idle:
		return 0
	case <-timer.C:
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}
