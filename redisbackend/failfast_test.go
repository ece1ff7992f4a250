package redisbackend

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// With nothing listening, an Acquire fails after its one step: a step that
// never reached the server is not followed by a cleanup round trip.
func TestWrongPortCostsOneCommand(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: testkit.ClosedAddr(t), DialerRetries: 1, MaxRetries: -1})
	defer client.Close()
	cnt := &counter{}
	client.AddHook(cnt)
	b, err := concrete(New(client, nil))
	if err != nil {
		t.Fatal(err)
	}
	l, err := lock.New(b, &lock.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = l.Acquire(ctx, "x", time.Second, nil)
	if !errors.Is(err, lock.ErrBackend) || !fallback.Unsent(err) {
		t.Fatalf("Acquire with nothing listening = %v; want a backend error of a step that was never sent", err)
	}
	if cmds, _, names := cnt.Take(); cmds != 1 {
		t.Fatalf("Acquire with nothing listening attempted %d commands (%s), want 1: no cleanup after a step that never reached the server", cmds, names)
	}
}

// The client's errors are classified: a dial failure and a closed client
// are unsent, a reply is the server's answer.
func TestKind(t *testing.T) {
	adaptertest.Kinds(t, commands{}.Classify, map[error]backend.Kind{redis.ErrClosed: backend.KindUnsent})
}
