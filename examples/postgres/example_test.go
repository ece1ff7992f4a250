package postgres_test

import (
	"context"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/examples/postgres"
)

// Example is the README's snippet. It is compiled, not run (it needs a
// PostgreSQL server).
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	b, err := postgres.New(ctx, pool, nil) // creates schema "golock" if needed
	if err != nil {
		log.Fatal(err)
	}
	locker, err := lock.New(b, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close() // closes b; the deferred pool.Close runs after it
	res, err := locker.Acquire(ctx, "invoice-42", 10*time.Second, nil)
	if err != nil || !res.Acquired {
		return
	}
	defer res.Lease.Release(ctx)
	// Pass res.Lease.Fence() with every write the lock protects.
}
