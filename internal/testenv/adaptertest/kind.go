package adaptertest

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/engine"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// Kinds checks an adapter's error classification: the cases every client
// shares (no error is a plain answer, a refused dial is KindUnsent, a
// connection cut mid-reply is KindUnknown), then the adapter's own cases
// (each of kind unsent or unknown, not refused).
func Kinds(t *testing.T, classify func(error) (backend.Kind, engine.Refusal), own map[error]backend.Kind) {
	t.Helper()
	_, dialErr := net.Dial("tcp", testkit.ClosedAddr(t))
	cases := map[error]backend.Kind{
		nil:                 backend.KindAnswer,
		dialErr:             backend.KindUnsent,
		io.ErrUnexpectedEOF: backend.KindUnknown,
	}
	for err, want := range own {
		cases[err] = want
	}
	for err, want := range cases {
		if got, r := classify(err); got != want || r != engine.NotRefused {
			t.Errorf("Classify(%v) = %v, %d; want %v, not refused", err, got, r, want)
		}
	}
}

// IsArgumentError reports whether err is a *backend.ArgumentError (matching
// backend.ErrInvalidArgument) whose Arg starts with arg.
func IsArgumentError(err error, arg string) bool {
	var ae *backend.ArgumentError
	return errors.As(err, &ae) && errors.Is(err, backend.ErrInvalidArgument) && strings.HasPrefix(ae.Arg, arg)
}
