package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redislocker/lock/internal/testenv/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a local test server: it echoes (when echo is set) and records
// every byte each connection sent it, and how the connection ended.
type server struct {
	ln   net.Listener
	echo bool
	wg   sync.WaitGroup

	mu    sync.Mutex
	got   []*bytes.Buffer
	ended []error // one per connection, nil while open; io.EOF for a clean close
	cond  *sync.Cond
}

func newServer(t *testing.T, echo bool) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln, echo: echo}
	s.cond = sync.NewCond(&s.mu)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			i := len(s.got)
			s.got = append(s.got, &bytes.Buffer{})
			s.ended = append(s.ended, nil)
			s.cond.Broadcast()
			s.mu.Unlock()
			s.wg.Add(1)
			go s.serve(i, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *server) serve(i int, c net.Conn) {
	defer s.wg.Done()
	defer c.Close()
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			s.mu.Lock()
			s.got[i].Write(buf[:n])
			s.cond.Broadcast()
			s.mu.Unlock()
			if s.echo {
				if _, werr := c.Write(buf[:n]); werr != nil {
					err = werr
				}
			}
		}
		if err != nil {
			s.mu.Lock()
			s.ended[i] = err
			s.cond.Broadcast()
			s.mu.Unlock()
			return
		}
	}
}

// waitFor waits until cond (called with s.mu held) is true, or fails t.
func (s *server) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	done := make(chan struct{})
	timer := time.AfterFunc(5*time.Second, func() {
		s.mu.Lock()
		close(done)
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for !cond() {
		select {
		case <-done:
			t.Fatalf("server: not within 5s: %s", what)
		default:
		}
		s.cond.Wait()
	}
}

// gotL and endedL read connection i's state; s.mu must be held.
func (s *server) gotL(i int) string {
	if i >= len(s.got) {
		return ""
	}
	return s.got[i].String()
}

func (s *server) endedL(i int) bool { return i < len(s.ended) && s.ended[i] != nil }

func (s *server) received(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[i].String()
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readN reads exactly n bytes, failing after a deadline.
func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, n)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return string(buf)
}

// readEnd reads until the connection ends and returns what came and the
// error that ended it.
func readEnd(t *testing.T, c net.Conn) (string, error) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open after 5s (got %q)", got.String())
			}
			return got.String(), err
		}
	}
}

// quiet asserts that nothing arrives on c for d (the absence of bytes can
// only be observed over a window).
func quiet(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("want silence for %v, got %q, %v", d, buf[:n], err)
	}
	_ = c.SetReadDeadline(time.Time{})
}

// proxied starts a server (an echo server when echoing is set), a Proxy in
// front of it and one client connection through the Proxy.
func proxied(t *testing.T, echoing bool) (*server, *Proxy, net.Conn) {
	t.Helper()
	s := newServer(t, echoing)
	p := Start(t, s.ln.Addr().String())
	return s, p, dial(t, p)
}

// echo writes msg on c and reads its echo back.
func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	write(t, c, msg)
	if got := readN(t, c, len(msg)); got != msg {
		t.Fatalf("echo of %q = %q", msg, got)
	}
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

func TestPassThrough(t *testing.T) {
	_, p, c := proxied(t, true)
	write(t, c, "hello")
	if got := readN(t, c, 5); got != "hello" {
		t.Fatalf("echo = %q", got)
	}
	st := p.Stats()
	if st.Open != 1 || st.Forwarded[Up] != 5 || st.Forwarded[Down] != 5 {
		t.Fatalf("stats = %+v, want 1 open, 5 bytes each way", st)
	}
}

func TestDelayPerDirection(t *testing.T) {
	const d = 150 * time.Millisecond
	for _, dir := range []Dir{Up, Down} {
		t.Run(dir.String(), func(t *testing.T) {
			s, p, c := proxied(t, true)
			echo(t, c, "x") // connect before delaying, so dial time does not count
			p.Delay(dir, d)
			start := time.Now()
			write(t, c, "ab")
			if dir == Down {
				// Up is not delayed: the server has the bytes well before
				// the client gets the echo.
				s.waitFor(t, "server got ab", func() bool { return s.gotL(0) == "xab" })
				if el := time.Since(start); el >= d {
					t.Fatalf("up direction took %v with only down delayed", el)
				}
			}
			readN(t, c, 2)
			if el := time.Since(start); el < d {
				t.Fatalf("round trip %v, want >= %v", el, d)
			}
			p.Delay(dir, 0)
			start = time.Now()
			echo(t, c, "c")
			if el := time.Since(start); el >= d {
				t.Fatalf("round trip %v after clearing the delay", el)
			}
		})
	}
}

func TestDelayKeepsOrder(t *testing.T) {
	_, p, c := proxied(t, true)
	p.Delay(Up, 50*time.Millisecond)
	write(t, c, "1")
	p.Delay(Up, 0) // a later chunk must not overtake an earlier one
	write(t, c, "2")
	if got := readN(t, c, 2); got != "12" {
		t.Fatalf("got %q, want 12", got)
	}
}

func TestBlackholeUp(t *testing.T) {
	s, p, c := proxied(t, true)
	echo(t, c, "a")
	p.Blackhole(Up, true)
	write(t, c, "lost")
	quiet(t, c, 100*time.Millisecond)
	if got := s.received(0); got != "a" {
		t.Fatalf("server got %q through a blackhole", got)
	}
	p.Blackhole(Up, false)
	echo(t, c, "b") // after the blackhole
	if st := p.Stats(); st.Dropped[Up] != 4 || st.Open != 1 {
		t.Fatalf("stats = %+v, want 4 bytes dropped up, connection open", st)
	}
}

func TestBlackholeDown(t *testing.T) {
	s, p, c := proxied(t, true)
	p.Blackhole(Down, true)
	write(t, c, "abc")
	s.waitFor(t, "server got abc", func() bool { return s.gotL(0) == "abc" })
	quiet(t, c, 100*time.Millisecond)
	p.Blackhole(Down, false)
	echo(t, c, "d") // after the blackhole
}

func TestResetUp(t *testing.T) {
	s, p, c := proxied(t, true)
	echo(t, c, "a")
	p.Reset(Up, true)
	write(t, c, "b")
	got, err := readEnd(t, c)
	if got != "" || !isReset(err) {
		t.Fatalf("client got %q, %v; want a reset", got, err)
	}
	s.waitFor(t, "server side closed", func() bool { return s.endedL(0) })
	if got := s.received(0); got != "a" {
		t.Fatalf("server got %q; the byte that triggered the reset must not pass", got)
	}
	// While on, new connections die on their first byte too.
	c2 := dial(t, p)
	write(t, c2, "x")
	if _, err := readEnd(t, c2); !isReset(err) {
		t.Fatalf("second connection: %v, want a reset", err)
	}
	p.Reset(Up, false)
	c3 := dial(t, p)
	echo(t, c3, "y") // after Reset(false)
}

// TestFaultDown: a fault of the down direction resets the client's
// connection after what it lets pass (Reset: nothing; CutAfter(n): n
// bytes), and the server gets everything (only down is faulty).
func TestFaultDown(t *testing.T) {
	for _, tc := range []struct {
		name       string
		arm        func(*Proxy)
		wantClient string
	}{
		{"Reset", func(p *Proxy) { p.Reset(Down, true) }, ""},
		{"CutAfter", func(p *Proxy) { p.CutAfter(Down, 3) }, "abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, p, c := proxied(t, true)
			tc.arm(p)
			write(t, c, "abcdef")
			got, err := readEnd(t, c)
			if got != tc.wantClient || !isReset(err) {
				t.Fatalf("client got %q, %v; want %q then a reset", got, err, tc.wantClient)
			}
			if got := s.received(0); got != "abcdef" {
				t.Fatalf("server got %q, want everything (only down is faulty)", got)
			}
		})
	}
}

func TestCutAfterUp(t *testing.T) {
	for _, n := range []int64{0, 1, 4, 10} {
		t.Run("n="+strconv.FormatInt(n, 10), func(t *testing.T) {
			s, p, c := proxied(t, false)
			p.CutAfter(Up, n)
			write(t, c, "01234")
			// With n < 5 the cut may already have reset the connection:
			// the second write then fails, which is the cut showing.
			if _, err := c.Write([]byte("56789")); err != nil && (n >= 5 || !isReset(err)) {
				t.Fatalf("second write: %v", err)
			}
			// n == 10: the 10th byte fires the cut after passing.
			if _, err := readEnd(t, c); !isReset(err) {
				t.Fatalf("client: %v, want a reset", err)
			}
			s.waitFor(t, "server side closed", func() bool { return s.endedL(0) })
			want := "0123456789"[:n]
			if got := s.received(0); got != want {
				t.Fatalf("server got %q, want exactly %q", got, want)
			}
			if p.CutPending(Up) {
				t.Fatal("the cut is still armed after it fired")
			}
			// One-shot: the next connection passes.
			c2 := dial(t, p)
			write(t, c2, "zz")
			s.waitFor(t, "second connection passes", func() bool { return s.gotL(1) == "zz" })
		})
	}
}

func TestCutAfterCountsAcrossChunks(t *testing.T) {
	s, p, c := proxied(t, false)
	p.CutAfter(Up, 6)
	write(t, c, "abcd")
	s.waitFor(t, "first chunk", func() bool { return s.gotL(0) == "abcd" })
	if !p.CutPending(Up) {
		t.Fatal("cut fired early")
	}
	write(t, c, "efgh")
	if _, err := readEnd(t, c); !isReset(err) {
		t.Fatalf("client: %v, want a reset", err)
	}
	s.waitFor(t, "closed", func() bool { return s.endedL(0) })
	if got := s.received(0); got != "abcdef" {
		t.Fatalf("server got %q, want abcdef", got)
	}
}

func TestCutAllAndRefuse(t *testing.T) {
	s := newServer(t, true)
	p := Start(t, s.ln.Addr().String())
	var cs []net.Conn
	for range 3 {
		c := dial(t, p)
		echo(t, c, "a")
		cs = append(cs, c)
	}
	if n := p.CutAll(); n != 3 {
		t.Fatalf("CutAll cut %d connections, want 3", n)
	}
	for i, c := range cs {
		if _, err := readEnd(t, c); !isReset(err) {
			t.Fatalf("conn %d: %v, want a reset", i, err)
		}
	}
	if st := p.Stats(); st.Open != 0 || st.Cuts != 3 {
		t.Fatalf("stats = %+v, want 0 open, 3 cuts", st)
	}
	p.Refuse(true)
	// The kernel accepts; the proxy then resets, maybe before Dial returns.
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		_, err := readEnd(t, c)
		c.Close()
		if err == nil {
			t.Fatal("a refused connection stayed usable")
		}
	}
	p.Clear()
	c := dial(t, p)
	echo(t, c, "b") // after Clear
}

func TestTargetDown(t *testing.T) {
	p := Start(t, testkit.ClosedAddr(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		return // reset before connect returned: as good as a dead server
	}
	defer c.Close()
	if _, err := readEnd(t, c); err == nil {
		t.Fatal("connection to a dead target stayed open")
	}
}

func TestCloseEndsEverything(t *testing.T) {
	s := newServer(t, true)
	p, err := New(s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	p.Delay(Down, time.Hour) // a writer stuck on a delay must still end
	write(t, c, "a")
	s.waitFor(t, "server got a", func() bool { return s.gotL(0) == "a" })
	p.Close()
	p.Close()
	if _, err := readEnd(t, c); err == nil {
		t.Fatal("connection open after Close")
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("proxy still accepts after Close")
	}
}

func isReset(err error) bool {
	// A cut shows as ECONNRESET; a read racing the close may see EOF.
	return err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
