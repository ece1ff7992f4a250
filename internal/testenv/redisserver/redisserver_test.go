package redisserver_test

import (
	"crypto/tls"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// TestMain runs the tests under the machine-wide lock, stops the shared
// server and checks that no goroutine outlived the tests.
func TestMain(m *testing.M) { os.Exit(redisserver.NoLeaks(redisserver.Main(m))) }

func TestStartRestartSamePort(t *testing.T) {
	s := redisserver.StartT(t, redisserver.Options{})
	if r, err := s.Do("SET", "k", "v"); err != nil || r != "+OK" {
		t.Fatalf("SET: %q, %v", r, err)
	}
	addr, pid := s.Addr, s.Pid()
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if s.Running() || redisserver.Ping(addr) == nil {
		t.Fatal("server still up after Shutdown")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Addr != addr || s.Pid() == pid {
		t.Fatalf("restart: addr %s pid %d, before %s pid %d", s.Addr, s.Pid(), addr, pid)
	}
	// No persistence: the restarted server is empty.
	if r, err := s.Do("EXISTS", "k"); err != nil || r != ":0" {
		t.Fatalf("EXISTS after restart: %q, %v; want :0", r, err)
	}
	s.Kill()
	if s.Running() {
		t.Fatal("running after Kill")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := redisserver.Ping(s.Addr); err != nil {
		t.Fatal(err)
	}
}

// A TLS server listens with TLS only, on Port, with a certificate its
// TLSConfig verifies; Do, Shutdown and Restart speak TLS to it.
func TestStartTLS(t *testing.T) {
	s := redisserver.StartT(t, redisserver.Options{TLS: true})
	if s.TLSConfig() == nil || s.CAFile == "" {
		t.Fatalf("TLSConfig %v, CAFile %q: want both", s.TLSConfig(), s.CAFile)
	}
	if r, err := s.Do("CONFIG", "GET", "port"); err != nil || r != "*2" {
		t.Fatalf("CONFIG GET port: %q, %v", r, err)
	}
	c, err := tls.Dial("tcp", s.Addr, s.TLSConfig())
	if err != nil {
		t.Fatalf("TLS dial with TLSConfig: %v", err)
	}
	c.Close()
	if err := redisserver.Ping(s.Addr); err == nil {
		t.Fatal("a plain PING was answered")
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Do("PING"); err != nil || r != "+PONG" {
		t.Fatalf("PING after restart: %q, %v", r, err)
	}
}

// Pause returns only once the process is stopped: at once after it, a
// PING gets no answer (no race with the signal's delivery).
func TestPauseResume(t *testing.T) {
	s := redisserver.StartT(t, redisserver.Options{})
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(s.Pid()) + "/stat")
		if err != nil || !strings.Contains(string(b), ") T ") {
			t.Fatalf("after Pause the process state is not T: %q, %v", b, err)
		}
	}
	if err := pingWithin(s.Addr, 200*time.Millisecond); err == nil {
		t.Fatal("a paused server answered PING")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := redisserver.Ping(s.Addr); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
}

// WaitStopped fails, naming the state, for a process that is not stopped.
func TestWaitStoppedFailsOnRunningProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	s := redisserver.StartT(t, redisserver.Options{})
	err := redisserver.WaitStopped(s.Pid(), 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "state") {
		t.Fatalf("WaitStopped on a running server: %v; want an error naming its state", err)
	}
}

func TestClientPause(t *testing.T) {
	s := redisserver.StartT(t, redisserver.Options{})
	const d = 300 * time.Millisecond
	start := time.Now()
	if err := s.ClientPause(d, "ALL"); err != nil {
		t.Fatal(err)
	}
	if err := redisserver.Ping(s.Addr); err != nil {
		t.Fatal(err)
	}
	// A lower bound only: the pause holds PING at least d (less the
	// server's millisecond clock).
	if el := time.Since(start); el < d-20*time.Millisecond {
		t.Fatalf("PING answered after %v during a %v CLIENT PAUSE ALL", el, d)
	}
}

func TestNoProcessLeft(t *testing.T) {
	var pids []int
	t.Run("paused", func(t *testing.T) {
		s := redisserver.StartT(t, redisserver.Options{})
		pids = append(pids, s.Pid())
		if err := s.Pause(); err != nil { // cleanup must still end it
			t.Fatal(err)
		}
	})
	t.Run("running", func(t *testing.T) {
		s := redisserver.StartT(t, redisserver.Options{})
		pids = append(pids, s.Pid())
	})
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after its test: %v", pid, err)
		}
	}
}

// A server that Start gave a temporary directory removes it on Close.
func TestCloseRemovesOwnDir(t *testing.T) {
	s, err := redisserver.Start(redisserver.Options{})
	if err != nil {
		redisserver.Fail(t, err)
	}
	s.Close()
	s.Close() // idempotent
	if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory %s left after Close: %v", s.Dir, err)
	}
}

func TestCommandErrorReply(t *testing.T) {
	s := redisserver.StartT(t, redisserver.Options{})
	r, err := s.Do("NOSUCHCOMMAND")
	if err != nil || !strings.HasPrefix(r, "-ERR") {
		t.Fatalf("got %q, %v; want an error reply", r, err)
	}
}

func TestMissingBinaryIsErrNoBinary(t *testing.T) {
	t.Setenv("REDIS_SERVER", "")
	t.Setenv("PATH", t.TempDir())
	_, err := redisserver.Start(redisserver.Options{})
	if !errors.Is(err, redisserver.ErrNoBinary) {
		t.Fatalf("Start without redis-server: %v; want ErrNoBinary", err)
	}
}

// The machine-wide lock excludes a second holder: a child process that
// tries it without blocking fails while this test binary holds it (its
// TestMain took it).
func TestExclusiveExcludesOtherProcesses(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("flock")
	}
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("no flock(1) to try the lock from another process")
	}
	out, err := exec.Command(flock, "--nonblock", "--shared", redisserver.LockFile, "true").CombinedOutput()
	if err == nil {
		t.Fatalf("another process took %s while this test binary holds it (%s)", redisserver.LockFile, out)
	}
}

// pingWithin is Ping with a short deadline.
func pingWithin(addr string, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- redisserver.Ping(addr) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		// The Ping goroutine ends when the server answers after SIGCONT
		// (or at Ping's own 5 s deadline); done is buffered.
		return errors.New("no answer")
	}
}
