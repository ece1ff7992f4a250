package redisbackend_test

import (
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/redisbackend"
)

// Example is the package doc's snippet: a Locker on a go-redis client. It
// is compiled, not run (it needs a Redis at localhost:6379).
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	b, err := redisbackend.New(client, nil) // prefix "lock:"
	if err != nil {
		log.Fatal(err)
	}
	locker, err := lock.New(b, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close() // closes b; the deferred client.Close runs after it
}
