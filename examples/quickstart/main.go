// Command quickstart shows the lock library on the seed scenario: workers
// contending on order ids, the FIFO queue and WasInUse, an AcquireMany
// stream, and Do. It needs no setup: it runs on the in-memory backend.
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

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/memorybackend"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	store := memorybackend.NewStore(nil)
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Each worker is its own "process": its own backend on the shared store.
	newLocker := func() *lock.Locker {
		return lock.New(store.NewBackend(), &lock.Options{QueueTimeout: 5 * time.Second, Logger: logger})
	}

	fmt.Println("1. Three workers contend on order-42; they are served in arrival order.")
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	first := newLocker()
	defer first.Close()
	res, err := first.Acquire(ctx, "order-42", 10*time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("   main: acquired=%v wasInUse=%v fence=%d\n", res.Acquired, res.WasInUse, res.Lease.Fence())
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("worker-%d", i)
		l := newLocker()
		defer l.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := l.Acquire(ctx, "order-42", 10*time.Second)
			if err != nil || !r.Acquired {
				fmt.Printf("   %s: not acquired (err=%v)\n", name, err)
				return
			}
			mu.Lock()
			order = append(order, name)
			fmt.Printf("   %s: acquired=%v wasInUse=%v fence=%d\n", name, r.Acquired, r.WasInUse, r.Lease.Fence())
			mu.Unlock()
			_ = r.Lease.Release(ctx)
		}()
		// Let each worker join the queue before the next, so the order is known.
		waitQueued(store, "order-42", i)
	}
	if err := res.Lease.Release(ctx); err != nil {
		return err
	}
	wg.Wait()
	fmt.Printf("   served in order: %v\n", order)

	fmt.Println("2. TryAcquire never waits: while order-7 is held it reports WasInUse.")
	held, err := first.Acquire(ctx, "order-7", 10*time.Second)
	if err != nil {
		return err
	}
	other := newLocker()
	defer other.Close()
	try, err := other.TryAcquire(ctx, "order-7", time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("   try: acquired=%v wasInUse=%v\n", try.Acquired, try.WasInUse)

	fmt.Println("3. AcquireMany streams snapshots as ids are granted (order-7 comes once released).")
	go func() {
		waitQueued(store, "order-7", 1)
		_ = held.Lease.Release(ctx)
	}()
	for snap, err := range other.AcquireMany(ctx, []string{"order-1", "order-2", "order-7"}, 10*time.Second) {
		if err != nil {
			return err
		}
		for _, le := range snap.Acquired {
			fmt.Printf("   snapshot: %s (fence %d)\n", le.ID(), le.Fence())
			_ = le.Release(ctx)
		}
	}

	fmt.Println("4. Do runs a function under the lock, keeps it alive, and always releases.")
	total, err := lock.Do(ctx, first, "order-42", 2*time.Second, func(ctx context.Context) (int, error) {
		return 42 * 3, nil
	})
	fmt.Printf("   Do: result=%d err=%v\n", total, err)
	_, err = lock.Do(ctx, first, "order-42", 2*time.Second, func(ctx context.Context) (int, error) {
		return 0, errors.New("payment declined")
	})
	fmt.Printf("   Do with a failing fn: err=%v (released: %v)\n", err, free(ctx, other, "order-42"))
	return nil
}

// waitQueued waits until id has n waiters in the store's queue.
func waitQueued(store *memorybackend.Store, id string, n int) {
	deadline := time.Now().Add(5 * time.Second)
	for len(store.Waiters(id)) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// free reports whether id can be taken right now (and gives it back).
func free(ctx context.Context, l *lock.Locker, id string) bool {
	r, err := l.TryAcquire(ctx, id, time.Second)
	if err != nil || !r.Acquired {
		return false
	}
	return r.Lease.Release(ctx) == nil
}
