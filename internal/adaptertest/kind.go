package adaptertest

import (
	"io"
	"net"
	"testing"

	"github.com/redislocker/lock/internal/redisstep"
	"github.com/redislocker/lock/internal/testkit"
)

// Kinds checks an adapter's error classification: the cases every client
// shares (no error is KindOK, a refused dial is KindUnsent, a connection
// cut mid-reply is KindUnknown), then the adapter's own cases.
func Kinds(t *testing.T, kind func(error) redisstep.Kind, own map[error]redisstep.Kind) {
	t.Helper()
	_, dialErr := net.Dial("tcp", testkit.ClosedAddr(t))
	cases := map[error]redisstep.Kind{
		nil:                 redisstep.KindOK,
		dialErr:             redisstep.KindUnsent,
		io.ErrUnexpectedEOF: redisstep.KindUnknown,
	}
	for err, want := range own {
		cases[err] = want
	}
	for err, want := range cases {
		if got := kind(err); got != want {
			t.Errorf("Kind(%v) = %d, want %d", err, got, want)
		}
	}
}
