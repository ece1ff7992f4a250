package adaptertest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

// Wakes collects the wake-ups delivered to one subscriber: pass its Fn to
// Subscribe.
type Wakes struct{ ch chan backend.Wake }

// NewWakes returns an empty collector.
func NewWakes() *Wakes { return &Wakes{ch: make(chan backend.Wake, 1000)} }

// Subscribe subscribes a new collector to id on b, failing t on an error,
// and returns it and the subscription's cancel.
func Subscribe(t testing.TB, b backend.Backend, id string) (*Wakes, func()) {
	t.Helper()
	w := NewWakes()
	cancel, err := b.Subscribe(context.Background(), id, w.Fn)
	if err != nil {
		t.Fatal(err)
	}
	return w, cancel
}

// Subscribed is Subscribe with the subscription cancelled when t ends.
func Subscribed(t testing.TB, b backend.Backend, id string) *Wakes {
	t.Helper()
	w, cancel := Subscribe(t, b, id)
	t.Cleanup(cancel)
	return w
}

// Fn receives one wake-up. It panics when the buffer is full, which only
// a test that never reads its wake-ups reaches.
func (w *Wakes) Fn(x backend.Wake) {
	select {
	case w.ch <- x:
	default:
		panic("test wake buffer full")
	}
}

// Next returns the next wake-up, failing after [Deadline].
func (w *Wakes) Next(t testing.TB) backend.Wake {
	t.Helper()
	return w.NextMatching(t, "wake-up", func(backend.Wake) bool { return true })
}

// Expect fails t unless the next wake-up, the one after what, is want.
func (w *Wakes) Expect(t testing.TB, what string, want backend.Wake) {
	t.Helper()
	if got := w.Next(t); got != want {
		t.Fatalf("%s: %+v, want %+v", what, got, want)
	}
}

// NextMatching returns the first wake-up that satisfies ok, skipping
// others (e.g. a Wake{All} of a reconnect that raced the test's step).
// It fails after [Deadline].
func (w *Wakes) NextMatching(t testing.TB, what string, ok func(backend.Wake) bool) backend.Wake {
	t.Helper()
	deadline := time.After(Deadline)
	for {
		select {
		case x := <-w.ch:
			if ok(x) {
				return x
			}
		case <-deadline:
			t.Fatalf("no %s within %v", what, Deadline)
			return backend.Wake{}
		}
	}
}

// Until returns the wake-ups delivered before the first one with the
// given token (a marker published by the test), so that a test can state
// that nothing else arrived without sleeping.
func (w *Wakes) Until(t testing.TB, marker string) []backend.Wake {
	t.Helper()
	var got []backend.Wake
	for {
		x := w.Next(t)
		if x.Token == marker {
			return got
		}
		got = append(got, x)
	}
}

// None fails if a wake-up arrives within d: d is a measuring window, not
// a wait for something to happen.
func (w *Wakes) None(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case x := <-w.ch:
		t.Fatalf("unexpected wake-up %+v", x)
	case <-time.After(d):
	}
}

// Drain returns the wake-ups delivered so far.
func (w *Wakes) Drain() []backend.Wake {
	var out []backend.Wake
	for {
		select {
		case x := <-w.ch:
			out = append(out, x)
		default:
			return out
		}
	}
}

// InboxMsg returns the message a script sends to a process's inbox for a
// waiter of id: the length of id's hash tag, a colon, the tag, then
// payload (":<token>" or "<holder ttl ms>:<token>").
func InboxMsg(id, payload string) string {
	enc := keys.Encode(id)
	return strconv.Itoa(len(enc)) + ":" + enc + payload
}

// IsGrant reports whether x is the wake-up of a grant by hand-off of id to
// token (backend.HandOffer).
func IsGrant(x backend.Wake, id, token string) bool {
	return x.ID == id && x.Token == token && x.Grant != nil && !x.All && x.HolderTTL == 0 &&
		x.Grant.Fence > 0 && x.Grant.TTL > 0 && !x.Grant.StoreTime.IsZero()
}

// HandOff queues token as a waiter of id through waiter, releases id's
// holder, holderToken, through holder, and checks that w hears token's
// grant: the release hands the lock to the head.
func HandOff(t testing.TB, w *Wakes, holder, waiter backend.Backend, id, holderToken, token string) {
	t.Helper()
	if g := MustAcquire(t, waiter, Req(id, token, true)); !g.Queued {
		t.Fatalf("%s's Acquire of %q = %+v, want queued", token, id, g)
	}
	if err := holder.Release(context.Background(), id, holderToken); err != nil {
		t.Fatal(err)
	}
	if x := w.Next(t); !IsGrant(x, id, token) {
		t.Fatalf("wake after %s's release = %+v, want %s's grant", holderToken, x, token)
	}
}
