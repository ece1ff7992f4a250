package testkit

import (
	"net"
	"testing"
)

// A dial to ClosedAddr is refused.
func TestClosedAddr(t *testing.T) {
	addr := ClosedAddr(t)
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("a dial to ClosedAddr %s was accepted", addr)
	}
}
