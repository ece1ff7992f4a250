// Package redisproc controls real redis-server processes for fault tests:
// start one on a free loopback port in t.TempDir(), stop it, shut it down
// (SHUTDOWN NOSAVE) and start it again on the same port, SIGKILL it,
// SIGSTOP and SIGCONT it, and CLIENT PAUSE it.
//
// Every server is killed at the test's cleanup (and, on Linux, when the
// test process dies), so no process is left behind. Like internal/redistest,
// a missing redis-server binary skips the test, or fails it when the CI
// variable is set. The binary is the REDIS_SERVER variable's, or
// redis-server from PATH. REDIS_ADDR is ignored: these tests must own
// their server.
package redisproc

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server that this package started. Its address stays
// the same across Restart.
type Server struct {
	Addr string
	Port int
	Dir  string

	t     testing.TB
	bin   string
	extra []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the current process has exited
	waitErr error
	runs    int
}

// Option adds redis-server arguments, e.g. Args("--appendonly", "yes").
type Option func(*Server)

// Args passes extra redis-server command-line arguments (after the
// defaults, so they win).
func Args(a ...string) Option { return func(s *Server) { s.extra = append(s.extra, a...) } }

// Start starts a redis-server for t on a free loopback port, with no
// persistence (--save "" --appendonly no) unless opts say otherwise, and
// kills it at t's cleanup.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		Unavailable(t, err)
	}
	s := &Server{t: t, bin: bin, Dir: t.TempDir()}
	for _, o := range opts {
		o(s)
	}
	t.Cleanup(s.kill)
	var last error
	for range 3 { // a free port can be taken before the server binds it
		s.Port, err = freePort()
		if err != nil {
			t.Fatal(err)
		}
		s.Addr = fmt.Sprintf("127.0.0.1:%d", s.Port)
		if last = s.launch(); last == nil {
			return s
		}
	}
	t.Fatalf("redisproc: %v", last)
	return nil
}

// Binary returns the redis-server binary to use.
func Binary() (string, error) {
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found in PATH: %w", err)
	}
	return p, nil
}

// Unavailable skips t for want of a server, or fails it when CI is set.
func Unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("redisproc: no redis-server (CI is set, so this fails instead of skipping): %v", err)
	}
	t.Skipf("redisproc: no redis-server, skipping (install redis-server or set REDIS_SERVER): %v", err)
}

// launch starts the process on s.Port and waits until it answers PING.
func (s *Server) launch() error {
	s.mu.Lock()
	s.runs++
	logPath := filepath.Join(s.Dir, fmt.Sprintf("redis-%d-%d.log", s.Port, s.runs))
	args := []string{
		"--port", fmt.Sprint(s.Port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.Dir,
		"--logfile", logPath,
		"--daemonize", "no",
	}
	args = append(args, s.extra...)
	cmd := exec.Command(s.bin, args...)
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.waitErr = err
		s.mu.Unlock()
		close(exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if Ping(s.Addr) == nil {
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			s.mu.Lock()
			err := s.waitErr
			s.mu.Unlock()
			return fmt.Errorf("redis-server on port %d exited: %v: %s", s.Port, err, tail(string(log)))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("redis-server on port %d did not answer PING within 10s", s.Port)
		}
	}
}

func (s *Server) current() (*exec.Cmd, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd, s.exited
}

// Running reports whether the current process has not exited.
func (s *Server) Running() bool {
	_, exited := s.current()
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// kill SIGKILLs the current process, if any, and waits for it.
func (s *Server) kill() {
	cmd, exited := s.current()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill() // also ends a SIGSTOPped process
	<-exited
}

// waitExit waits for the current process to exit, failing t after d.
func (s *Server) waitExit(what string, d time.Duration) {
	s.t.Helper()
	_, exited := s.current()
	select {
	case <-exited:
	case <-time.After(d):
		s.t.Fatalf("redisproc: redis-server did not exit within %v after %s", d, what)
	}
}

// Kill sends SIGKILL and waits for the process to exit: the server dies
// mid-flight, as a crash would.
func (s *Server) Kill() {
	s.t.Helper()
	s.kill()
}

// Shutdown sends SHUTDOWN NOSAVE and waits for the process to exit.
func (s *Server) Shutdown() {
	s.t.Helper()
	if err := s.send("SHUTDOWN", "NOSAVE"); err != nil && Ping(s.Addr) == nil {
		s.t.Fatalf("redisproc: SHUTDOWN NOSAVE: %v", err)
	}
	s.waitExit("SHUTDOWN NOSAVE", 10*time.Second)
}

// Restart starts the server again on the same port, after Shutdown or
// Kill (it kills a running one first). The new server starts empty unless
// its options persist data. It retries while the port is still held.
func (s *Server) Restart() {
	s.t.Helper()
	if s.Running() {
		s.kill()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.launch()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redisproc: restart on port %d: %v", s.Port, err)
		}
	}
}

// Stop sends SIGSTOP: the server keeps its connections but answers nothing
// until Cont. Its clock keeps running, so keys expire by wall time.
func (s *Server) Stop() {
	s.t.Helper()
	s.signal(syscall.SIGSTOP)
}

// Cont sends SIGCONT after Stop.
func (s *Server) Cont() {
	s.t.Helper()
	s.signal(syscall.SIGCONT)
}

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	cmd, _ := s.current()
	if err := cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redisproc: %v: %v", sig, err)
	}
}

// Pid returns the current process id.
func (s *Server) Pid() int {
	cmd, _ := s.current()
	return cmd.Process.Pid
}

// ClientPause runs CLIENT PAUSE for d in mode "WRITE" or "ALL": the server
// holds the other clients' commands (in WRITE mode, those that may write,
// scripts included) until d has passed.
func (s *Server) ClientPause(d time.Duration, mode string) {
	s.t.Helper()
	reply, err := s.Do("CLIENT", "PAUSE", fmt.Sprint(d.Milliseconds()), mode)
	if err != nil || reply != "+OK" {
		s.t.Fatalf("redisproc: CLIENT PAUSE: %q, %v", reply, err)
	}
}

// Do sends one command on a new connection and returns the first line of
// the reply (e.g. "+OK", ":3", "-ERR ..."); it is for control commands,
// not for data.
func (s *Server) Do(args ...string) (string, error) {
	return Command(s.Addr, args...)
}

// send sends a command whose reply may never come (SHUTDOWN).
func (s *Server) send(args ...string) error {
	_, err := Command(s.Addr, args...)
	if err != nil && (errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "EOF") ||
		strings.Contains(err.Error(), "reset")) {
		return nil
	}
	return err
}

// Command sends one command to addr on a new connection and returns the
// first line of the reply, without its CRLF.
func Command(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// Ping sends PING to addr and expects PONG.
func Ping(addr string) error {
	line, err := Command(addr, "PING")
	if err != nil {
		return err
	}
	if line != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}
