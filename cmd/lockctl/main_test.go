package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/redisserver"
	"github.com/redislocker/lock/internal/testenv/testkit"
	"github.com/redislocker/lock/redisbackend"
)

func TestMain(m *testing.M) {
	if os.Getenv("LOCKCTL_RUN_MAIN") == "1" {
		main() // the test binary as the command, for exit statuses
		return
	}
	os.Unsetenv(passwordEnv) // the shared server has no password
	os.Exit(redisserver.Main(m))
}

// syncBuffer is a bytes.Buffer safe for one writer and many readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is a Redis server, a key prefix, and Lockers on them.
type env struct {
	t      *testing.T
	addr   string
	prefix string
}

func newEnv(t *testing.T) *env {
	return &env{t: t, addr: redisserver.SharedAddr(t), prefix: redisserver.Prefix(t)}
}

// locker returns a Locker ("process") on the env's prefix. WaiterTimeout
// is long, so a waiter learns of a release from its wake-up, not from a
// heartbeat.
func (e *env) locker() *lock.Locker {
	c := redis.NewClient(&redis.Options{Addr: e.addr})
	b, err := redisbackend.New(c, &redisbackend.Options{Prefix: e.prefix})
	if err != nil {
		e.t.Fatal(err)
	}
	l, err := lock.New(b, &lock.Options{WaiterTimeout: time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = l.Close()
		_ = c.Close()
	})
	return l
}

// hold takes id in a new Locker and returns its result.
func (e *env) hold(id string) lock.Result {
	e.t.Helper()
	res, err := e.locker().Acquire(context.Background(), id, time.Minute, nil)
	if err != nil || !res.Acquired {
		e.t.Fatal(res, err)
	}
	return res
}

// lockctl runs the command in process and returns its exit status, stdout
// and stderr.
func (e *env) lockctl(ctx context.Context, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(ctx, append([]string{"-addr", e.addr, "-prefix", e.prefix, "-timeout", "5s"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// queue starts an Acquire of id by l in the background and waits until
// lockctl sees it queued as the n-th waiter.
func (e *env) queue(l *lock.Locker, id string, n int) <-chan lock.Result {
	ch := make(chan lock.Result, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r, _ := l.Acquire(ctx, id, time.Minute, nil)
		ch <- r
	}()
	e.t.Cleanup(func() {
		cancel()
		<-done
	})
	testkit.Eventually(e.t, 5*time.Second, fmt.Sprintf("waiter %d of %s queued", n, id), func() bool {
		_, out, _ := e.lockctl(context.Background(), "inspect", id)
		return strings.Contains(out, fmt.Sprintf("waiters: %d\n", n))
	})
	return ch
}

func TestInspect(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// An id with no lock state at all: exit 1, nothing on stdout.
	code, out, errOut := e.lockctl(ctx, "inspect", "job")
	want := fmt.Sprintf("lockctl: no lock state for id %q under prefix %q (wrong -prefix?)\n", "job", e.prefix)
	if code != 1 || out != "" || errOut != want {
		t.Fatalf("an id with no state: exit %d, %q, %q; want 1 and %q", code, out, errOut, want)
	}
	if code, out, errOut := e.lockctl(ctx, "inspect", "-json", "job"); code != 1 || out != "" || errOut != want {
		t.Fatalf("-json of an id with no state: exit %d, %q, %q; want 1 and %q", code, out, errOut, want)
	}
	res := e.hold("job")
	e.queue(e.locker(), "job", 1)
	code, out, _ = e.lockctl(ctx, "inspect", "job")
	for _, want := range []string{
		"held:    yes",
		fmt.Sprintf("fence:   %d\n", res.Lease.Fence()),
		"holder:  " + backend.Fingerprint(res.Lease.Token()),
		"waiters: 1",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("inspect: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	if strings.Contains(out, res.Lease.Token()) {
		t.Fatalf("inspect printed the holder's token:\n%s", out)
	}
	// -json, with the flag after the id.
	code, out, _ = e.lockctl(ctx, "inspect", "job", "-json")
	var j inspectionJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil || code != 0 {
		t.Fatalf("inspect -json: exit %d, %v:\n%s", code, err, out)
	}
	if !j.Held || j.Fence != res.Lease.Fence() || j.QueueLen != 1 || len(j.Waiters) != 1 || j.TTLMs <= 0 || j.Waiters[0].DeadlineMs <= 0 {
		t.Fatalf("inspect -json: %+v", j)
	}
	// The held id under another prefix: no state there.
	var wrong bytes.Buffer
	if code := run(ctx, []string{"-addr", e.addr, "-prefix", e.prefix + "other:", "inspect", "job"}, io.Discard, &wrong); code != 1 || !strings.Contains(wrong.String(), "wrong -prefix?") {
		t.Fatalf("a held id under a wrong prefix: exit %d, %q; want 1 and a hint at -prefix", code, wrong.String())
	}
}

// An id that is free but has lock state left (the fence key of its slot,
// after a release) is inspected with exit 0.
func TestInspectFreeKnown(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	res := e.hold("job")
	if err := res.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := e.lockctl(ctx, "inspect", "job")
	if code != 0 || !strings.Contains(out, "held:    no") || !strings.Contains(out, "waiters: 0") || errOut != "" {
		t.Fatalf("a free id with state: exit %d, %q, %q; want 0 and held: no", code, out, errOut)
	}
}

func TestWatchBounded(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// An id with no lock state: a note on stderr, and the watch goes on.
	code, out, errOut := e.lockctl(ctx, "watch", "-interval", "10ms", "-count", "3", "idle")
	if code != 0 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "no lock state") {
		t.Fatalf("watch -count 3: exit %d, %q; want 0 and one note of no lock state", code, errOut)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.HasSuffix(lines[2], "free waiters=0") {
		t.Fatalf("watch -count 3 printed %d lines, want 3 saying free:\n%s", len(lines), out)
	}
	// A free id with state left: no note.
	if err := e.hold("known").Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := e.lockctl(ctx, "watch", "-count", "1", "known"); code != 0 || errOut != "" || !strings.HasSuffix(out, "free waiters=0\n") {
		t.Fatalf("watch of a free id with state: exit %d, %q, %q", code, out, errOut)
	}
}

func TestWatchShowsHandOff(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	res := e.hold("job")
	next := e.queue(e.locker(), "job", 1)

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var out, errOut syncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- run(wctx, []string{"-addr", e.addr, "-prefix", e.prefix, "watch", "-interval", "10ms", "job"}, &out, &errOut)
	}()
	testkit.Eventually(t, 5*time.Second, "watch's first line", func() bool { return strings.Contains(out.String(), "held fence=") })
	if err := res.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	granted := <-next
	if !granted.Acquired {
		t.Fatal(granted)
	}
	want := fmt.Sprintf("hand-off: fence %d -> %d, holder %s -> %s", res.Lease.Fence(), granted.Lease.Fence(),
		backend.Fingerprint(res.Lease.Token()), backend.Fingerprint(granted.Lease.Token()))
	testkit.Eventually(t, 5*time.Second, "the hand-off line", func() bool { return strings.Contains(out.String(), want) })
	stop()
	if code := <-exited; code != 0 || errOut.String() != "" {
		t.Fatalf("watch interrupted: exit %d, %q", code, errOut.String())
	}
}

func TestForcedRelease(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	res := e.hold("job")
	next := e.queue(e.locker(), "job", 1)
	fence := fmt.Sprint(res.Lease.Fence())

	// A wrong fence is refused, and changes nothing.
	code, out, errOut := e.lockctl(ctx, "release", "-fence", fmt.Sprint(res.Lease.Fence()+1), "job")
	if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "fence "+fence) {
		t.Fatalf("wrong fence: exit %d, %q, %q; want 1 and one line naming the holder's fence", code, out, errOut)
	}
	if err := res.Lease.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("the holder lost its lease to a refused release: %v", err)
	}

	// The right fence: the flag after the id, as in "release ID -fence F".
	code, out, errOut = e.lockctl(ctx, "release", "job", "-fence", fence)
	if code != 0 || errOut != "" || !strings.Contains(out, "released") {
		t.Fatalf("release: exit %d, %q, %q", code, out, errOut)
	}
	// The head is woken (its heartbeat is 20 s away) and granted.
	select {
	case r := <-next:
		if !r.Acquired || r.Lease.Fence() <= res.Lease.Fence() {
			t.Fatalf("the head after the forced release: %+v", r)
		}
		defer r.Lease.Release(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the head was not granted within 5s of the forced release")
	}
	if err := res.Lease.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("the former holder's Release: %v, want ErrNotHeld", err)
	}
	// Again with the old fence: the new holder is untouched.
	if code, _, errOut := e.lockctl(ctx, "release", "-fence", fence, "job"); code != 1 || !strings.Contains(errOut, "not released") {
		t.Fatalf("a second release with the old fence: exit %d, %q", code, errOut)
	}
	if code, out, _ := e.lockctl(ctx, "inspect", "job"); code != 0 || !strings.Contains(out, "held:    yes") {
		t.Fatalf("the new holder is gone:\n%s", out)
	}
	// A free id under a prefix in use (one server: the prefix's fence key
	// lives an hour after its last grant): not held.
	if code, _, errOut := e.lockctl(ctx, "release", "-fence", "1", "free"); code != 1 || strings.Count(errOut, "\n") != 1 ||
		!strings.Contains(errOut, "not held") || strings.Contains(errOut, "wrong -prefix?") {
		t.Fatalf("release of a free id: exit %d, %q", code, errOut)
	}
	// A free id under a prefix with no lock state: not held, and a hint at -prefix.
	var errOut1 bytes.Buffer
	code = run(ctx, []string{"-addr", e.addr, "-prefix", e.prefix + "unused:", "release", "-fence", "1", "free"}, io.Discard, &errOut1)
	if code != 1 || !strings.Contains(errOut1.String(), "not held") || !strings.Contains(errOut1.String(), "wrong -prefix?") {
		t.Fatalf("release of a free id under an unused prefix: exit %d, %q", code, errOut1.String())
	}
	// The held id under a wrong prefix: refused, and the holder keeps it.
	var errOut2 bytes.Buffer
	code = run(ctx, []string{"-addr", e.addr, "-prefix", e.prefix + "other:", "release", "-fence", fence, "job"}, io.Discard, &errOut2)
	if code != 1 || !strings.Contains(errOut2.String(), "wrong -prefix?") {
		t.Fatalf("release under a wrong prefix: exit %d, %q; want 1 and a hint at -prefix", code, errOut2.String())
	}
	if code, out, _ := e.lockctl(ctx, "inspect", "job"); code != 0 || !strings.Contains(out, "held:    yes") {
		t.Fatalf("the holder is gone after a release under a wrong prefix:\n%s", out)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"frobnicate", "x"}, "unknown command"},
		{[]string{"inspect"}, "no ID"},
		{[]string{"inspect", "a", "b"}, "one ID"},
		{[]string{"inspect", ""}, "empty ID"},
		{[]string{"inspect", strings.Repeat("x", backend.MaxIDLength+1)}, "more than"},
		{[]string{"inspect", "-waiters", "101", "x"}, "-waiters"},
		{[]string{"watch", "-interval", "0s", "x"}, "-interval"},
		{[]string{"watch", "-count", "-1", "x"}, "-count"},
		{[]string{"release", "x"}, "-fence is required"},
		{[]string{"release", "-fence", "abc", "x"}, "not a positive integer"},
		{[]string{"release", "-fence", "0", "x"}, "not a positive integer"},
		{[]string{"-prefix", "a{b", "inspect", "x"}, "-prefix"},
		{[]string{"-addr", "", "inspect", "x"}, "-addr"},
		{[]string{"-timeout", "0s", "inspect", "x"}, "-timeout"},
		{[]string{"-bogus", "inspect", "x"}, "-bogus"},
		{[]string{"inspect", "-bogus", "x"}, "-bogus"},
	} {
		var out, errOut bytes.Buffer
		code := run(ctx, tc.args, &out, &errOut)
		if code != 2 || strings.Count(errOut.String(), "\n") != 1 || !strings.Contains(errOut.String(), tc.want) || out.Len() != 0 {
			t.Errorf("lockctl %q: exit %d, stderr %q, stdout %q; want 2 and one line with %q", tc.args, code, errOut.String(), out.String(), tc.want)
		}
	}
	var out bytes.Buffer
	if code := run(ctx, []string{"-h"}, &out, io.Discard); code != 0 || !strings.Contains(out.String(), "usage: lockctl") ||
		!strings.Contains(out.String(), "exit status") || !strings.Contains(out.String(), passwordEnv) {
		t.Errorf("-h: exit %d, %q", code, out.String())
	}
}

// childEnv is the environment of the test binary run as lockctl. A race
// build's exit sleeps a second (GORACE atexit_sleep_ms) unless told not to.
func childEnv() []string {
	return append(os.Environ(), "LOCKCTL_RUN_MAIN=1", "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
}

// TestProcess runs the test binary as lockctl: real exit statuses, and
// exactly one line on stderr for an unreachable Redis (go-redis's own
// log lines are silenced).
func TestProcess(t *testing.T) {
	e := newEnv(t)
	e.hold("held")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-addr", "127.0.0.1:1", "inspect", "x"}, 1, "cannot reach Redis at 127.0.0.1:1"},
		{[]string{"release", "x"}, 2, "-fence"},
		{[]string{"-url", "redis://" + e.addr, "-addr", e.addr, "inspect", "x"}, 2, "-addr and -url"},
		{[]string{"-addr", e.addr, "-prefix", e.prefix, "inspect", "held"}, 0, ""},
		{[]string{"-url", "redis://" + e.addr + "/0", "-prefix", e.prefix, "inspect", "held"}, 0, ""},
		{[]string{"-addr", e.addr, "-prefix", e.prefix + "unused:", "inspect", "x"}, 1, "no lock state"},
		{[]string{"-addr", e.addr, "-prefix", e.prefix, "release", "-fence", "1", "x"}, 1, "not held"},
	} {
		cmd := exec.Command(os.Args[0], tc.args...)
		cmd.Env = childEnv()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		lines := strings.Count(stderr.String(), "\n")
		if code != tc.code || (tc.code != 0 && (lines != 1 || !strings.Contains(stderr.String(), tc.want))) ||
			(tc.code == 0 && (lines != 0 || !strings.Contains(stdout.String(), "held:    yes"))) {
			t.Errorf("lockctl %q: exit %d, stdout %q, stderr %q; want exit %d and one line with %q", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.want)
		}
	}
}

// TestWatcherChanges checks the change lines of watch, also when a refresh
// falls between a release and the next grant.
func TestWatcherChanges(t *testing.T) {
	held := func(f uint64, h string) backend.Inspection {
		return backend.Inspection{Held: true, Fence: f, Holder: h}
	}
	free := backend.Inspection{}
	var w watcher
	for i, step := range []struct {
		in   backend.Inspection
		want string
	}{
		{free, ""},
		{held(1, "aa"), "granted: fence 1, holder aa"},
		{held(1, "aa"), ""},
		{held(2, "bb"), "hand-off: fence 1 -> 2, holder aa -> bb"},
		{free, "released: fence 2, holder bb"},
		{free, ""},
		{held(3, "cc"), "hand-off: fence 2 -> 3, holder bb -> cc"},
	} {
		if got := strings.Join(w.changes(&step.in), "|"); got != step.want {
			t.Fatalf("step %d: %q, want %q", i, got, step.want)
		}
	}
	var first watcher
	if got := first.changes(&backend.Inspection{Held: true, Fence: 9}); len(got) != 0 {
		t.Fatalf("the first inspection: %q, want no change line", got)
	}
}

// A shared id (a reader-writer lock of capacity 3): inspect shows its
// capacity, every lease with its permits and the waiting writer's permits;
// release -fence ends one lease, which lets nobody in while the other
// reader holds.
func TestInspectShared(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	l := e.locker()
	read := &lock.AcquireOptions{Capacity: 3}
	var readers []*lock.Lease
	for range 2 {
		res, err := l.Acquire(ctx, "rw", time.Minute, read)
		if err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		readers = append(readers, res.Lease)
	}
	wctx, cancel := context.WithCancel(ctx)
	writer := make(chan struct{})
	defer func() {
		cancel()
		<-writer
	}()
	go func() {
		defer close(writer)
		_, _ = e.locker().Acquire(wctx, "rw", time.Minute, &lock.AcquireOptions{Capacity: 3, Permits: 3})
	}()
	testkit.Eventually(t, 5*time.Second, "the writer queued", func() bool {
		_, out, _ := e.lockctl(ctx, "inspect", "rw")
		return strings.Contains(out, "waiters: 1\n")
	})
	code, out, _ := e.lockctl(ctx, "inspect", "rw")
	for _, want := range []string{
		"shared:  capacity 3, 2 held by 2 leases",
		fmt.Sprintf("%d", readers[0].Fence()),
		backend.Fingerprint(readers[1].Token()),
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("inspect: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	code, out, _ = e.lockctl(ctx, "inspect", "-json", "rw")
	var j inspectionJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil || code != 0 {
		t.Fatalf("inspect -json: exit %d, %v:\n%s", code, err, out)
	}
	if j.Capacity != 3 || len(j.Holders) != 2 || j.Holders[0].Permits != 1 || len(j.Waiters) != 1 || j.Waiters[0].Permits != 3 {
		t.Fatalf("inspect -json: %+v; want capacity 3, two holders of 1 permit, the writer waiting for 3", j)
	}
	if code, out, errOut := e.lockctl(ctx, "release", "-fence", fmt.Sprint(readers[0].Fence()), "rw"); code != 0 {
		t.Fatalf("release -fence: exit %d, %q, %q", code, out, errOut)
	}
	if err := readers[0].Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("the forced-out reader's Release: %v, want ErrNotHeld", err)
	}
	_, out, _ = e.lockctl(ctx, "inspect", "rw")
	if !strings.Contains(out, "shared:  capacity 3, 1 held by 1 leases") || !strings.Contains(out, "waiters: 1\n") {
		t.Fatalf("after the forced release of one reader:\n%s\nwant the other reader holding and the writer waiting", out)
	}
	_ = readers[1].Release(ctx)
}
