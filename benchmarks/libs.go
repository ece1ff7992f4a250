package main

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/memorybackend"
	"github.com/redislocker/lock/redisbackend"
	"github.com/redislocker/lock/rueidisbackend"
)

// A lib is one lock library at one setting: one entry of the table that
// every scenario runs. New makes one "process" of it: its own client and
// locker, as a separate program would have. Our adapters are entries like
// the peers; adding an adapter is adding an entry.
type lib struct {
	Name    string // unique, e.g. "ours/go-redis"
	Ours    bool
	Setting string // what it is configured with
	Redis   bool   // needs Redis (false: the memory backend)
	// Shared: runs the shared scenarios (semaphore, reader-writer; see
	// shared.go): our Redis adapters, and the peer pattern's library.
	Shared bool
	New    func(e *env) (proc, error)
}

// env is what one scenario gives its processes.
type env struct {
	addr   string
	prefix string        // key prefix of this run, "lockbench:<hex>:"
	cmds   *atomic.Int64 // client commands counted by the hooks
	mem    *memorybackend.Store
}

// proc is one process of a library.
type proc interface {
	// Lock takes the lock on id for ttl, waiting the way the library waits.
	// It returns errGaveUp when the library stopped waiting on its own
	// (retries exhausted, queue timeout); the caller then calls it again.
	Lock(ctx context.Context, id string, ttl time.Duration) (unlock func(context.Context) error, err error)
	Close()
}

// errGaveUp: the library stopped waiting by itself; the worker retries.
var errGaveUp = errors.New("gave up waiting")

// libs returns the table, in the order of the report.
func libs() []lib {
	return []lib{
		{Name: "ours/go-redis", Ours: true, Redis: true, Shared: true, Setting: "redisbackend (pub/sub wake-ups), lock.Options defaults", New: newOursGoRedis},
		{Name: "ours/rueidis", Ours: true, Redis: true, Shared: true, Setting: "rueidisbackend.New (tracking wake-ups, NOLOOP), lock.Options defaults", New: newOursRueidis(false)},
		{Name: "ours/rueidis-pubsub", Ours: true, Redis: true, Shared: true, Setting: "rueidisbackend.New with ClientOption.DisableCache (pub/sub wake-ups)", New: newOursRueidis(true)},
		{Name: "ours/memory", Ours: true, Setting: "memorybackend, in process", New: newOursMemory},
		{Name: "redsync", Redis: true, Setting: "defaults: 32 tries, 50-250 ms random retry delay", New: newRedsync(nil)},
		{Name: "redsync/tuned", Redis: true, Setting: "WithRetryDelay(1ms), unlimited tries", New: newRedsync([]redsync.Option{
			redsync.WithRetryDelay(time.Millisecond), redsync.WithTries(math.MaxInt32)})},
		{Name: "redislock", Redis: true, Setting: "LinearBackoff(100ms), its documented example (the default, NoRetry, never waits)", New: newBSM(100 * time.Millisecond)},
		{Name: "redislock/tuned", Redis: true, Shared: true, Setting: "LinearBackoff(1ms)", New: newBSM(time.Millisecond)},
		{Name: "rueidislock", Redis: true, Setting: "defaults: KeyMajority 2 (3 keys), tracking without NOLOOP", New: newRueidislock(false)},
		{Name: "rueidislock/tuned", Redis: true, Setting: "KeyMajority 1, NoLoopTracking", New: newRueidislock(true)},
	}
}

// ---- ours ----

type oursProc struct {
	l     *lock.Locker
	close func()
}

func (p *oursProc) Lock(ctx context.Context, id string, ttl time.Duration) (func(context.Context) error, error) {
	r, err := p.l.Acquire(ctx, id, ttl, nil)
	if err != nil {
		return nil, err
	}
	if !r.Acquired {
		return nil, errGaveUp
	}
	return r.Lease.Release, nil
}

func (p *oursProc) Close() {
	_ = p.l.Close()
	if p.close != nil {
		p.close()
	}
}

// locker gives AcquireMany (ours only) its Locker.
func (p *oursProc) locker() *lock.Locker { return p.l }

func newOursGoRedis(e *env) (proc, error) {
	c := newGoRedis(e)
	b, err := redisbackend.New(c, &redisbackend.Options{Prefix: e.prefix})
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	l, err := lock.New(b, nil)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &oursProc{l: l, close: func() { _ = c.Close() }}, nil
}

func newOursRueidis(pubsub bool) func(e *env) (proc, error) {
	return func(e *env) (proc, error) {
		b, err := rueidisbackend.New(&rueidisbackend.Options{
			Prefix:       e.prefix,
			ClientOption: rueidis.ClientOption{InitAddress: []string{e.addr}, DisableCache: pubsub},
			ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
				return newRueidis(e, o)
			},
		})
		if err != nil {
			return nil, err
		}
		l, err := lock.New(b, nil)
		if err != nil {
			_ = b.Close()
			return nil, err
		}
		return &oursProc{l: l}, nil // Close closes the client it built
	}
}

func newOursMemory(e *env) (proc, error) {
	l, err := lock.New(e.mem.NewBackend(), nil)
	if err != nil {
		return nil, err
	}
	return &oursProc{l: l}, nil
}

// ---- go-redsync/redsync ----

type redsyncProc struct {
	c    *redis.Client
	rs   *redsync.Redsync
	opts []redsync.Option
}

func newRedsync(opts []redsync.Option) func(e *env) (proc, error) {
	return func(e *env) (proc, error) {
		c := newGoRedis(e)
		return &redsyncProc{c: c, rs: redsync.New(redsyncgoredis.NewPool(c)), opts: opts}, nil
	}
}

// Lock makes a Mutex per call, as its examples do: a Mutex holds the value
// of one acquisition and must not be shared by concurrent callers.
func (p *redsyncProc) Lock(ctx context.Context, id string, ttl time.Duration) (func(context.Context) error, error) {
	m := p.rs.NewMutex(id, append([]redsync.Option{redsync.WithExpiry(ttl)}, p.opts...)...)
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var taken *redsync.ErrTaken
		if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
			return nil, errGaveUp
		}
		return nil, err
	}
	return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
}

func (p *redsyncProc) Close() { _ = p.c.Close() }

// ---- bsm/redislock ----

type bsmProc struct {
	c     *redis.Client
	l     *redislock.Client
	retry time.Duration
	next  atomic.Int64 // the shared scenarios' first slot of the next call
}

func newBSM(backoff time.Duration) func(e *env) (proc, error) {
	return func(e *env) (proc, error) {
		c := newGoRedis(e)
		return &bsmProc{c: c, l: redislock.New(c), retry: backoff}, nil
	}
}

func (p *bsmProc) Lock(ctx context.Context, id string, ttl time.Duration) (func(context.Context) error, error) {
	l, err := p.l.Obtain(ctx, id, ttl, &redislock.Options{RetryStrategy: redislock.LinearBackoff(p.retry)})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
			return nil, errGaveUp
		}
		return nil, err
	}
	return l.Release, nil
}

func (p *bsmProc) Close() { _ = p.c.Close() }

// ---- rueidis/rueidislock ----

type rueidislockProc struct{ l rueidislock.Locker }

func newRueidislock(tuned bool) func(e *env) (proc, error) {
	return func(e *env) (proc, error) {
		opt := rueidislock.LockerOption{
			KeyPrefix:    e.prefix + "rueidislock", // a namespace, not a performance setting
			ClientOption: rueidis.ClientOption{InitAddress: []string{e.addr}},
			ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
				return newRueidis(e, o)
			},
		}
		if tuned {
			opt.KeyMajority = 1
			opt.NoLoopTracking = true
		}
		l, err := rueidislock.NewLocker(opt)
		if err != nil {
			return nil, err
		}
		return &rueidislockProc{l: l}, nil
	}
}

// Lock ignores ttl: rueidislock leases last KeyValidity (5 s) and extend
// themselves until released.
func (p *rueidislockProc) Lock(ctx context.Context, id string, _ time.Duration) (func(context.Context) error, error) {
	_, cancel, err := p.l.WithContext(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return func(context.Context) error { cancel(); return nil }, nil
}

func (p *rueidislockProc) Close() { p.l.Close() }
