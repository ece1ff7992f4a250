// Command lockctl inspects and steers the locks that the Redis backends of
// github.com/redislocker/lock keep: who holds an id, with which fence and
// for how long, who waits for it, and an operator's forced release.
//
// Usage:
//
//	lockctl [-addr host:port[,host:port...]] [-prefix lock:] [-timeout 5s] COMMAND
//
//	inspect [-waiters 10] [-json] ID    the state of ID once
//	watch [-interval 1s] [-count N] ID  the state of ID every interval (N times, or
//	                                    until interrupted), and each hand-off
//	release -fence F ID                 delete ID's lock if its holder's fence is F
//
// The flags of a command may come before or after ID. -addr with several
// addresses uses a Redis Cluster client. -prefix must be the Prefix the
// application's backend uses (default "lock:"). -sharded sends the forced
// release's wake-up with SPUBLISH, for applications that set
// ShardedPubSub.
//
// Tokens are never shown: holders and waiters appear as the first 8 hex
// digits of the SHA-1 of their token (lock.Fingerprint).
//
// A forced release takes the fence that inspect printed, and deletes the
// lock only while that holder still holds it, so it can never end a newer
// holder's lease. The former holder's own Release then reports ErrNotHeld,
// and its lease's fence no longer passes a fencing check once the next
// holder has written. The head of the queue is woken as on a release.
//
// Exit status: 0 on success, 1 when Redis fails or the forced release is
// refused, 2 on bad usage. Every error is one line on stderr.
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
	"github.com/redislocker/lock/internal/keys"
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

const usage = `usage: lockctl [-addr host:port[,host:port...]] [-prefix lock:] [-timeout 5s] [-sharded] COMMAND
commands:
  inspect [-waiters 10] [-json] ID    the state of ID
  watch [-interval 1s] [-count N] ID  the state of ID every interval, and each hand-off
  release -fence F ID                 delete ID's lock if its holder's fence is F
`

// run is the command: it returns the exit status and writes every error as
// one line to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout)
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
	addr, prefix string
	timeout      time.Duration
	sharded      bool
}

func dispatch(ctx context.Context, args []string, stdout io.Writer) error {
	var cfg config
	fs := newFlagSet("lockctl")
	fs.StringVar(&cfg.addr, "addr", defaultAddr, "Redis address; several, comma-separated, for a cluster")
	fs.StringVar(&cfg.prefix, "prefix", keys.DefaultPrefix, "key prefix of the application's backend")
	fs.DurationVar(&cfg.timeout, "timeout", 5*time.Second, "timeout of each Redis call")
	fs.BoolVar(&cfg.sharded, "sharded", false, "wake with SPUBLISH (the application uses ShardedPubSub)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("no command (inspect, watch or release; -h for help)")
	}
	if cfg.timeout <= 0 {
		return usagef("-timeout must be positive, got %v", cfg.timeout)
	}
	ks, err := keys.New(cfg.prefix)
	if err != nil {
		return usagef("-prefix: %v", err)
	}
	var addrs []string
	for _, a := range strings.Split(cfg.addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return usagef("-addr is empty")
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	var do func(*tool) error
	switch cmd {
	case "inspect":
		do, err = parseInspect(rest, stdout)
	case "watch":
		do, err = parseWatch(rest, stdout)
	case "release":
		do, err = parseRelease(rest, stdout)
	default:
		return usagef("unknown command %q (inspect, watch or release)", cmd)
	}
	if err != nil {
		return err
	}
	t := newTool(ctx, addrs, ks, cfg.timeout, cfg.sharded)
	defer t.client.Close()
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
		if *asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(toJSON(in))
		}
		printInspection(out, in)
		return nil
	}, nil
}

func parseWatch(args []string, out io.Writer) (func(*tool) error, error) {
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
	return func(t *tool) error { return t.watch(id, *interval, *count, out) }, nil
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
		fmt.Fprintf(out, "released %q (fence %d); the head of its queue was woken\n", id, fence)
		return nil
	}, nil
}
