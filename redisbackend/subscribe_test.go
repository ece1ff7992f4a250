package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/redisserver"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

func (e *env) numSub(channel string) int64 {
	e.t.Helper()
	n, err := e.raw.PubSubNumSub(ctx, channel).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return n[channel]
}

// commandCalls returns how often the server ran cmd (INFO commandstats).
func (e *env) commandCalls(cmd string) int64 {
	e.t.Helper()
	info, err := e.raw.Info(ctx, "commandstats").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return redisserver.CommandStat(e.t, info, cmd, "calls")
}

// TestSubscribeIsConfirmed: a message published by another client right
// after a Backend's first Subscribe returns is delivered, every time:
// Subscribe waits for the server's confirmation of the inbox channel.
func TestSubscribeIsConfirmed(t *testing.T) {
	e := newEnv(t)
	for i := range 20 {
		b, _ := e.backend(nil)
		id := fmt.Sprintf("s%d", i)
		w, cancel := adaptertest.Subscribe(t, b, id)
		if n := e.raw.Publish(ctx, b.Inbox(id), adaptertest.InboxMsg(id, ":tok")).Val(); n != 1 {
			t.Fatalf("round %d: PUBLISH right after Subscribe reached %d subscribers, want 1", i, n)
		}
		if x := w.Next(t); x != (backend.Wake{ID: id, Token: "tok"}) {
			t.Fatalf("round %d: wake = %+v", i, x)
		}
		cancel()
	}
}

// TestSubscribeIsSharedAndRefCounted: one pub/sub connection and one
// SUBSCRIBE (of its inbox) per Backend, whatever the ids; wake-ups reach
// the subscribers of the id they name, and only while subscribed; Close
// leaves the inbox.
func TestSubscribeIsSharedAndRefCounted(t *testing.T) {
	srv := redisserver.StartT(t, redisserver.Options{})
	e := newEnvAt(t, srv.Addr)
	b, _ := e.backend(nil)
	pubsubClients := func() int {
		list, err := e.raw.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range strings.Split(list, "\n") {
			if strings.Contains(l, " flags=P ") {
				n++
			}
		}
		return n
	}
	subs := e.commandCalls("subscribe")
	w1, c1 := adaptertest.Subscribe(t, b, "x")
	w2, c2 := adaptertest.Subscribe(t, b, "x")
	w3, c3 := adaptertest.Subscribe(t, b, "y")
	if got := e.commandCalls("subscribe") - subs; got != 1 {
		t.Fatalf("three Subscribes of two ids sent %d SUBSCRIBE commands, want 1 (the inbox's)", got)
	}
	if n := pubsubClients(); n != 1 {
		t.Fatalf("%d pub/sub connections for one Backend with two ids, want 1", n)
	}
	inbox := b.Inbox("x")
	if inbox != b.Inbox("y") || e.numSub(inbox) != 1 {
		t.Fatalf("inboxes of x and y %q, %q (%d subscribers); want one, subscribed once", inbox, b.Inbox("y"), e.numSub(inbox))
	}
	e.raw.Publish(ctx, inbox, adaptertest.InboxMsg("x", ":T1"))
	e.raw.Publish(ctx, inbox, adaptertest.InboxMsg("y", ":T2"))
	if a, b := w1.Next(t), w2.Next(t); a != (backend.Wake{ID: "x", Token: "T1"}) || b != a {
		t.Fatalf("wakes of x = %+v, %+v", a, b)
	}
	w3.Expect(t, "wake of y", backend.Wake{ID: "y", Token: "T2"})
	c1()
	c1() // idempotent
	e.raw.Publish(ctx, inbox, adaptertest.InboxMsg("x", ":T3"))
	if x := w2.Next(t); x.Token != "T3" {
		t.Fatalf("remaining subscriber of x got %+v", x)
	}
	c2()
	c3()
	if e.numSub(inbox) != 1 {
		t.Fatal("the inbox was left while the Backend lives: the next Subscribe would cost a round trip again")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, adaptertest.Deadline, "the inbox is left on Close", func() bool { return e.numSub(inbox) == 0 })
}

// TestSubscribeGivenUpBeforeConfirmation: a subscriber whose ctx ends
// before the confirmation leaves nothing subscribed, and the id can be
// subscribed again.
func TestSubscribeGivenUpBeforeConfirmation(t *testing.T) {
	e, b := newEnvBackend(t)
	ch := b.Inbox("g")
	for range 20 {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		// Bypass the backend's ctx check to reach the pending path.
		if c, err := b.subs.subscribe(cctx, "", ch, func(backend.Wake) {}); err == nil {
			c()
		}
	}
	testkit.Eventually(t, adaptertest.Deadline, "no subscription is left behind", func() bool { return e.numSub(ch) == 0 })
	w := adaptertest.NewWakes()
	c, err := b.subs.subscribe(ctx, "", ch, w.Fn)
	if err != nil {
		t.Fatal(err)
	}
	defer c()
	e.raw.Publish(ctx, ch, adaptertest.InboxMsg("g", ":again"))
	w.Expect(t, "wake after resubscribing", backend.Wake{ID: "g", Token: "again"})
}

// TestReconnectWakesAll: when the pub/sub connection drops, go-redis
// reconnects and re-subscribes, and every subscribed id gets
// Wake{ID, All: true}; wake-ups flow again afterwards.
func TestReconnectWakesAll(t *testing.T) {
	srv := redisserver.StartT(t, redisserver.Options{})
	e := newEnvAt(t, srv.Addr)
	b, _ := e.backend(nil)
	wa, ca := adaptertest.Subscribe(t, b, "ra")
	defer ca()
	wb, cb := adaptertest.Subscribe(t, b, "rb")
	defer cb()
	if n, err := e.raw.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v; want the backend's one connection", n, err)
	}
	wa.Expect(t, "wake of ra after reconnect", backend.Wake{ID: "ra", All: true})
	wb.Expect(t, "wake of rb after reconnect", backend.Wake{ID: "rb", All: true})
	e.raw.Publish(ctx, b.Inbox("ra"), adaptertest.InboxMsg("ra", ":after"))
	wa.Expect(t, "wake after reconnect", backend.Wake{ID: "ra", Token: "after"})
}

// TestCloseLeavesNoGoroutine: Close ends the connection goroutine and
// go-redis's pub/sub goroutines, and ends a pending Subscribe.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	_, b := newEnvBackend(t)
	if _, err := b.Subscribe(ctx, "c", func(backend.Wake) {}); err != nil {
		t.Fatal(err)
	}
	if !goroutinesMatch("wakeup.(*Supervisor).serve") {
		t.Fatal("no connection goroutine while subscribed: the check below would prove nothing")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if goroutinesMatch("wakeup.(*Supervisor)") {
		t.Fatal("a goroutine of the Supervisor outlived Close")
	}
	testkit.Eventually(t, adaptertest.Deadline, "go-redis's pub/sub goroutines end after Close", func() bool {
		return !goroutinesMatch("go-redis/v9.(*channel)")
	})
	if _, err := b.Subscribe(ctx, "c", func(backend.Wake) {}); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Subscribe after Close = %v", err)
	}
}

func goroutinesMatch(s string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Contains(string(buf), s)
}

// TestSubscribeFailsWhenServerIsDown: Subscribe reports the client's error
// (not a hang) when no server answers.
func TestSubscribeFailsWhenServerIsDown(t *testing.T) {
	srv := redisserver.StartT(t, redisserver.Options{})
	addr := srv.Addr
	srv.Close()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer client.Close()
	b, err := concrete(New(client, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := b.Subscribe(cctx, "down", func(backend.Wake) {}); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Subscribe with the server down = %v, want the client's error", err)
	}
	if _, err := b.Acquire(cctx, req("down", "A", false)); err == nil || errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Acquire with the server down = %v, want the client's error", err)
	}
}
