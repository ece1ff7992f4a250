package testkit

import (
	"net"
	"testing"
)

// FreePort's port can be listened on; a dial to ClosedAddr is refused.
func TestPorts(t *testing.T) {
	port, err := FreePort()
	if err != nil || port <= 0 {
		t.Fatalf("FreePort = %d, %v", port, err)
	}
	addr := ClosedAddr(t)
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("a dial to ClosedAddr %s was accepted", addr)
	}
}
