package lock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/memorybackend"
)

func Example() {
	ctx := context.Background()
	locker := lock.New(memorybackend.New(nil), nil)
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
	locker := lock.New(memorybackend.New(nil), nil)
	defer locker.Close()

	total, err := lock.Do(ctx, locker, "order-42", 5*time.Second, func(ctx context.Context) (int, error) {
		// ctx is cancelled if the lease is lost; the lease is extended meanwhile.
		return 3 * 14, nil
	})
	fmt.Println(total, err)
	// Output: 42 <nil>
}

func ExampleLocker_AcquireMany() {
	ctx := context.Background()
	locker := lock.New(memorybackend.New(nil), nil)
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
	store := memorybackend.NewStore(nil)
	a := lock.New(store.NewBackend(), nil) // two "processes" on one store
	b := lock.New(store.NewBackend(), nil)
	defer a.Close()
	defer b.Close()

	held, _ := a.Acquire(ctx, "report", time.Minute)
	try, _ := b.TryAcquire(ctx, "report", time.Minute)
	fmt.Println(try.Acquired, try.WasInUse)
	held.Lease.Release(ctx)
	// Output: false true
}
