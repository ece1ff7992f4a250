package embedredis

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A key's TTL runs down with the wall clock: a key set with PX expires
// without anyone calling FastForward.
func TestTTLFollowsWallClock(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 20*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := c.Exists(ctx, "k").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a key with a 20ms TTL still exists after 5s: the clock pump does not run")
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	s.Close()
	s.Close() // idempotent
}
