package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// server is a redis-server this tool started: on a free loopback port, in a
// temporary directory, without persistence. It is a small copy of the
// library's internal/redistest start logic (a nested module cannot import
// internal packages).
type server struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// startServer starts redis-server (the REDIS_SERVER variable or PATH).
func startServer() (*server, error) {
	bin := os.Getenv("REDIS_SERVER")
	if bin == "" {
		p, err := exec.LookPath("redis-server")
		if err != nil {
			return nil, fmt.Errorf("redis-server not found in PATH (set REDIS_ADDR, or install redis-server): %w", err)
		}
		bin = p
	}
	dir, err := os.MkdirTemp("", "lockbench-redis-")
	if err != nil {
		return nil, err
	}
	var last error
	for range 3 { // a free port can be taken before the server binds it
		s, err := startOnce(bin, dir)
		if err == nil {
			return s, nil
		}
		last = err
	}
	_ = os.RemoveAll(dir)
	return nil, last
}

func startOnce(bin, dir string) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	logPath := filepath.Join(dir, fmt.Sprintf("redis-%d.log", port))
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", logPath, "--daemonize", "no")
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &server{Addr: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if pingRaw(s.Addr) == nil {
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("redis-server exited: %s", log)
		case <-time.After(10 * time.Millisecond):
		}
	}
	_ = cmd.Process.Kill()
	<-s.done
	return nil, fmt.Errorf("redis-server on port %d did not answer PING within 10s", port)
}

// Stop kills the server and removes its directory.
func (s *server) Stop() {
	_ = s.cmd.Process.Kill()
	<-s.done
	_ = os.RemoveAll(s.dir)
}

func pingRaw(addr string) error {
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
