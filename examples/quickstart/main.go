// Command quickstart shows the lock library on the seed scenario: workers
// contending on order ids, the FIFO queue and WasInUse, an AcquireMany
// stream, and Do.
//
// It uses the go-redis adapter against REDIS_ADDR when that is set, and
// otherwise against an in-process Redis imitation (miniredis), so it runs
// with no setup. Its keys live under the prefix "quickstart:". It imports
// public packages only: copy it into your own module and run go mod tidy.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/redisbackend"
)

func main() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		// miniredis expires a key only when its clock is moved (FastForward
		// or SetTime): TTLs do not run down on their own. This demo releases
		// every lease it takes and never waits for one to expire, so it
		// leaves that clock alone. Use a real Redis for anything that relies
		// on expiry.
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		addr = m.Addr()
		fmt.Println("REDIS_ADDR is unset: using an in-process Redis imitation at", addr)
	}
	if err := run(context.Background(), addr); err != nil {
		log.Fatal(err)
	}
}

// processes makes Lockers that each stand for a separate process: one
// client, one backend, one Locker.
type processes struct {
	addr    string
	logger  *slog.Logger
	clients []*redis.Client
	lockers []*lock.Locker
}

func (p *processes) new() (*lock.Locker, error) {
	client := redis.NewClient(&redis.Options{Addr: p.addr})
	b, err := redisbackend.New(client, &redisbackend.Options{Prefix: "quickstart:"})
	if err != nil {
		client.Close()
		return nil, err
	}
	l, err := lock.New(b, &lock.Options{QueueTimeout: 10 * time.Second, Logger: p.logger})
	if err != nil {
		client.Close()
		return nil, err
	}
	p.clients = append(p.clients, client)
	p.lockers = append(p.lockers, l)
	return l, nil
}

func (p *processes) close() {
	for _, l := range p.lockers {
		l.Close()
	}
	for _, c := range p.clients {
		c.Close()
	}
}

func run(ctx context.Context, addr string) error {
	p := &processes{addr: addr, logger: slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	defer p.close()
	main, err := p.new()
	if err != nil {
		return err
	}

	fmt.Println("1. Three workers contend on order-42 while main holds it; they are served in arrival order.")
	res, err := main.Acquire(ctx, "order-42", 10*time.Second, nil)
	if err != nil {
		return err
	}
	fmt.Printf("   main:     acquired=%v wasInUse=%v fence=%d\n", res.Acquired, res.WasInUse, res.Lease.Fence())
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("worker-%d", i)
		w, err := p.new()
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := w.Acquire(ctx, "order-42", 10*time.Second, nil)
			if err != nil || !r.Acquired {
				fmt.Printf("   %s: not acquired (err=%v)\n", name, err)
				return
			}
			mu.Lock()
			order = append(order, name)
			fmt.Printf("   %s: acquired=%v wasInUse=%v fence=%d\n", name, r.Acquired, r.WasInUse, r.Lease.Fence())
			mu.Unlock()
			r.Lease.Release(ctx)
		}()
		time.Sleep(50 * time.Millisecond) // let this worker join the queue before the next one
	}
	if err := res.Lease.Release(ctx); err != nil {
		return err
	}
	wg.Wait()
	fmt.Printf("   served in order: %v\n", order)

	fmt.Println("2. TryAcquire never waits: while order-7 is held it reports WasInUse.")
	held, err := main.Acquire(ctx, "order-7", 10*time.Second, nil)
	if err != nil {
		return err
	}
	other, err := p.new()
	if err != nil {
		return err
	}
	try, err := other.TryAcquire(ctx, "order-7", time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("   try: acquired=%v wasInUse=%v\n", try.Acquired, try.WasInUse)

	fmt.Println("3. AcquireMany streams snapshots as ids are granted; order-7 comes once main releases it.")
	time.AfterFunc(100*time.Millisecond, func() { held.Lease.Release(ctx) })
	for snap, err := range other.AcquireMany(ctx, []string{"order-1", "order-2", "order-7"}, 10*time.Second, nil) {
		if err != nil {
			return err
		}
		var got []string
		for _, le := range snap.Acquired {
			got = append(got, fmt.Sprintf("%s (fence %d)", le.ID(), le.Fence()))
			le.Release(ctx) // once shown, each lease is ours to release
		}
		fmt.Printf("   snapshot: %v timed out: %v\n", got, snap.NotAcquired)
	}

	fmt.Println("4. Do runs a function under the lock, keeps the lease alive, and always releases.")
	total, err := lock.Do(ctx, main, "order-42", 2*time.Second, func(ctx context.Context, _ *lock.Lease) (int, error) {
		return 42 * 3, nil
	}, nil)
	fmt.Printf("   Do: result=%d err=%v\n", total, err)
	_, err = lock.Do(ctx, main, "order-42", 2*time.Second, func(ctx context.Context, _ *lock.Lease) (int, error) {
		return 0, errors.New("payment declined")
	}, nil)
	fmt.Printf("   Do with a failing fn: err=%v; lock free again: %v\n", err, free(ctx, other, "order-42"))

	fmt.Println("5. Do with NoWait runs a job once across replicas: a replica that finds it running skips it.")
	running, err := other.Acquire(ctx, "nightly-report", 10*time.Second, nil) // another replica runs the job
	if err != nil {
		return err
	}
	_, err = lock.Do(ctx, main, "nightly-report", time.Minute, func(ctx context.Context, le *lock.Lease) (int, error) {
		return 0, nil // the job; le.Fence() goes with its writes
	}, &lock.AcquireOptions{NoWait: true})
	fmt.Printf("   Do: err=%v (not acquired: %v)\n", err, errors.Is(err, lock.ErrNotAcquired))
	running.Lease.Release(ctx)
	return nil
}

// free reports whether id can be taken right now (and gives it back).
func free(ctx context.Context, l *lock.Locker, id string) bool {
	r, err := l.TryAcquire(ctx, id, time.Second)
	if err != nil || !r.Acquired {
		return false
	}
	return r.Lease.Release(ctx) == nil
}
