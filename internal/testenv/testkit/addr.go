package testkit

import (
	"net"
	"testing"
)

// ClosedAddr returns a loopback address on which nothing listened a moment
// ago: a dial there is refused.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
