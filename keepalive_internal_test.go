package lock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redislocker/lock/memorybackend"
)

// warnLog is a slog.Handler that keeps the messages logged at Warn or
// above.
type warnLog struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnLog) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnLog) WithGroup(string) slog.Handler                { return w }
func (w *warnLog) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	w.msgs = append(w.msgs, r.Message)
	w.mu.Unlock()
	return nil
}

func (w *warnLog) messages() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// warnLocker returns a Locker on a new memorybackend that logs to a
// warnLog, closed at the end of t.
func warnLocker(t *testing.T) (*Locker, *warnLog) {
	t.Helper()
	warns := &warnLog{}
	b, err := memorybackend.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(b, &Options{Logger: slog.New(warns)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, warns
}

// A kept-alive lease that a Release ends while the keep-alive tick runs
// is no lease that expired before it could be extended: nothing is
// logged. Both interleavings are set up by hand: the tick finds the lease
// after Release set its state and before Release took it off the kept
// leases (extendDue), and the tick took it before the Release and finds
// it released once it holds the lease's step lock (extendChunk).
func TestKeepAliveTickAfterReleaseLogsNothing(t *testing.T) {
	l, warns := warnLocker(t)
	ctx := context.Background()
	acquire := func(id string) *Lease {
		t.Helper()
		res, err := l.Acquire(ctx, id, time.Minute, &AcquireOptions{KeepAlive: true})
		if err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		return res.Lease
	}

	// extendDue: the state is released, the lease still kept, and due.
	le := acquire("a")
	le.mu.Lock()
	le.state = released
	le.closeLost()
	le.mu.Unlock()
	l.keeper.mu.Lock()
	le.due = time.Now()
	l.keeper.mu.Unlock()
	l.keeper.extendDue()

	// extendChunk: the tick holds a lease that was released since.
	le = acquire("b")
	if err := le.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if failed, expired, err := l.keeper.extendChunk([]*Lease{le}, time.Now().Add(time.Second)); failed != 0 || expired != 0 || err != nil {
		t.Errorf("extendChunk of a released lease: %d failed, %d expired, %v; want nothing", failed, expired, err)
	}

	if msgs := warns.messages(); len(msgs) > 0 {
		t.Errorf("keep-alive ticks that met released leases logged %q; want nothing", msgs)
	}
	l.keeper.mu.Lock()
	kept := len(l.keeper.kept)
	l.keeper.mu.Unlock()
	if kept != 0 {
		t.Errorf("%d released leases still kept alive; want none", kept)
	}
}

// Do stays quiet about what its caller asked for or is told anyway: a
// skip with NoWait and fn's error log nothing at Warn or above; a queue
// timeout still logs a warning.
func TestDoQuietByDefault(t *testing.T) {
	l, warns := warnLocker(t)
	ctx := context.Background()
	res, err := l.Acquire(ctx, "job", time.Minute, nil)
	if err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	fn := func(context.Context, *Lease) (int, error) { return 0, errors.New("fn failed") }
	if _, err := Do(ctx, l, "job", time.Minute, fn, &AcquireOptions{NoWait: true}); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Do with NoWait on a held id: %v, want ErrNotAcquired", err)
	}
	if _, err := Do(ctx, l, "other", time.Minute, fn, nil); err == nil || err.Error() != "fn failed" {
		t.Fatalf("Do whose fn fails: %v, want fn's error", err)
	}
	if msgs := warns.messages(); len(msgs) > 0 {
		t.Errorf("a NoWait skip and fn's error logged %q at Warn or above; want nothing", msgs)
	}
	if _, err := Do(ctx, l, "job", time.Minute, fn, &AcquireOptions{QueueTimeout: time.Millisecond}); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Do with a queue timeout on a held id: %v, want ErrNotAcquired", err)
	}
	if msgs := warns.messages(); len(msgs) != 1 {
		t.Errorf("a queue timeout in Do logged %q; want one warning", msgs)
	}
}
