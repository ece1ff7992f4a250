package wakeup

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// Callbacks are delivered in order, removed by key, and a snapshot taken
// before a change is not affected by it.
func TestListCopyOnWrite(t *testing.T) {
	var l List
	var got []string
	a := l.Add(func(backend.Wake) { got = append(got, "a") })
	l.Add(func(backend.Wake) { got = append(got, "b") })
	before := l.Snapshot()
	l.Add(func(backend.Wake) { got = append(got, "c") })
	if left := l.Remove(a); left != 2 || l.Len() != 2 {
		t.Fatalf("Remove left %d (Len %d), want 2", left, l.Len())
	}
	before.Deliver(backend.Wake{})
	l.Snapshot().Deliver(backend.Wake{})
	if want := "a b b c"; join(got) != want {
		t.Fatalf("delivered %q, want %q (an old snapshot keeps its callbacks)", join(got), want)
	}
	if l.Remove(12345) != 2 {
		t.Fatal("removing an unknown key changed the list")
	}
}

func join(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}

// Await returns cancel once confirmed; on a failure after confirmation,
// on ctx's end, or on close, it unsubscribes once and returns the error.
func TestAwait(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	open := make(chan struct{})
	boom := errors.New("boom")
	live := context.Background()
	ctx, stop := context.WithCancel(context.Background())
	stop()
	for _, c := range []struct {
		name           string
		ctx            context.Context
		ready, closing chan struct{}
		failed         func() error
		want           error
		unsubs         int
	}{
		{"confirmed", live, closed, open, nil, nil, 0},
		{"confirmed, then failed", live, closed, open, func() error { return boom }, boom, 1},
		{"ctx ended", ctx, open, open, nil, context.Canceled, 1},
		{"closing", live, open, closed, nil, backend.ErrClosed, 1},
	} {
		n := 0
		cancel, err := Await(c.ctx, c.ready, c.closing, c.failed, func() { n++ })
		if !errors.Is(err, c.want) || (err == nil) != (cancel != nil) {
			t.Fatalf("%s: Await = %v, cancel set %v; want %v", c.name, err, cancel != nil, c.want)
		}
		if cancel != nil {
			cancel()
			cancel()
		}
		if want := c.unsubs; cancel != nil {
			want = 1
			if n != want {
				t.Fatalf("%s: unsubscribed %d times after two cancels, want once", c.name, n)
			}
		} else if n != want {
			t.Fatalf("%s: unsubscribed %d times, want %d", c.name, n, want)
		}
	}
}

// NextDelay starts at MinDelay, doubles, and stops at MaxDelay.
func TestNextDelay(t *testing.T) {
	var got []time.Duration
	for d := time.Duration(0); d < MaxDelay; {
		d = NextDelay(d)
		got = append(got, d)
	}
	if got[0] != MinDelay || got[1] != 2*MinDelay || got[len(got)-1] != MaxDelay || NextDelay(MaxDelay) != MaxDelay {
		t.Fatalf("delays %v", got)
	}
}

// Sleep returns true after d, and false at once when done is closed; a
// Life's Done closes at End.
func TestSleepAndLife(t *testing.T) {
	if !Sleep(nil, time.Millisecond) {
		t.Fatal("Sleep with no done = false")
	}
	l := NewLife()
	if l.Ended() || l.Ctx().Err() != nil {
		t.Fatal("a new Life has ended")
	}
	l.End()
	l.End() // again: nothing
	if !l.Ended() || l.Ctx().Err() == nil || Sleep(l.Done(), time.Hour) {
		t.Fatal("Life.End did not end it")
	}
}

// Receive delivers to the entry find returns, with mu held only while
// find runs, and to nobody when find returns nil.
func TestReceive(t *testing.T) {
	var mu sync.Mutex
	e := NewEntry("x", "ch")
	var got []backend.Wake
	e.Fns.Add(func(w backend.Wake) {
		if mu.TryLock() {
			mu.Unlock()
		} else {
			t.Error("delivered with the lock held")
		}
		got = append(got, w)
	})
	Receive(&mu, func() *Entry { return &e }, "1:x:T")
	Receive(&mu, func() *Entry { return &e }, "T") // no wake-up: nothing delivered
	Receive(&mu, func() *Entry { return nil }, "1:x:U")
	if len(got) != 1 || got[0] != (backend.Wake{ID: "x", Token: "T"}) {
		t.Fatalf("delivered %+v, want one {x T}", got)
	}
}
