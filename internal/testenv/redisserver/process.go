package redisserver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Options shape a server. The zero value is a plain redis-server.
type Options struct {
	// Binary is the redis-server binary. Default: [Binary]'s.
	Binary string
	// Dir is the server's directory (created when missing). Default: a new
	// temporary directory, removed by Close.
	Dir string
	// Args are extra redis-server arguments, after [DefaultArgs] (so they
	// win). Default: none.
	Args []string
	// Argv, when set, replaces the whole command line after the binary. It
	// gets the port to listen on and the log file to write, and is called
	// again for each port tried and each restart. Default: DefaultArgs
	// followed by Args.
	Argv func(port int, logPath string) ([]string, error)
	// TLS, when set, makes the server speak TLS only: on Port, with no
	// plain port, presenting a certificate that Start writes into Dir
	// ([WriteCA]; Server.CAFile). [Server.TLSConfig] is the configuration
	// of a client that verifies it; Do, Shutdown and the PING of a start
	// use it. Its flags come after Argv's or DefaultArgs, before Args.
	TLS bool
}

// Server is one redis-server process this package started. Its address
// stays the same across Restart.
type Server struct {
	Addr   string // 127.0.0.1:Port
	Port   int
	Dir    string
	CAFile string // with Options.TLS: the PEM file of the server's certificate, its own CA

	tls *tls.Config // with Options.TLS: a client's, trusting CAFile

	bin   string
	argv  func(port int, logPath string) ([]string, error)
	rmDir bool

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the current process has exited
	waitErr error
	logPath string
	runs    int
	closed  bool
}

// StartTimeout bounds the wait for a new process's first PONG.
const StartTimeout = 10 * time.Second

// Start starts a redis-server on a free loopback port and waits until it
// answers PING. It tries three ports: a free port can be taken by
// another process before the server binds it.
func Start(o Options) (*Server, error) {
	bin := o.Binary
	if bin == "" {
		var err error
		if bin, err = Binary(); err != nil {
			return nil, err
		}
	}
	s := &Server{bin: bin, Dir: o.Dir, argv: o.Argv}
	if s.Dir == "" {
		d, err := os.MkdirTemp("", "redisserver-")
		if err != nil {
			return nil, err
		}
		s.Dir, s.rmDir = d, true
	} else if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, err
	}
	var tlsFlags func(port int) []string // with TLS: its flags, before Args
	if o.TLS {
		cert, key, err := WriteCA(s.Dir)
		if err == nil {
			s.tls, err = clientTLS(cert)
		}
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("redisserver: TLS certificate: %w", err)
		}
		s.CAFile = cert
		tlsFlags = func(port int) []string { return tlsArgs(port, cert, key) }
	}
	if s.argv == nil {
		s.argv = func(port int, logPath string) ([]string, error) {
			args := DefaultArgs(port, s.Dir, logPath)
			if tlsFlags != nil {
				args = append(args, tlsFlags(port)...)
			}
			return append(args, o.Args...), nil
		}
	} else if tlsFlags != nil {
		argv := s.argv
		s.argv = func(port int, logPath string) ([]string, error) {
			args, err := argv(port, logPath)
			return append(args, tlsFlags(port)...), err
		}
	}
	var last error
	for range 3 {
		port, err := FreePort()
		if err != nil {
			s.Close()
			return nil, err
		}
		s.Port, s.Addr = port, fmt.Sprintf("127.0.0.1:%d", port)
		if last = s.launch(); last == nil {
			return s, nil
		}
	}
	s.Close()
	return nil, last
}

// Binary returns the redis-server binary: the REDIS_SERVER variable, or
// redis-server from PATH.
func Binary() (string, error) { return LookBinary("REDIS_SERVER", "redis-server") }

// ErrNoBinary is the error (matched with errors.Is) of a binary that
// cannot be found: tests skip for it, or fail when CI is set.
var ErrNoBinary = errors.New("binary not found")

// LookBinary returns the binary the variable env names, or name from PATH.
func LookBinary(env, name string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s is not in PATH (or set %s): %v", ErrNoBinary, name, env, err)
	}
	return p, nil
}

// DefaultArgs are the flags of every server this package starts: on port,
// loopback only, no persistence, fast replica syncs, files in dir.
func DefaultArgs(port int, dir, logPath string) []string {
	return []string{
		"--port", fmt.Sprint(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--repl-diskless-sync", "yes",
		"--repl-diskless-sync-delay", "0",
		"--dir", dir,
		"--logfile", logPath,
		"--daemonize", "no",
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// launch starts the process on s.Port and waits until it answers PING.
func (s *Server) launch() error {
	s.mu.Lock()
	s.runs++
	logPath := filepath.Join(s.Dir, fmt.Sprintf("redis-%d-%d.log", s.Port, s.runs))
	s.mu.Unlock()
	args, err := s.argv(s.Port, logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, args...)
	SetDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.exited, s.logPath = cmd, exited, logPath
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.waitErr = err
		s.mu.Unlock()
		close(exited)
	}()
	deadline := time.NewTimer(StartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := s.ping()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			s.mu.Lock()
			werr := s.waitErr
			s.mu.Unlock()
			return fmt.Errorf("redis-server on port %d exited: %v: %s", s.Port, werr, s.LogTail())
		case <-deadline.C:
			s.Kill()
			return fmt.Errorf("redis-server on port %d did not answer PING within %v (last: %v): %s", s.Port, StartTimeout, err, s.LogTail())
		case <-tick.C:
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
	cmd, exited := s.current()
	if cmd == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// Pid returns the current process id.
func (s *Server) Pid() int {
	cmd, _ := s.current()
	return cmd.Process.Pid
}

// LogTail returns the end of the current process's log file.
func (s *Server) LogTail() string {
	s.mu.Lock()
	p := s.logPath
	s.mu.Unlock()
	b, _ := os.ReadFile(p)
	return Tail(string(b))
}

// Tail returns the last 2000 bytes of s (of a log or a tool's output).
func Tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

// Kill sends SIGKILL (which ends a paused process too) and waits for the
// process to exit: the server dies mid-flight, as in a crash.
func (s *Server) Kill() {
	cmd, exited := s.current()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// WaitExit waits up to d for the current process to exit.
func (s *Server) WaitExit(d time.Duration) error {
	_, exited := s.current()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-exited:
		return nil
	case <-t.C:
		return fmt.Errorf("redis-server on port %d did not exit within %v", s.Port, d)
	}
}

// Close kills the process and removes the directory Start created. It is
// idempotent.
func (s *Server) Close() {
	s.Kill()
	s.mu.Lock()
	rm := s.rmDir && !s.closed
	s.closed = true
	s.mu.Unlock()
	if rm {
		_ = os.RemoveAll(s.Dir)
	}
}

// Shutdown sends SHUTDOWN NOSAVE and waits for the process to exit.
func (s *Server) Shutdown() error {
	_, err := s.Do("SHUTDOWN", "NOSAVE")
	if err != nil && !closedConn(err) && s.ping() == nil {
		return fmt.Errorf("SHUTDOWN NOSAVE on %s: %w", s.Addr, err)
	}
	return s.WaitExit(StartTimeout)
}

// closedConn reports whether err is the end of a connection that the
// server closed (as it does on SHUTDOWN).
func closedConn(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF)
}

// Restart starts the server again on the same port (killing a running one
// first), retrying while the port is still held, for up to StartTimeout.
// The new server starts empty unless its arguments persist data.
func (s *Server) Restart() error {
	if s.Running() {
		s.Kill()
	}
	deadline := time.Now().Add(StartTimeout)
	for {
		err := s.launch()
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// Do sends one command on a new connection and returns the first line of
// the reply (e.g. "+OK", ":3", "-ERR ..."). It is for control commands.
// On a TLS server the connection is TLS.
func (s *Server) Do(args ...string) (string, error) {
	if s.tls == nil {
		return Command(s.Addr, args...)
	}
	return command(func() (net.Conn, error) {
		return tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", s.Addr, s.tls)
	}, args...)
}

// ping sends PING with Do and expects PONG.
func (s *Server) ping() error { return pong(s.Do("PING")) }

// ClientPause runs CLIENT PAUSE for d in mode "WRITE" or "ALL".
func (s *Server) ClientPause(d time.Duration, mode string) error {
	reply, err := s.Do("CLIENT", "PAUSE", fmt.Sprint(d.Milliseconds()), mode)
	if err == nil && reply != "+OK" {
		err = fmt.Errorf("reply %q", reply)
	}
	if err != nil {
		return fmt.Errorf("CLIENT PAUSE on %s: %w", s.Addr, err)
	}
	return nil
}
