package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/memorybackend"
	"github.com/redislocker/lock/redisbackend"
	"github.com/redislocker/lock/rueidisbackend"
)

func Example() {
	ctx := context.Background()
	b, _ := memorybackend.New(nil)
	locker, err := lock.New(b, nil)
	if err != nil {
		panic(err) // bad options: an *ArgumentError naming the field
	}
	defer locker.Close()

	res, err := locker.Acquire(ctx, "order-42", 10*time.Second, nil)
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
// others skip it at once with ErrNotAcquired (logged at Debug only: the
// skip is what they asked for).
func ExampleDo_runOnce() {
	store, _ := memorybackend.NewStore(nil) // stands for the Redis the replicas share
	var skipped sync.WaitGroup
	skipped.Add(2)
	nightly := func(ctx context.Context, lease *lock.Lease) (string, error) {
		skipped.Wait() // the job outlasts the other replicas' attempts
		return fmt.Sprintf("report written with a fence: %v", lease.Fence() > 0), nil
	}

	var replicas sync.WaitGroup
	for range 3 {
		replica, _ := lock.New(store.NewBackend(), nil)
		replicas.Go(func() {
			defer replica.Close()
			if !runNightly(context.Background(), replica, nightly) {
				skipped.Done()
			}
		})
	}
	replicas.Wait()
	// Output: report written with a fence: true <nil>
}

// runNightly is one replica's attempt at the nightly job; ran reports
// whether this replica ran it.
func runNightly(ctx context.Context, replica *lock.Locker, nightly func(context.Context, *lock.Lease) (string, error)) (ran bool) {
	out, err := lock.Do(ctx, replica, "nightly-report", time.Minute,
		nightly, &lock.AcquireOptions{NoWait: true})
	if errors.Is(err, lock.ErrNotAcquired) {
		return // another replica runs it
	}
	fmt.Println(out, err)
	return true
}

func ExampleLocker_AcquireMany() {
	ctx := context.Background()
	b, _ := memorybackend.New(nil)
	locker, _ := lock.New(b, nil)
	defer locker.Close()

	n := 0
	for snap, err := range locker.AcquireMany(ctx, []string{"a", "b", "c"}, 10*time.Second, nil) {
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

	held, _ := a.Acquire(ctx, "report", time.Minute, nil)
	try, _ := b.TryAcquire(ctx, "report", time.Minute)
	fmt.Println(try.Acquired, try.WasInUse)
	held.Lease.Release(ctx)
	// Output: false true
}

// ExampleLocker_Acquire_semaphore: at most 4 calls to a partner's API at
// once, across every process, served in arrival order.
func ExampleLocker_Acquire_semaphore() {
	ctx := context.Background()
	b, _ := memorybackend.New(nil)
	locker, _ := lock.New(b, nil)
	defer locker.Close()

	partner := &lock.AcquireOptions{Capacity: 4} // a semaphore of 4 permits; each lease takes 1
	res, err := locker.Acquire(ctx, "partner-api", 30*time.Second, partner)
	if err != nil || !res.Acquired {
		return
	}
	defer res.Lease.Release(ctx)
	in, _ := locker.Inspect(ctx, "partner-api")
	fmt.Println(len(in.Holders), "of", in.Capacity)
	// Output: 1 of 4
}

// ExampleLocker_Acquire_readersWriter: readers share the id; the writer
// takes every permit, so it waits for the readers ahead of it and holds
// back the readers behind it.
func ExampleLocker_Acquire_readersWriter() {
	ctx := context.Background()
	store, _ := memorybackend.NewStore(nil)
	a, _ := lock.New(store.NewBackend(), nil)
	b, _ := lock.New(store.NewBackend(), nil)
	defer a.Close()
	defer b.Close()

	read := &lock.AcquireOptions{Capacity: 100}                // up to 100 readers at once
	write := &lock.AcquireOptions{Capacity: 100, Permits: 100} // the writer excludes everyone
	r, _ := a.Acquire(ctx, "prices", time.Minute, read)
	w, _ := b.Acquire(ctx, "prices", time.Minute, &lock.AcquireOptions{Capacity: 100, Permits: 100, NoWait: true})
	fmt.Println(r.Acquired, w.Acquired)
	r.Lease.Release(ctx)
	w, _ = b.Acquire(ctx, "prices", time.Minute, write)
	fmt.Println(w.Acquired)
	w.Lease.Release(ctx)
	// Output:
	// true false
	// true
}

// Example_redis is the README's API tour: the go-redis adapter against a
// Redis at localhost:6379. It is compiled but not run (it has no output).
func Example_redis() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{
		Addr:                  "localhost:6379",
		DialTimeout:           time.Second,     // default 5 s
		ReadTimeout:           time.Second,     // default 3 s; a step is one script call: milliseconds
		WriteTimeout:          time.Second,     // default: ReadTimeout
		PoolTimeout:           2 * time.Second, // default: ReadTimeout + 1 s
		ContextTimeoutEnabled: true,            // ctx deadlines bound the socket too (default: ignored)
		MaxRetries:            1,               // default 3 resends after a network error
		DialerRetries:         2,               // default 5 dials per connection, 100 ms apart
	})
	defer client.Close()
	b, err := redisbackend.New(client, nil) // or rueidisbackend.New (below), or memorybackend.New(nil) in unit tests
	if err != nil {
		log.Fatal(err)
	}
	locker, err := lock.New(b, nil) // nil options: QueueTimeout 30 min, BatchTick 50 ms, WaiterTimeout 15 s, slog.Default()
	if err != nil {
		log.Fatal(err) // bad options: an *backend.ArgumentError naming the field
	}
	defer locker.Close() // closes b (not client), before client.Close runs

	res, err := locker.Acquire(ctx, "order-42", 10*time.Second, nil)
	switch {
	case err != nil: // backend failure (errors.Is(err, lock.ErrBackend)), ctx ended, or bad input (lock.ErrInvalidArgument)
		log.Print(err)
	case !res.Acquired: // the queue timeout passed: res.WasInUse == true, and nothing is held
		log.Print("order-42 is still in use")
	default:
		defer res.Lease.Release(ctx)
		// res.WasInUse tells whether we had to queue; res.Lease.Fence() goes with every write to the resource.
	}
}

// Example_rueidis is the README's rueidis client with production
// timeouts. It is compiled but not run (it has no output).
func Example_rueidis() {
	b, err := rueidisbackend.New(&rueidisbackend.Options{ClientOption: rueidis.ClientOption{
		InitAddress: []string{"localhost:6379"},
		// Defaults: a 5 s dial timeout; ConnWriteTimeout 10 x KeepAlive (1 s): 10 s.
		Dialer:           net.Dialer{Timeout: time.Second, KeepAlive: time.Second},
		ConnWriteTimeout: time.Second,
	}})
	if err != nil {
		log.Fatal(err) // rueidis dials in New: a Redis that is down fails here
	}
	locker, err := lock.New(b, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close() // closes b and the client it built
}

// invoices stands for the resource a lock protects: a table that keeps the
// highest fence it has seen and refuses a write with a lower one.
type invoices struct {
	total int
	fence uint64
}

// Exec runs "UPDATE invoices SET total = $1, fence = $2 WHERE id = 42 AND
// fence <= $2" and returns the number of rows it changed.
func (db *invoices) Exec(_ context.Context, _ string, total int, fence uint64) (int64, error) {
	if fence < db.fence {
		return 0, nil
	}
	db.total, db.fence = total, fence
	return 1, nil
}

// Example_fencing is the fenced write of docs/deployment.md: only the
// resource can turn away the late write of a holder whose lease ended.
func Example_fencing() {
	ctx := context.Background()
	b, _ := memorybackend.New(nil) // nil options never fail
	locker, _ := lock.New(b, nil)
	defer locker.Close()
	db := &invoices{}
	const q = "UPDATE invoices SET total = $1, fence = $2 WHERE id = 42 AND fence <= $2"
	total := 120

	res, err := locker.Acquire(ctx, "invoice-42", 10*time.Second, nil)
	if err != nil || !res.Acquired {
		return
	}
	defer res.Lease.Release(ctx)
	// The storage keeps the highest fence it has seen and refuses anything lower:
	//   UPDATE invoices SET total = $1, fence = $2 WHERE id = 42 AND fence <= $2
	n, err := db.Exec(ctx, q, total, res.Lease.Fence())
	if err != nil || n == 0 {
		return // a newer holder has written: our lease is stale; give up
	}
	stale, _ := db.Exec(ctx, q, 99, res.Lease.Fence()-1) // a holder with an older fence
	fmt.Println("rows written:", n, "by a stale holder:", stale)
	// Output: rows written: 1 by a stale holder: 0
}
