package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// callLog is a fakeClient that also keeps the calls it was sent, but the
// wire check's (which the fakeClient answers apart).
type callLog struct {
	*fakeClient
	calls []Call
}

func (c *callLog) Eval(ctx context.Context, call Call, via Via) Reply {
	if call.Script.Name != scripts.Wire.Name {
		c.calls = append(c.calls, call)
	}
	return c.fakeClient.Eval(ctx, call, via)
}

func newCallLog(cfg Config, resendBroken bool, replies ...Reply) (*Runner, *callLog) {
	c := &callLog{fakeClient: &fakeClient{replies: replies}}
	return newTestBackend(cfg, c, false, resendBroken), c
}

// ForceRelease sends one force_release call with the id's keys, the
// fence, and the Backend's purge limit and wake-up command.
func TestForceReleaseCall(t *testing.T) {
	cfg := testConfig(t)
	cfg.Keys, _ = ParsePrefix("p:")
	cfg.Limits.PurgeLimit = 7
	cfg.Sharded = true
	s, c := newCallLog(cfg, false, Reply{Ints: []int64{1}})
	if err := s.ForceRelease(context.Background(), "job", 42); err != nil {
		t.Fatal(err)
	}
	if len(c.calls) != 1 {
		t.Fatalf("%d calls, want 1", len(c.calls))
	}
	ks, _ := keys.New("p:")
	wantKeys, wantArgs := scripts.ForceReleaseCall(ks.OneServer().For("job"), 42, 7, scripts.Sharded) // not Cluster: one fence key
	got := c.calls[0]
	if got.Script.Name != scripts.ForceRelease.Name ||
		strings.Join(got.Keys, " ") != strings.Join(wantKeys, " ") || strings.Join(got.Args, " ") != strings.Join(wantArgs, " ") {
		t.Fatalf("call %s %q %q, want %s %q %q", got.Script.Name, got.Keys, got.Args, scripts.ForceRelease.Name, wantKeys, wantArgs)
	}
}

// Bad input is an ArgumentError naming the argument, and sends nothing.
func TestForceReleaseBadInput(t *testing.T) {
	for _, tc := range []struct {
		id    string
		fence uint64
		arg   string
	}{
		{"", 1, "id"},
		{strings.Repeat("x", backend.MaxIDLength+1), 1, "id"},
		{"job", 0, "fence"},
	} {
		s, c := newCallLog(testConfig(t), false)
		err := s.ForceRelease(context.Background(), tc.id, tc.fence)
		var ae *backend.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != tc.arg || !errors.Is(err, backend.ErrInvalidArgument) || len(c.calls) != 0 {
			t.Errorf("ForceRelease(%d-byte id, %d) = %v after %d calls, want an ArgumentError for %s and no call", len(tc.id), tc.fence, err, len(c.calls), tc.arg)
		}
	}
	s, c := newCallLog(testConfig(t), false)
	s.Close()
	if err := s.ForceRelease(context.Background(), "job", 1); !errors.Is(err, backend.ErrClosed) || len(c.calls) != 0 {
		t.Fatalf("on closed steps: %v after %d calls, want ErrClosed and no call", err, len(c.calls))
	}
}

// A refusal matches ErrNotHeld, is the store's answer, and says why;
// other error replies do not match it.
func TestForceReleaseRefused(t *testing.T) {
	notHeld := Reply{Err: errors.New("LOCKNOTHELD the holder has fence 7, not 42")}
	s, _ := newCallLog(testConfig(t), false, notHeld)
	err := s.ForceRelease(context.Background(), "job", 42)
	if !errors.Is(err, backend.ErrNotHeld) || backend.KindOf(err) != backend.KindAnswer ||
		err.Error() != "not released: the holder has fence 7, not 42" {
		t.Fatalf("refused: %v (kind %v), want ErrNotHeld saying why", err, backend.KindOf(err))
	}
	s, _ = newCallLog(testConfig(t), false, Reply{Err: errors.New("LOCKBADARG fence: must be a positive integer")})
	if err := s.ForceRelease(context.Background(), "job", 42); err == nil || errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("LOCKBADARG: %v, want an error that is not ErrNotHeld", err)
	}
}

// A forced release resent after a broken connection that the server
// answers "not held" has an unknown outcome: the first send may have
// released the lock. A first send that never left is not a maybe.
func TestForceReleaseResent(t *testing.T) {
	notHeld := Reply{Err: errors.New("LOCKNOTHELD the id is not held")}
	s, c := newCallLog(testConfig(t), true, Reply{Err: errReset}, notHeld)
	err := s.ForceRelease(context.Background(), "job", 42)
	if len(c.calls) != 2 || errors.Is(err, backend.ErrNotHeld) || !errors.Is(err, errReset) || backend.KindOf(err) != backend.KindUnknown {
		t.Fatalf("reset then not held: %v (kind %v) after %d calls, want the first failure, of unknown outcome", err, backend.KindOf(err), len(c.calls))
	}
	s, _ = newCallLog(testConfig(t), true, Reply{Err: errRefused}, notHeld)
	if err := s.ForceRelease(context.Background(), "job", 42); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("refused then not held: %v, want ErrNotHeld", err)
	}
}
