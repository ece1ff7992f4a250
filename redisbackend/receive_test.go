package redisbackend

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// A message for a channel this backend no longer has (it unsubscribed, and
// the server sent the message before it processed the UNSUBSCRIBE) is
// dropped, not delivered and not a crash.
func TestReceiveDropsMessageOfUnknownChannel(t *testing.T) {
	s := newSubscriber(nil, false)
	s.done = make(chan struct{})
	ch := make(chan any, 1)
	ch <- &redis.Message{Channel: "lock:{gone}:wake", Payload: "T"}
	close(ch)
	s.receive(ch) // returns when ch is drained; panicked before the fix
	select {
	case <-s.done:
	default:
		t.Fatal("receive did not finish")
	}
}
