package rueidisbackend

import (
	"io"
	"net"
	"testing"

	"github.com/redislocker/lock/internal/redisstep"
)

// The client's errors are classified: a dial failure is unsent (rueidis
// writes only on a connection it has), anything else may have been sent.
func TestKind(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, dialErr := net.Dial("tcp", addr)
	for _, c := range []struct {
		err  error
		want redisstep.Kind
	}{
		{nil, redisstep.KindOK},
		{dialErr, redisstep.KindUnsent},
		{io.ErrUnexpectedEOF, redisstep.KindUnknown},
	} {
		if got := (commands{}).Kind(c.err); got != c.want {
			t.Errorf("Kind(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
