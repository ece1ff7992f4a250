package fault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/testkit"
	"github.com/redislocker/lock/redisbackend"
	"github.com/redislocker/lock/rueidisbackend"
)

// The bound the calls must keep on a frozen Redis: they return within
// this of their ctx's deadline, measured from the deadline.
const frozenSlack = 50 * time.Millisecond

// frozenWait is the callers' ctx timeout on the frozen Redis.
const frozenWait = 500 * time.Millisecond

// defaultClients are the clients with nothing but an address (the
// README's snippets add timeouts): go-redis ignores ctx deadlines for reads (ContextTimeoutEnabled
// is false) and waits for its 3 s ReadTimeout; rueidis honours them. Each
// returns a backend on addr, under prefix, closed at t's cleanup.
var defaultClients = []struct {
	name string
	new  func(t *testing.T, addr, prefix string) backend.Backend
}{
	{"go-redis", func(t *testing.T, addr, prefix string) backend.Backend {
		client := redis.NewClient(&redis.Options{Addr: addr})
		b, err := redisbackend.New(client, &redisbackend.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = b.Close()
			_ = client.Close()
		})
		return b
	}},
	{"rueidis", func(t *testing.T, addr, prefix string) backend.Backend {
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}}) // dials: before the freeze
		if err != nil {
			t.Fatal(err)
		}
		b, err := rueidisbackend.NewWithClient(client, &rueidisbackend.Options{Prefix: prefix})
		if err != nil {
			client.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = b.Close()
			client.Close()
		})
		return b
	}},
}

// TestFrozenRedisCallsReturnAtDeadline: with redis-server SIGSTOPped,
// Acquire (waiting, on a free id and queued behind a holder), Acquire with
// NoWait (TryAcquire) and Do return within 50 ms of their ctx's deadline
// with an error matching context.DeadlineExceeded, on go-redis and
// rueidis clients with their default options. Once the server resumes, the
// steps left in the background and their cleanups leave no lease and no
// queue entry behind.
func TestFrozenRedisCallsReturnAtDeadline(t *testing.T) {
	for _, cl := range defaultClients {
		t.Run(cl.name, func(t *testing.T) {
			e := newEnv(t, adapters[0])
			t.Cleanup(func() { _ = e.srv.Resume() }) // never leave it stopped
			l := e.locker(cl.new(t, e.srv.Addr, e.prefix), lock.Options{})
			holder := e.directLocker(lock.Options{})
			cases := []struct {
				name string
				// queued: the id is held by another Locker, and the server
				// freezes once the call is queued; otherwise it freezes
				// before the call.
				queued bool
				call   func(ctx context.Context, id string) error
			}{
				{"Acquire", false, func(ctx context.Context, id string) error {
					_, err := l.Acquire(ctx, id, time.Minute, nil)
					return err
				}},
				{"TryAcquire", false, func(ctx context.Context, id string) error {
					_, err := l.TryAcquire(ctx, id, time.Minute)
					return err
				}},
				{"Do", false, func(ctx context.Context, id string) error {
					_, err := lock.Do(ctx, l, id, time.Minute, func(context.Context, *lock.Lease) (int, error) {
						return 0, errors.New("fn ran: the acquire cannot have been granted by a frozen server")
					}, nil)
					return err
				}},
				{"Acquire queued", true, func(ctx context.Context, id string) error {
					_, err := l.Acquire(ctx, id, time.Minute, nil)
					return err
				}},
			}
			for _, c := range cases {
				id := "frozen-" + c.name
				var held *lock.Lease
				if c.queued {
					r, err := holder.Acquire(context.Background(), id, time.Minute, nil)
					if err != nil || !r.Acquired {
						t.Fatal(r, err)
					}
					held = r.Lease
				}
				// The deadline is measured from the freeze: a queued call
				// gets longer, to queue first.
				wait := frozenWait
				if c.queued {
					wait = 4 * frozenWait
				} else if err := e.srv.Pause(); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				deadline, _ := ctx.Deadline()
				done := make(chan error, 1)
				go func() { done <- c.call(ctx, id) }()
				if c.queued {
					testkit.Eventually(t, wait/2, c.name+": the call queued", func() bool { return e.queued(id) == 1 })
					if err := e.srv.Pause(); err != nil {
						t.Fatal(err)
					}
					if time.Until(deadline) < frozenWait/2 {
						t.Fatalf("%s: queueing and the freeze left %v before the deadline; the test needs the call to wait while frozen", c.name, time.Until(deadline))
					}
				}
				err := recv(t, done, 10*time.Second, c.name)
				late := time.Since(deadline)
				cancel()
				if err := e.srv.Resume(); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: returned %v after its deadline: %v", c.name, late, err)
				if late > frozenSlack {
					t.Errorf("%s on a frozen Redis returned %v after its ctx's deadline; want at most %v", c.name, late, frozenSlack)
				}
				if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, lock.ErrBackend) {
					t.Errorf("%s on a frozen Redis = %v; want an error matching context.DeadlineExceeded, not ErrBackend", c.name, err)
				}
				if held != nil {
					if err := held.Release(context.Background()); err != nil {
						t.Errorf("%s: the holder's Release after the resume: %v", c.name, err)
					}
				}
				testkit.Until(t, 10*time.Second, func() string {
					in, err := holder.Inspect(context.Background(), id)
					switch {
					case err != nil:
						return fmt.Sprintf("%s: Inspect: %v", c.name, err)
					case in.Held || in.QueueLen > 0:
						return fmt.Sprintf("%s: after the resume, %q is held: %v, with %d queue entries; want neither once the background cleanup ran", c.name, id, in.Held, in.QueueLen)
					}
					return ""
				})
			}
		})
	}
}

// fullListener returns the address of a TCP listener on the loopback whose
// accept queue is full and never drained: the kernel drops every further
// SYN, so a dial there ends at the dialer's timeout, as against a host that
// does not answer.
func fullListener(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the accept queue (a backlog of 0 takes one connection).
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			if i == 0 {
				t.Fatalf("the first connection to the listener failed: %v", err)
			}
			return addr // a dial timed out: the queue is full
		}
		t.Cleanup(func() { _ = c.Close() })
		if i > 8 {
			t.Fatalf("the listener with a backlog of 0 accepted %d connections; cannot make a dial time out", i+1)
		}
	}
}

// outcomes records the Outcome of every EventAcquire.
type outcomes struct {
	mu  sync.Mutex
	got []lock.Outcome
}

func (o *outcomes) Observe(e lock.Event) {
	if e.Kind == lock.EventAcquire {
		o.mu.Lock()
		o.got = append(o.got, e.Outcome)
		o.mu.Unlock()
	}
}

func (o *outcomes) last() lock.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.got) == 0 {
		return 0
	}
	return o.got[len(o.got)-1]
}

// TestClientTimeoutIsErrBackend: a timeout of the client's own, while the
// caller's ctx lives, is a backend failure: a dial timeout (the server's
// accept queue is full) and a read timeout (the server is frozen) each
// give an error matching lock.ErrBackend, and the observer counts
// OutcomeError, not OutcomeCancelled. A dial timeout matches
// context.DeadlineExceeded too (Go's net timeouts do), which is why the
// Locker decides by the caller's ctx and not by the error.
func TestClientTimeoutIsErrBackend(t *testing.T) {
	check := func(t *testing.T, what string, obs *outcomes, err error, took time.Duration) {
		t.Helper()
		t.Logf("%s: %v after %v", what, err, took)
		var ne net.Error
		if !errors.Is(err, lock.ErrBackend) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("%s = %v; want an error matching lock.ErrBackend and the client's net timeout", what, err)
		}
		if got := obs.last(); got != lock.OutcomeError {
			t.Errorf("%s: the observer counted %v; want %v", what, got, lock.OutcomeError)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("dial", func(t *testing.T) {
		client := redis.NewClient(&redis.Options{Addr: fullListener(t), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
		defer client.Close()
		b, err := redisbackend.New(client, &redisbackend.Options{Prefix: "ft:dial:"})
		if err != nil {
			t.Fatal(err)
		}
		obs := &outcomes{}
		l, err := lock.New(b, &lock.Options{Observer: obs, Logger: slog.New(&logRecorder{})})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		start := time.Now()
		_, err = l.Acquire(ctx, "x", time.Minute, nil)
		check(t, "Acquire with a dial timeout", obs, err, time.Since(start))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("the dial timeout does not match context.DeadlineExceeded here: %v", err)
		}
	})

	t.Run("read", func(t *testing.T) {
		e := newEnv(t, adapters[0])
		t.Cleanup(func() { _ = e.srv.Resume() })
		client := redis.NewClient(&redis.Options{Addr: e.srv.Addr, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
		defer client.Close()
		b, err := redisbackend.New(client, &redisbackend.Options{Prefix: e.prefix})
		if err != nil {
			t.Fatal(err)
		}
		obs := &outcomes{}
		l := e.locker(b, lock.Options{Observer: obs})
		if err := client.Ping(ctx).Err(); err != nil { // a connection before the freeze
			t.Fatal(err)
		}
		if err := e.srv.Pause(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = l.Acquire(ctx, "x", time.Minute, nil)
		took := time.Since(start)
		if err := e.srv.Resume(); err != nil {
			t.Fatal(err)
		}
		check(t, "Acquire with a read timeout", obs, err, took)
	})
}
