package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// fakeClient answers each Eval with the next reply of its script; it
// answers the wire check with wire, apart (its calls are not in sent).
type fakeClient struct {
	replies []Reply
	sent    []Via      // how each Eval went, but the wire check's
	wire    Reply      // the wire check's reply
	wires   int        // wire checks sent
	onWire  func(Call) // when set, sees each wire check's call
}

var (
	errNoScript = errors.New("NOSCRIPT")
	errRefused  = errors.New("refused")
	errReset    = errors.New("reset")
)

func (f *fakeClient) Eval(_ context.Context, c Call, via Via) Reply {
	if c.Script.Name == scripts.Wire.Name {
		f.wires++
		if f.onWire != nil {
			f.onWire(c)
		}
		return f.wire
	}
	f.sent = append(f.sent, via)
	r := f.replies[0]
	f.replies = f.replies[1:]
	return r
}

func (f *fakeClient) EvalAll(ctx context.Context, calls []Call, via Via) []Reply {
	out := make([]Reply, len(calls))
	for i, c := range calls {
		out[i] = f.Eval(ctx, c, via)
	}
	return out
}

func (f *fakeClient) Classify(err error) (backend.Kind, Refusal) {
	switch err {
	case nil:
		return backend.KindAnswer, NotRefused
	case errNoScript:
		return backend.KindAnswer, NoScript
	case errRefused:
		return backend.KindUnsent, NotRefused
	case errReset:
		return backend.KindUnknown, NotRefused
	}
	return backend.KindAnswer, NotRefused
}

func newFake(t *testing.T, resendBroken bool, replies ...Reply) (*Runner, *fakeClient) {
	t.Helper()
	f := &fakeClient{replies: replies}
	return newTestBackend(testConfig(t), f, false, resendBroken), f
}

// A NOSCRIPT reply is followed by the same call as EVAL.
func TestNoScriptFallsBackToEval(t *testing.T) {
	s, f := newFake(t, false, Reply{Err: errNoScript}, Reply{})
	if err := s.Extend(context.Background(), "x", "T", time.Second); err != nil {
		t.Fatal(err)
	}
	if len(f.sent) != 2 || f.sent[0] != EvalSHA || f.sent[1] != Eval {
		t.Fatalf("sent (via) %v, want EVALSHA then EVAL", f.sent)
	}
}

// A round trip that never reached the server is unsent; one whose resend
// never reached it, after a first try that may have, is unknown.
func TestFailureKinds(t *testing.T) {
	s, _ := newFake(t, false, Reply{Err: errRefused})
	if err := s.Extend(context.Background(), "x", "T", time.Second); !fallback.Unsent(err) || !errors.Is(err, errRefused) {
		t.Fatalf("refused = %v, want an unsent error matching the client's", err)
	}
	s, f := newFake(t, true, Reply{Err: errReset}, Reply{Err: errRefused})
	err := s.Extend(context.Background(), "x", "T", time.Second)
	if len(f.sent) != 2 {
		t.Fatalf("sent %d times, want the step resent once", len(f.sent))
	}
	if fallback.Unsent(err) || backend.KindOf(err) != backend.KindUnknown {
		t.Fatalf("reset then refused = %v (kind %v), want unknown: the first try may have run", err, backend.KindOf(err))
	}
	s, _ = newFake(t, false, Reply{Err: errors.New("LOCKNOTHELD the token does not hold the lock")})
	if err := s.Extend(context.Background(), "x", "T", time.Second); !errors.Is(err, backend.ErrNotHeld) || backend.KindOf(err) != backend.KindAnswer {
		t.Fatalf("not held = %v, want ErrNotHeld, the store's answer", err)
	}
}

// A release resent after a broken connection that the server answers "not
// held" is not held: had the first send released the lock, the resend
// (the same call, naming the same release records) would have found its
// mark and answered done, whatever grants and releases came in between.
func TestResentReleaseNotHeldIsTheAnswer(t *testing.T) {
	notHeld := Reply{Err: errors.New("LOCKNOTHELD the token does not hold the lock")}
	s, f := newFake(t, true, Reply{Err: errReset}, notHeld)
	err := s.Release(context.Background(), "x", "T")
	if len(f.sent) != 2 {
		t.Fatalf("sent %d times, want the release resent once", len(f.sent))
	}
	if !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("reset then not held = %v (kind %v), want ErrNotHeld, the store's answer", err, backend.KindOf(err))
	}

	// Without a failed first send, "not held" is the store's answer.
	s, _ = newFake(t, true, notHeld)
	if err := s.Release(context.Background(), "x", "T"); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("not held = %v, want ErrNotHeld", err)
	}
	// A first send that never left is not a maybe: its resend's answer holds.
	s, _ = newFake(t, true, Reply{Err: errRefused}, notHeld)
	if err := s.Release(context.Background(), "x", "T"); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("refused then not held = %v, want ErrNotHeld", err)
	}
}
