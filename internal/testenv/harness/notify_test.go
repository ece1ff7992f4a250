package harness

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"
)

// echo starts a TCP server that sends every line back.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadBytes('\n')
					if err != nil {
						return
					}
					if _, err := c.Write(line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestDelayAndDrop: a subscribe command is held back by the delay, other
// connections are not, and DropNotifiers closes only the subscriber.
func TestDelayAndDrop(t *testing.T) {
	addr := echoServer(t)
	cs := newNotifyConns()
	ctx := context.Background()
	sub, err := cs.Dialer(nil)(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	cmd, err := cs.Dialer(nil)(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.Close()
	const d = 100 * time.Millisecond
	cs.DelaySubscribe(d)
	roundTrip := func(c net.Conn, msg string) time.Duration {
		start := time.Now()
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(c).ReadBytes('\n'); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	if took := roundTrip(sub, "*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\nx\r\n"); took < d {
		t.Errorf("a SUBSCRIBE came back after %v, want it held back %v", took, d)
	}
	if took := roundTrip(cmd, "*2\r\n$3\r\nGET\r\n$9\r\nsubscribe\r\n"); took >= d {
		t.Errorf("a GET of a key named subscribe came back after %v, want no delay", took)
	}
	if n := cs.DropNotifiers(); n != 1 {
		t.Fatalf("DropNotifiers closed %d connections, want the subscriber's only", n)
	}
	if _, err := sub.Write([]byte("x\n")); err == nil {
		t.Error("the subscriber's connection still writes after DropNotifiers")
	}
	if took := roundTrip(cmd, "PING\n"); took >= d {
		t.Errorf("the other connection: %v", took)
	}
}
