// Package redistest gives tests a Redis server: the one REDIS_ADDR names,
// or a redis-server it starts itself on a free loopback port, in a temporary
// directory, without persistence (--save "" --appendonly no).
//
// When no redis-server binary can be found (PATH, or the REDIS_SERVER
// variable naming the binary), tests are skipped with the reason, except when
// the CI variable is set: then they fail, so that CI never passes by skipping.
//
// Tests never flush a server they did not start: they use their own ids and
// key prefixes (see [Prefix]).
package redistest

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Shared server of this test binary, started by the first call to Addr.
var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// Addr returns the address of the Redis server shared by the tests of this
// binary: REDIS_ADDR when set, otherwise a redis-server started on first
// use. A package that uses it should call [Main] from its TestMain, which
// stops the server after the tests (it is also killed if the test process
// dies, on Linux).
func Addr(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return addr
	}
	sharedOnce.Do(func() {
		var bin string
		bin, sharedErr = binary()
		if sharedErr != nil {
			return
		}
		var dir string
		dir, sharedErr = os.MkdirTemp("", "redistest-")
		if sharedErr != nil {
			return
		}
		shared, sharedErr = start(bin, dir, true)
	})
	if sharedErr != nil {
		unavailable(t, sharedErr)
	}
	return shared.Addr
}

// External reports whether the tests use a server they did not start
// (REDIS_ADDR is set). Such a server must not be flushed or reconfigured.
func External() bool { return os.Getenv("REDIS_ADDR") != "" }

// Main runs the tests and then stops the shared server, if one was started.
// Use it as: func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	return code
}

// Prefix returns a key prefix unique to this call, so that tests on a shared
// server never see each other's keys.
func Prefix(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := strings.NewReplacer("{", "(", "}", ")", " ", "_").Replace(t.Name())
	return "test:" + name + ":" + hex.EncodeToString(b[:]) + ":"
}

// Server is a redis-server process that this package started.
type Server struct {
	Addr string

	cmd     *exec.Cmd
	dir     string
	rmDir   bool
	stopped chan struct{}
	once    sync.Once
}

// Start starts a private redis-server for t and stops it at t's cleanup. Use
// it for tests that must own the server (e.g. to flush its scripts or restart
// it); everything else should share Addr.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := binary()
	if err != nil {
		unavailable(t, err)
	}
	s, err := start(bin, t.TempDir(), false)
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Stop kills the server and waits for it to exit. It is idempotent.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.stopped
		if s.rmDir {
			_ = os.RemoveAll(s.dir)
		}
	})
}

func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("redistest: no Redis server (CI is set, so this fails instead of skipping): %v", err)
	}
	t.Skipf("redistest: no Redis server, skipping (set REDIS_ADDR or install redis-server): %v", err)
}

func binary() (string, error) {
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found in PATH: %w", err)
	}
	return p, nil
}

func start(bin, dir string, rmDir bool) (*Server, error) {
	var last error
	for range 3 { // a free port can be taken before the server binds it
		s, err := startOnce(bin, dir, rmDir)
		if err == nil {
			return s, nil
		}
		last = err
	}
	if rmDir {
		_ = os.RemoveAll(dir)
	}
	return nil, last
}

func startOnce(bin, dir string, rmDir bool) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, fmt.Sprintf("redis-%d.log", port))
	cmd := exec.Command(bin,
		"--port", fmt.Sprint(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", logPath,
		"--daemonize", "no",
	)
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Server{
		Addr:    fmt.Sprintf("127.0.0.1:%d", port),
		cmd:     cmd,
		dir:     dir,
		rmDir:   rmDir,
		stopped: make(chan struct{}),
	}
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(s.stopped)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(s.Addr) == nil {
			return s, nil
		}
		select {
		case <-s.stopped:
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("redis-server exited: %v: %s", waitErr, tail(string(log)))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, errors.New("redis-server did not answer PING within 10s")
		}
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping sends one PING and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
