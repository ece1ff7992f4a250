package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

// dsn is the database the tests use: PGX_TEST_DSN, or a server TestMain
// started. Empty when there is none (then the tests skip, or fail in CI).
var dsn string

// skipReason says why dsn is empty.
var skipReason string

// TestMain uses PGX_TEST_DSN when it is set. Otherwise it starts its own
// PostgreSQL (initdb and pg_ctl from PATH or /usr/lib/postgresql/*/bin) in a
// temporary directory, on a free port and with its unix socket there, as an
// unprivileged user when run as root, and stops it and removes the
// directory at the end. It then checks that no goroutine is left.
func TestMain(m *testing.M) {
	dsn = os.Getenv("PGX_TEST_DSN")
	var stop func()
	if dsn == "" {
		runtime.LockOSThread() // the server's parent-death signal is tied to this thread
		var err error
		dsn, stop, err = startServer()
		if err != nil {
			skipReason = "no PostgreSQL: " + err.Error()
		}
	}
	code := m.Run()
	if stop != nil {
		stop()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// needDB returns the test database's DSN, skipping the test when there is
// none, unless CI is set: then it fails.
func needDB(t testing.TB) string {
	t.Helper()
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but %s", skipReason)
		}
		t.Skip(skipReason)
	}
	return dsn
}

// newPool returns a pool on the test database, closed at the end of t.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(needDB(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// pgBinDir finds the directory of initdb and pg_ctl.
func pgBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("initdb and pg_ctl are neither on PATH nor in /usr/lib/postgresql/*/bin")
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// startServer starts a throw-away server and returns its DSN and the
// function that stops it and removes its directory.
func startServer() (string, func(), error) {
	bin, err := pgBinDir()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "lock-pgtest-")
	if err != nil {
		return "", nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 { // initdb refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			u, err = user.Lookup("nobody")
		}
		if err != nil {
			os.RemoveAll(dir)
			return "", nil, err
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return "", nil, err
		}
	}
	data, logFile := filepath.Join(dir, "data"), filepath.Join(dir, "server.log")
	run := func(name string, args ...string) error {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir = dir // readable by the server's user, unlike perhaps ours
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", name, err, out)
		}
		return nil
	}
	if err := run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	// The postmaster runs in the foreground as our child, so that it gets
	// SIGQUIT (immediate shutdown) if this process dies without stop.
	logf, err := os.Create(logFile)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir,
		"-c", "max_connections=300", "-c", "fsync=off", "-c", "synchronous_commit=off")
	cmd.Stdout, cmd.Stderr, cmd.Dir = logf, logf, dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = run("pg_ctl", "stop", "-D", data, "-m", "immediate", "-w")
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		os.RemoveAll(dir)
	}
	dsn := fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", dir, port)
	// Wait, with a deadline, until the server takes connections.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		pool, err := pgxpool.New(ctx, dsn)
		if err == nil {
			err = pool.Ping(ctx)
			pool.Close()
		}
		cancel()
		if err == nil {
			return dsn, stop, nil
		}
		select {
		case <-exited:
			err = errors.New("the server exited")
		case <-time.After(50 * time.Millisecond):
			if time.Now().Before(deadline) {
				continue
			}
		}
		log, _ := os.ReadFile(logFile)
		stop()
		return "", nil, fmt.Errorf("server not ready: %v\n%s", err, log)
	}
}

// freePort returns a TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
