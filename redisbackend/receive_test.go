package redisbackend

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/internal/redis/wakeup"
)

// TestMessageEvents: what go-redis's Receive returns becomes the
// Supervisor's events: a message, a confirmation, a dropped shard channel;
// a PONG is nothing. (A message of a channel the Supervisor no longer has
// is dropped there.)
func TestMessageEvents(t *testing.T) {
	for _, c := range []struct {
		in   any
		want wakeup.Event
		ok   bool
	}{
		{&redis.Message{Channel: "lock:{gone}:wake", Payload: "T"}, wakeup.Event{Kind: wakeup.Message, Channel: "lock:{gone}:wake", Payload: "T"}, true},
		{&redis.Subscription{Kind: "subscribe", Channel: "c"}, wakeup.Event{Kind: wakeup.Confirmed, Channel: "c"}, true},
		{&redis.Subscription{Kind: "ssubscribe", Channel: "c"}, wakeup.Event{Kind: wakeup.Confirmed, Channel: "c"}, true},
		{&redis.Subscription{Kind: "sunsubscribe", Channel: "c"}, wakeup.Event{Kind: wakeup.Dropped, Channel: "c"}, true},
		{&redis.Subscription{Kind: "unsubscribe", Channel: "c"}, wakeup.Event{}, false},
		{&redis.Pong{}, wakeup.Event{}, false},
	} {
		if got, ok := messageEvent(c.in); got != c.want || ok != c.ok {
			t.Errorf("messageEvent(%#v) = %+v, %v; want %+v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// TestReplyEvents: an error reply on a pub/sub connection is a redirect
// (Moved, with its slot), a refusal, or (CROSSSLOT) the end of the
// connection.
func TestReplyEvents(t *testing.T) {
	if ev, ok := replyEvent(replyErr("MOVED 3999 127.0.0.1:7001")); !ok || ev.Kind != wakeup.Moved || ev.Slot != 3999 {
		t.Errorf("MOVED: %+v, %v", ev, ok)
	}
	if ev, ok := replyEvent(replyErr("ASK 12 127.0.0.1:7001")); !ok || ev.Kind != wakeup.Moved || ev.Slot != 12 {
		t.Errorf("ASK: %+v, %v", ev, ok)
	}
	if _, ok := replyEvent(replyErr("CROSSSLOT Keys in request don't hash to the same slot")); ok {
		t.Error("CROSSSLOT kept the connection")
	}
	noperm := replyErr("NOPERM no permissions")
	if ev, ok := replyEvent(noperm); !ok || ev.Kind != wakeup.Refused || !errors.Is(ev.Err, noperm) || ev.Channel != "" {
		t.Errorf("NOPERM: %+v, %v", ev, ok)
	}
}

// replyErr is an error reply as go-redis returns one.
type replyErr string

func (e replyErr) Error() string { return string(e) }

func (replyErr) RedisError() {}
