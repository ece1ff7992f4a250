package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/memorybackend"
)

func Example() {
	ctx := context.Background()
	b, _ := memorybackend.New(nil)
	locker, err := lock.New(b, nil)
	if err != nil {
		panic(err) // bad options: an *ArgumentError naming the field
	}
	defer locker.Close()

	res, err := locker.Acquire(ctx, "order-42", 10*time.Second)
	if err != nil {
		panic(err) // a backend failure, a cancelled ctx or bad input
	}
	if !res.Acquired {
		return // queue timeout: the caller decides what to do
	}
	defer res.Lease.Release(ctx)
	fmt.Println(res.ID, res.WasInUse, res.Lease.Fence() > 0)
	// Output: order-42 false true
}

func ExampleDo() {
	ctx := context.Background()
	b, _ := memorybackend.New(nil)
	locker, _ := lock.New(b, nil)
	defer locker.Close()

	total, err := lock.Do(ctx, locker, "order-42", 5*time.Second, func(ctx context.Context, lease *lock.Lease) (int, error) {
		// ctx is cancelled if the lease is lost; the lease is extended meanwhile.
		// Pass lease.Fence() with every write to the resource you protect.
		return 3 * 14, nil
	}, nil)
	fmt.Println(total, err)
	// Output: 42 <nil>
}

// A job that must run once across replicas: each replica calls Do with
// NoWait when the job is due; the one that gets the lock runs it, the
// others skip it at once with ErrNotAcquired (logged at Warn).
func ExampleDo_runOnce() {
	store, _ := memorybackend.NewStore(nil) // stands for the Redis the replicas share
	var skipped sync.WaitGroup
	skipped.Add(2)
	nightly := func(ctx context.Context, lease *lock.Lease) (string, error) {
		skipped.Wait() // the job outlasts the other replicas' attempts
		return fmt.Sprintf("report written with fence %d", lease.Fence()), nil
	}

	var replicas sync.WaitGroup
	for range 3 {
		replica, _ := lock.New(store.NewBackend(), nil)
		replicas.Go(func() {
			defer replica.Close()
			out, err := lock.Do(context.Background(), replica, "nightly-report", time.Minute,
				nightly, &lock.AcquireOptions{NoWait: true})
			if errors.Is(err, lock.ErrNotAcquired) {
				skipped.Done() // another replica runs it
				return
			}
			fmt.Println(out, err)
		})
	}
	replicas.Wait()
	// Output: report written with fence 1 <nil>
}

func ExampleLocker_AcquireMany() {
	ctx := context.Background()
	b, _ := memorybackend.New(nil)
	locker, _ := lock.New(b, nil)
	defer locker.Close()

	n := 0
	for snap, err := range locker.AcquireMany(ctx, []string{"a", "b", "c"}, 10*time.Second) {
		if err != nil {
			panic(err)
		}
		for _, le := range snap.Acquired {
			n++
			le.Release(ctx) // each lease is the caller's once shown
		}
	}
	fmt.Println("acquired", n)
	// Output: acquired 3
}

func ExampleLocker_TryAcquire() {
	ctx := context.Background()
	store, _ := memorybackend.NewStore(nil)
	a, _ := lock.New(store.NewBackend(), nil) // two "processes" on one store
	b, _ := lock.New(store.NewBackend(), nil)
	defer a.Close()
	defer b.Close()

	held, _ := a.Acquire(ctx, "report", time.Minute)
	try, _ := b.TryAcquire(ctx, "report", time.Minute)
	fmt.Println(try.Acquired, try.WasInUse)
	held.Lease.Release(ctx)
	// Output: false true
}
