package redisserver

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A key's TTL runs down with the wall clock: a key set with PX expires
// without anyone calling FastForward.
func TestTTLFollowsWallClock(t *testing.T) {
	s, err := StartMiniredis()
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

// No key expires early: a key set with PX 20 at t0 (taken before the SET
// is sent) is never found gone by a reply received before t0+20ms. The
// clock is charged from when a command's bytes arrive, never from an
// earlier tick (a pump that charged every key for the whole time since
// its last tick let 39 of 200 such keys expire up to 4.3 ms early).
func TestNoEarlyExpiry(t *testing.T) {
	s, err := StartMiniredis()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const ttl = 20 * time.Millisecond
	const workers, keys = 20, 10
	late := ttl + 2*time.Second // bounded lateness: TTL + a tick + slack for a loaded 2-core machine
	var wg sync.WaitGroup
	errs := make(chan string, workers*keys)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 1})
			defer c.Close()
			ctx := context.Background()
			for k := range keys {
				key := fmt.Sprint("k", w, ":", k)
				t0 := time.Now()
				if err := c.Set(ctx, key, "v", ttl).Err(); err != nil {
					errs <- err.Error()
					return
				}
				for {
					n, err := c.Exists(ctx, key).Result()
					at := time.Since(t0)
					if err != nil {
						errs <- err.Error()
						return
					}
					if n == 0 {
						if at < ttl {
							errs <- fmt.Sprintf("%s with a %v TTL gone %v after its SET was sent: %v early", key, ttl, at, ttl-at)
						}
						break
					}
					if at > late {
						errs <- fmt.Sprintf("%s with a %v TTL still there %v after its SET (bound %v)", key, ttl, at, late)
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for e := range errs {
		if n < 10 {
			t.Error(e)
		}
		n++
	}
	if n > 0 {
		t.Errorf("%d of %d keys expired early or failed", n, workers*keys)
	}
}
