// Command lockctl inspects and steers the locks that the Redis backends of
// github.com/redislocker/lock keep: who holds an id, with which fence and
// for how long, who waits for it, and an operator's forced release. It
// goes through the Redis adapter (redisbackend on go-redis): its Inspect,
// and the forced release of its shared steps.
//
// Usage:
//
//	lockctl [connection flags] [-prefix lock:] [-sharded] COMMAND
//
//	inspect [-waiters 10] [-json] ID    the state of ID once
//	watch [-interval 1s] [-count N] ID  the state of ID every interval (N times, or
//	                                    until interrupted), and each hand-off
//	release -fence F ID                 delete ID's lock if its holder's fence is F
//
// The flags of a command may come before or after ID.
//
// Connection: -url redis://[user[:password]@]host[:port][/db] (rediss://
// for TLS; the query options of go-redis's ParseURL apply), or the pieces:
// -addr host:port (several, comma-separated, for a Redis Cluster), -user,
// -db, -tls. The password comes from -password, the URL, or the
// environment variable LOCKCTL_REDIS_PASSWORD, which keeps it off the
// command line. -tls-ca FILE verifies the server with the CAs in a PEM
// file; -tls-insecure does not verify it. -timeout (default 5s) bounds
// each Redis call, -dial-timeout (default 2s) each attempt to connect
// (two per call). Commands are never resent. lockctl first PINGs the
// server, so an unreachable Redis, a refused login or a TLS failure is one
// clear line on stderr.
//
// -prefix must be the Prefix the application's backend uses (default
// "lock:"). -sharded sends the forced release's wake-up with SPUBLISH, for
// applications that set ShardedPubSub.
//
// Tokens are never shown: holders and waiters appear as the first 8 hex
// digits of the SHA-1 of their token (backend.Fingerprint).
//
// A forced release takes the fence that inspect printed, and deletes the
// lock only while that holder still holds it, so it can never end a newer
// holder's lease. The former holder's own Release then reports ErrNotHeld,
// and its lease's fence no longer passes a fencing check once the next
// holder has written. The head of the queue is handed the lock (or woken)
// as on a release, with a higher fence. On a shared id (a semaphore, a
// reader-writer lock) inspect lists the capacity, every lease with its
// fence and permits, and each waiter's permits; a forced release ends the
// one lease with that fence, and the heads that then fit are handed their
// leases.
//
// Exit status:
//
//	0  inspect found state for ID (held, or free with waiters or a recent
//	   grant); release released it; watch ended
//	1  inspect found no state at all for ID under -prefix (never locked, no
//	   grant in its hash slot, or on one server under -prefix, for an hour, or
//	   a wrong -prefix); release was
//	   refused (ID not held, or by another fence); or Redis failed
//	   (unreachable, timeout, login, error reply)
//	2  bad usage: unknown, bad or contradictory flags or arguments; nothing
//	   was sent
//
// Every error is one line on stderr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

func main() {
	redis.SetLogger(quietLog{}) // go-redis's own log lines would break "one line on stderr"
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// quietLog drops go-redis's log lines; every error reaches run.
type quietLog struct{}

func (quietLog) Printf(context.Context, string, ...any) {}

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	defaultAddr = "localhost:6379"
)

// usageError is bad input: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

const usage = `usage: lockctl [connection flags] [-prefix lock:] [-sharded] COMMAND
commands (their flags may come before or after ID):
  inspect [-waiters 10] [-json] ID    the state of ID
  watch [-interval 1s] [-count N] ID  the state of ID every interval, and each hand-off
  release -fence F ID                 delete ID's lock if its holder's fence is F (from inspect),
                                      and hand it to the head of its queue
connection flags:
  -url URL             redis://[user[:password]@]host[:port][/db], rediss://... for TLS
  -addr host:port      Redis address (default localhost:6379); several, comma-separated, for a cluster
  -user NAME           ACL user
  -password PASSWORD   password; default: the environment variable LOCKCTL_REDIS_PASSWORD
  -db N                database number (one server)
  -tls                 TLS (with -addr)
  -tls-ca FILE         PEM file of the CAs that verify the server (with TLS)
  -tls-insecure        do not verify the server's certificate (with TLS)
  -timeout 5s          bound of each Redis call
  -dial-timeout 2s     bound of each attempt to connect
  -url excludes -addr, -user, -db and -tls; a password in -url excludes -password.
other flags:
  -prefix lock:        the key prefix of the application's backend
  -sharded             wake with SPUBLISH (the application sets ShardedPubSub)
exit status:
  0  inspect found state for ID (held, or free with waiters or a recent grant);
     release released it; watch ended
  1  inspect found no state at all for ID under -prefix (never locked, no grant
     in its hash slot, or on one server under -prefix, for an hour, or a wrong
     -prefix); release was refused (not
     held, or another fence); or Redis failed (unreachable, timeout, login, error)
  2  bad usage; nothing was sent
`

// run is the command: it returns the exit status and writes every error as
// one line to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runEnv(ctx, args, os.Getenv, stdout, stderr)
}

// runEnv is run with the environment read by getenv.
func runEnv(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, getenv, stdout, stderr)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintln(stderr, "lockctl: "+oneLine(err.Error()))
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitFailed
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// config is the global flags.
type config struct {
	conn    connFlags
	prefix  string
	sharded bool
}

// setup is what the global flags say: where to connect, and to which
// backend's keys.
type setup struct {
	conn    conn
	ks      keys.Keyspace
	sharded bool
}

// parseGlobal parses the global flags, which end at the command, and
// returns the setup and the command with its arguments.
func parseGlobal(args []string, getenv func(string) string) (setup, []string, error) {
	var cfg config
	fs := newFlagSet("lockctl")
	cfg.conn.define(fs)
	fs.StringVar(&cfg.prefix, "prefix", keys.DefaultPrefix, "key prefix of the application's backend")
	fs.BoolVar(&cfg.sharded, "sharded", false, "wake with SPUBLISH (the application uses ShardedPubSub)")
	if err := parseFlags(fs, args); err != nil {
		return setup{}, nil, err
	}
	cfg.conn.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { cfg.conn.set[f.Name] = true })
	if fs.NArg() == 0 {
		return setup{}, nil, usagef("no command (inspect, watch or release; -h for help)")
	}
	ks, err := keys.New(cfg.prefix)
	if err != nil {
		return setup{}, nil, usagef("-prefix: %v", err)
	}
	c, err := parseConn(cfg.conn, getenv)
	if err != nil {
		return setup{}, nil, err
	}
	return setup{conn: c, ks: ks, sharded: cfg.sharded}, fs.Args(), nil
}

func dispatch(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	su, rest, err := parseGlobal(args, getenv)
	if err != nil {
		return err
	}
	cmd, rest := rest[0], rest[1:]
	var do func(*tool) error
	switch cmd {
	case "inspect":
		do, err = parseInspect(rest, stdout)
	case "watch":
		do, err = parseWatch(rest, stdout, stderr)
	case "release":
		do, err = parseRelease(rest, stdout)
	default:
		return usagef("unknown command %q (inspect, watch or release)", cmd)
	}
	if err != nil {
		return err
	}
	t, err := openTool(ctx, su)
	if err != nil {
		return err
	}
	defer t.close()
	return do(t)
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by run
	return fs
}

// parseFlags parses the global flags, which end at the command.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	return nil
}

// parseID parses a command's flags, which may come before or after its
// one argument, the id, and checks the id.
func parseID(fs *flag.FlagSet, args []string) (string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return "", err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch {
	case len(pos) == 0:
		return "", usagef("%s: no ID", fs.Name())
	case len(pos) > 1:
		return "", usagef("%s: one ID expected, got %d arguments", fs.Name(), len(pos))
	case pos[0] == "":
		return "", usagef("%s: empty ID", fs.Name())
	case len(pos[0]) > backend.MaxIDLength:
		return "", usagef("%s: ID is %d bytes, more than %d", fs.Name(), len(pos[0]), backend.MaxIDLength)
	}
	return pos[0], nil
}

func parseInspect(args []string, out io.Writer) (func(*tool) error, error) {
	fs := newFlagSet("inspect")
	n := fs.Int("waiters", 10, "how many of the first waiters to list (at most 100)")
	asJSON := fs.Bool("json", false, "print the inspection as JSON")
	id, err := parseID(fs, args)
	if err != nil {
		return nil, err
	}
	if *n < 0 || *n > backend.MaxInspectWaiters {
		return nil, usagef("inspect: -waiters must be 0 to %d, got %d", backend.MaxInspectWaiters, *n)
	}
	return func(t *tool) error {
		in, err := t.inspect(id, *n)
		if err != nil {
			return fmt.Errorf("inspect %q: %w", id, err)
		}
		if err := t.mustExist(&in); err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(toJSON(in))
		}
		printInspection(out, in)
		return nil
	}, nil
}

func parseWatch(args []string, out, errOut io.Writer) (func(*tool) error, error) {
	fs := newFlagSet("watch")
	interval := fs.Duration("interval", time.Second, "time between two refreshes")
	count := fs.Int("count", 0, "stop after this many refreshes (0: until interrupted)")
	id, err := parseID(fs, args)
	if err != nil {
		return nil, err
	}
	if *interval <= 0 {
		return nil, usagef("watch: -interval must be positive, got %v", *interval)
	}
	if *count < 0 {
		return nil, usagef("watch: -count must not be negative, got %d", *count)
	}
	return func(t *tool) error { return t.watch(id, *interval, *count, out, errOut) }, nil
}

func parseRelease(args []string, out io.Writer) (func(*tool) error, error) {
	fs := newFlagSet("release")
	fenceText := fs.String("fence", "", "the holder's fence, as inspect shows it (required)")
	id, err := parseID(fs, args)
	if err != nil {
		return nil, err
	}
	if *fenceText == "" {
		return nil, usagef("release: -fence is required (the holder's fence, from inspect)")
	}
	fence, err := strconv.ParseUint(*fenceText, 10, 64)
	if err != nil || fence == 0 {
		return nil, usagef("release: -fence %q is not a positive integer", *fenceText)
	}
	return func(t *tool) error {
		if err := t.forceRelease(id, fence); err != nil {
			return fmt.Errorf("release %q: %w", id, err)
		}
		fmt.Fprintf(out, "released %q (fence %d); the lock went to the head of its queue, if any\n", id, fence)
		return nil
	}, nil
}
