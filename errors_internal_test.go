package lock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// pastDeadline is a context whose deadline has passed but whose timer has
// not fired yet: Err is still nil, as for a moment after a deadline.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// dialTimeout returns a real dial timeout of package net, which matches
// context.DeadlineExceeded.
func dialTimeout(t *testing.T) error {
	t.Helper()
	d := net.Dialer{Timeout: time.Nanosecond}
	c, err := d.Dial("tcp", "127.0.0.1:1")
	if c != nil {
		c.Close()
	}
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a dial with a 1 ns timeout = %v; want a timeout matching context.DeadlineExceeded", err)
	}
	return err
}

// wrap classifies by the error's type and by the caller's ctx, never by
// the error's text: a context error is the caller's only when its ctx is
// done; a client's own timeout, or a text that looks like one of the
// lock's, is a backend failure.
func TestWrapClassifiesByTypeAndCtx(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	past := pastDeadline{context.Background()}

	dial := dialTimeout(t)
	read := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	lookalike := errors.New("lock: acquire \"x\": context deadline exceeded") // a client's text, not ours

	type want int
	const (
		ctxErr want = iota
		backendErr
	)
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want want
		is   error // the ctx error it must match, for ctxErr
	}{
		{"Canceled, ctx live (the Locker's own bound)", live, context.Canceled, backendErr, nil},
		{"Canceled, ctx cancelled", done, context.Canceled, ctxErr, context.Canceled},
		{"DeadlineExceeded, ctx expired", expired, context.DeadlineExceeded, ctxErr, context.DeadlineExceeded},
		{"DeadlineExceeded, deadline passed, timer not fired", past, context.DeadlineExceeded, ctxErr, context.DeadlineExceeded},
		{"a kind-marked ctx error, ctx cancelled", done, backend.WithKind(backend.KindUnknown, context.Canceled), ctxErr, context.Canceled},
		{"dial timeout, ctx live", live, dial, backendErr, nil},
		{"dial timeout, ctx expired (its deadline on the socket)", expired, dial, ctxErr, context.DeadlineExceeded},
		{"read timeout, ctx live", live, read, backendErr, nil},
		{"a client's text that looks like ours, ctx live", live, lookalike, backendErr, nil},
		{"a client's text that looks like ours, ctx cancelled", done, lookalike, backendErr, nil},
		{"a cleanup's timeout (nil ctx)", nil, context.DeadlineExceeded, backendErr, nil},
	} {
		got := wrap(c.ctx, "acquire", "x", c.err)
		var ce *ctxError
		var be *backendError
		switch c.want {
		case ctxErr:
			if !errors.As(got, &ce) || !errors.Is(got, c.is) || errors.Is(got, ErrBackend) || !cancelled(got) {
				t.Errorf("%s: wrap = %#v; want a ctx error matching %v, not ErrBackend", c.name, got, c.is)
			}
			if s := got.Error(); s != `lock: acquire "x": `+c.is.Error() {
				t.Errorf("%s: text %q", c.name, s)
			}
		case backendErr:
			if !errors.As(got, &be) || be.op != "acquire" || be.id != "x" || !errors.Is(got, ErrBackend) || !errors.Is(got, c.err) || cancelled(got) {
				t.Errorf("%s: wrap = %#v; want a *backendError matching ErrBackend and the client's error", c.name, got)
			}
		}
		if again := wrap(c.ctx, "other", "y", got); again != got {
			t.Errorf("%s: wrapping %q again gave %q; want it unchanged", c.name, got, again)
		}
	}
	if wrap(live, "acquire", "x", nil) != nil {
		t.Error("wrap(nil) != nil")
	}
	// A sentinel keeps its identity, wrapped once with the operation; a
	// wrapped sentinel is kept as it is.
	s := wrap(done, "release", "x", ErrNotHeld)
	if !errors.Is(s, ErrNotHeld) || errors.Is(s, ErrBackend) || s.Error() != `lock: not held (release "x")` {
		t.Errorf("wrap(ErrNotHeld) = %q", s)
	}
	if again := wrap(live, "do", "x", s); again != s {
		t.Errorf("wrap of a wrapped sentinel = %q; want it unchanged", again)
	}
	if !cancelled(wrap(live, "acquire", "x", ErrClosed)) {
		t.Error("ErrClosed must count as a cancellation")
	}
}

// joinErrs leaves out of its text an error that another one wraps (by
// identity, along Unwrap), and nothing else: a message that merely
// contains another's text is kept. Every joined error still matches.
func TestJoinErrsDedupsByIdentity(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ctxErr := wrap(cancelled, "acquire", "x", context.Canceled)
	reset := errors.New("reset")
	connReset := errors.New("connection reset")              // contains "reset", wraps nothing
	leave := wrap(context.Background(), "leave", "x", reset) // wraps reset

	for _, c := range []struct {
		name string
		errs []error
		text string
	}{
		{"the bare ctx error and ours", []error{context.Canceled, ctxErr}, `lock: acquire "x": context canceled`},
		{"ours and the bare ctx error", []error{ctxErr, context.Canceled}, `lock: acquire "x": context canceled`},
		{"one error twice", []error{ctxErr, nil, ctxErr}, `lock: acquire "x": context canceled`},
		{"a substring is no duplicate", []error{reset, connReset}, "reset; connection reset"},
		{"a wrapper replaces what it wraps, in place", []error{reset, ctxErr, leave}, `lock: backend leave "x": reset; lock: acquire "x": context canceled`},
		{"a match by an Is method is no duplicate", []error{leave, ErrBackend}, `lock: backend leave "x": reset; lock: backend error`},
	} {
		err := joinErrs(c.errs...)
		if got := err.Error(); got != c.text {
			t.Errorf("%s: text %q; want %q", c.name, got, c.text)
		}
		for _, e := range c.errs {
			if e != nil && !errors.Is(err, e) {
				t.Errorf("%s: %q does not match %v", c.name, err, e)
			}
		}
	}
	if joinErrs(nil, nil) != nil {
		t.Error("joinErrs of nils != nil")
	}
	if joinErrs(nil, reset) != reset {
		t.Error("joinErrs of one error must return it as it is")
	}
	// An error of a type that cannot be compared with == is no trouble:
	// it is never taken for another.
	un := uncomparable{[]int{1}}
	if got := joinErrs(un, fmt.Errorf("x: %w", uncomparable{[]int{2}})).Error(); got != "uncomparable; x: uncomparable" {
		t.Errorf("joinErrs with uncomparable errors = %q", got)
	}
}

// uncomparable is an error whose dynamic type cannot be compared with ==.
type uncomparable struct{ s []int }

func (uncomparable) Error() string { return "uncomparable" }
