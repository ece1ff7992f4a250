package redisproc

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartRestartSamePort(t *testing.T) {
	s := Start(t)
	if err := Ping(s.Addr); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Do("SET", "k", "v"); err != nil || r != "+OK" {
		t.Fatalf("SET: %q, %v", r, err)
	}
	addr, pid := s.Addr, s.Pid()
	s.Shutdown()
	if s.Running() || Ping(addr) == nil {
		t.Fatal("server still up after Shutdown")
	}
	s.Restart()
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
	s.Restart()
	if err := Ping(s.Addr); err != nil {
		t.Fatal(err)
	}
}

func TestStopCont(t *testing.T) {
	s := Start(t)
	s.Stop()
	if err := pingWithin(s.Addr, 200*time.Millisecond); err == nil {
		t.Fatal("a SIGSTOPped server answered PING")
	}
	s.Cont()
	if err := Ping(s.Addr); err != nil {
		t.Fatalf("after SIGCONT: %v", err)
	}
}

func TestClientPause(t *testing.T) {
	s := Start(t)
	const d = 300 * time.Millisecond
	start := time.Now()
	s.ClientPause(d, "ALL")
	if err := Ping(s.Addr); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < d-20*time.Millisecond {
		t.Fatalf("PING answered after %v during a %v CLIENT PAUSE ALL", el, d)
	}
}

func TestNoProcessLeft(t *testing.T) {
	var pids []int
	t.Run("stopped", func(t *testing.T) {
		s := Start(t)
		pids = append(pids, s.Pid())
		s.Stop() // cleanup must still end it
	})
	t.Run("running", func(t *testing.T) {
		s := Start(t)
		pids = append(pids, s.Pid())
	})
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after its test: %v", pid, err)
		}
	}
}

func TestCommandErrorReply(t *testing.T) {
	s := Start(t)
	r, err := s.Do("NOSUCHCOMMAND")
	if err != nil || !strings.HasPrefix(r, "-ERR") {
		t.Fatalf("got %q, %v; want an error reply", r, err)
	}
}

// pingWithin is Ping with a short deadline.
func pingWithin(addr string, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- Ping(addr) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		// The Ping goroutine ends when the server answers after SIGCONT
		// (or at Ping's own 5 s deadline); done is buffered.
		return errors.New("no answer")
	}
}
