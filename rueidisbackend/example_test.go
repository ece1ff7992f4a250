package rueidisbackend_test

import (
	"log"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/rueidisbackend"
)

// Example is the package doc's snippet: a Locker on a Backend that builds
// its own rueidis client (tracking mode). It is compiled, not run (it
// needs a Redis at localhost:6379).
func Example() {
	b, err := rueidisbackend.New(&rueidisbackend.Options{
		ClientOption: rueidis.ClientOption{InitAddress: []string{"localhost:6379"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	locker, err := lock.New(b, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close() // closes b, which closes the client it built
}
