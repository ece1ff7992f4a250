package wakeup

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

type opener struct {
	mu      sync.Mutex
	opens   int
	cancels int
	fail    error
	deliver map[string]func(backend.Wake)
}

func (o *opener) open(channel string) func(context.Context, func(backend.Wake)) (func(), error) {
	return func(_ context.Context, deliver func(backend.Wake)) (func(), error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.opens++
		if o.fail != nil {
			return nil, o.fail
		}
		o.deliver[channel] = deliver
		return func() {
			o.mu.Lock()
			o.cancels++
			o.mu.Unlock()
		}, nil
	}
}

// The first Subscribe through a channel opens it, later ones only
// register; messages reach the named id's subscribers only, and a
// resubscription of one channel wakes every id it serves, not the others.
func TestInboxRouting(t *testing.T) {
	in := NewInbox()
	o := &opener{deliver: map[string]func(backend.Wake){}}
	var rec testkit.Recorder[backend.Wake]
	ctx := context.Background()
	ca, err := in.Subscribe(ctx, "a", "c1", rec.Fn("a"), o.open("c1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Subscribe(ctx, "b", "c1", rec.Fn("b"), o.open("c1")); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Subscribe(ctx, "c", "c2", rec.Fn("c"), o.open("c2")); err != nil {
		t.Fatal(err)
	}
	if o.opens != 2 {
		t.Fatalf("%d opens for 3 ids on 2 channels, want 2", o.opens)
	}
	if !in.Message("1:a:T") || in.Message("junk") {
		t.Fatal("Message: a valid message reported unparsed, or junk parsed")
	}
	o.deliver["c1"](backend.Wake{All: true}) // c1 resubscribed
	got := rec.Got()
	if len(got["a"]) != 2 || got["a"][0] != (backend.Wake{ID: "a", Token: "T"}) || got["a"][1] != (backend.Wake{ID: "a", All: true}) {
		t.Fatalf("a got %+v, want its message, then All", got["a"])
	}
	if len(got["b"]) != 1 || !got["b"][0].All || len(got["c"]) != 0 {
		t.Fatalf("b got %+v, c got %+v; want only c1's All for b", got["b"], got["c"])
	}
	if n := in.Received(); n != 2 {
		t.Fatalf("Received = %d, want 2 (both messages, not the All)", n)
	}
	ca()
	ca()
	in.Message("1:a:U")
	if a := rec.Got()["a"]; len(a) != 2 {
		t.Fatalf("a got %+v after cancel", a)
	}
	in.Close()
	if o.cancels != 2 {
		t.Fatalf("Close cancelled %d channel subscriptions, want 2", o.cancels)
	}
	if _, err := in.Subscribe(ctx, "a", "c1", rec.Fn("a"), o.open("c1")); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Subscribe after Close = %v, want ErrClosed", err)
	}
}

// A failed open is reported, and the next Subscribe opens again.
func TestInboxOpenFails(t *testing.T) {
	in := NewInbox()
	defer in.Close()
	boom := errors.New("boom")
	o := &opener{deliver: map[string]func(backend.Wake){}, fail: boom}
	if _, err := in.Subscribe(context.Background(), "a", "c", func(backend.Wake) {}, o.open("c")); !errors.Is(err, boom) {
		t.Fatalf("Subscribe = %v, want the open's failure", err)
	}
	o.fail = nil
	if _, err := in.Subscribe(context.Background(), "a", "c", func(backend.Wake) {}, o.open("c")); err != nil {
		t.Fatalf("Subscribe after a failed open = %v", err)
	}
	if o.opens != 2 {
		t.Fatalf("%d opens, want 2", o.opens)
	}
}
