package rueidisbackend

import (
	"context"
	"crypto/tls"
	"net"
	"testing"

	"github.com/redis/rueidis"
)

// fakeConn answers every Read with one byte and accepts every Write.
type fakeConn struct{ net.Conn }

func (fakeConn) Read(b []byte) (int, error)  { b[0] = '+'; return 1, nil }
func (fakeConn) Write(b []byte) (int, error) { return len(b), nil }
func (fakeConn) Close() error                { return nil }

// TestConnWatchLost: a nil invalidation is a loss (the tracker wakes every
// waiter) unless every connection that closed listened for nothing or
// another connection to its node listened all along.
func TestConnWatchLost(t *testing.T) {
	const a, b = "10.0.0.1:6379", "10.0.0.2:6379"
	handshake := []byte("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*4\r\n$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$2\r\nON\r\n$5\r\nBCAST\r\n")
	command := []byte("*2\r\n$4\r\nLPOP\r\n$1\r\nk\r\n")
	type conn struct {
		addr string
		used bool // carried a command after its handshake
	}
	cases := []struct {
		name string
		// run opens connections through open, and closes some.
		run  func(open func(conn) net.Conn)
		want bool
	}{
		{"no close: a flush", func(open func(conn) net.Conn) {
			open(conn{a, true})
		}, true},
		{"a spare connection closed (handshake and PINGs only)", func(open func(conn) net.Conn) {
			open(conn{a, true})
			spare := open(conn{a, false})
			_, _ = spare.Write(pingCmd)
			_ = spare.Close()
		}, false},
		{"the only connection to a node closed", func(open func(conn) net.Conn) {
			open(conn{a, true})
			_ = open(conn{b, true}).Close()
		}, true},
		{"a used connection closed beside one that listened before", func(open func(conn) net.Conn) {
			open(conn{a, true})
			_ = open(conn{a, true}).Close()
		}, false},
		{"a used connection closed, the other one listened only after", func(open func(conn) net.Conn) {
			c := open(conn{a, true})
			_ = c.Close()
			open(conn{a, true})
		}, true},
		{"a used connection closed twice, one spare", func(open func(conn) net.Conn) {
			open(conn{a, true})
			c := open(conn{b, true})
			_ = c.Close()
			_ = c.Close()
			_ = open(conn{a, false}).Close()
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newConnWatch()
			dial := w.dialer(rueidis.ClientOption{DialCtxFn: func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
				return fakeConn{}, nil
			}})
			tc.run(func(c conn) net.Conn {
				nc, err := dial(context.Background(), c.addr, &net.Dialer{}, nil)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = nc.Write(handshake)
				_, _ = nc.Read(make([]byte, 16))
				if c.used {
					_, _ = nc.Write(command)
				}
				return nc
			})
			if got := w.lost(); got != tc.want {
				t.Errorf("lost() = %v, want %v", got, tc.want)
			}
			if !w.lost() {
				t.Error("a second lost() with no close since = false, want true (a nil invalidation with no close is a flush)")
			}
		})
	}
}

// TestOnlyPings: the writes that do not make a connection used.
func TestOnlyPings(t *testing.T) {
	for _, tc := range []struct {
		b    string
		want bool
	}{
		{"*1\r\n$4\r\nPING\r\n", true},
		{"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n", true},
		{"", false},
		{"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nLPOP\r\n", false},
		{"*2\r\n$4\r\nLPOP\r\n$1\r\nk\r\n", false},
	} {
		if got := onlyPings([]byte(tc.b)); got != tc.want {
			t.Errorf("onlyPings(%q) = %v, want %v", tc.b, got, tc.want)
		}
	}
}
