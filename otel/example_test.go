package lockotel_test

import (
	"log"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/memorybackend"
	lockotel "github.com/redislocker/lock/otel"
)

// Example is the README's snippet: one Observer on the global providers,
// given to a Locker.
func Example() {
	b, err := memorybackend.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	obs, err := lockotel.NewObserver(nil) // the global MeterProvider and TracerProvider
	if err != nil {
		log.Fatal(err)
	}
	locker, err := lock.New(b, &lock.Options{Observer: obs})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	// Output:
}
