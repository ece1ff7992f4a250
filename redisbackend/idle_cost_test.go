package redisbackend

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/internal/scripts"
)

// scriptLog is a go-redis hook that records which script each EVALSHA or
// EVAL runs, per round trip.
type scriptLog struct {
	mu    sync.Mutex
	trips [][]string // one entry per round trip: the scripts (or command names) in it
	bySHA map[string]string
	bySrc map[string]string
}

func newScriptLog() *scriptLog {
	l := &scriptLog{bySHA: map[string]string{}, bySrc: map[string]string{}}
	for _, s := range scripts.All() {
		l.bySHA[s.SHA1] = s.Name
		l.bySrc[s.Source] = s.Name
	}
	return l
}

func (l *scriptLog) name(cmd redis.Cmder) string {
	args := cmd.Args()
	switch cmd.Name() {
	case "evalsha":
		if n, ok := l.bySHA[fmt.Sprint(args[1])]; ok {
			return n
		}
	case "eval":
		if n, ok := l.bySrc[fmt.Sprint(args[1])]; ok {
			return n
		}
	}
	return cmd.Name()
}

func (l *scriptLog) record(cmds ...redis.Cmder) {
	var trip []string
	for _, c := range cmds {
		if !isSetup(c) {
			trip = append(trip, l.name(c))
		}
	}
	if len(trip) == 0 {
		return
	}
	l.mu.Lock()
	l.trips = append(l.trips, trip)
	l.mu.Unlock()
}

func (l *scriptLog) take() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.trips
	l.trips = nil
	return t
}

func (l *scriptLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *scriptLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { l.record(cmd); return next(ctx, cmd) }
}
func (l *scriptLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { l.record(cmds...); return next(ctx, cmds) }
}

// TestIdleWaitersOnlyHeartbeat: waiters queued on held ids send no polling
// commands. Their process sends one batched heartbeat round trip every
// WaiterTimeout/3 (one heartbeat script per id in it), and nothing else.
func TestIdleWaitersOnlyHeartbeat(t *testing.T) {
	e := newEnv(t)
	ha, _ := e.backend(nil)
	holder, err := lock.New(ha, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()

	client := newClient(e.addr)
	defer client.Close()
	log := newScriptLog()
	client.AddHook(log)
	bb, err := New(client, &Options{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	const waiterTimeout = 300 * time.Millisecond // heartbeat every 100ms
	waiters, err := lock.New(bb, &lock.Options{WaiterTimeout: waiterTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer waiters.Close()

	ids := []string{"idle-1", "idle-2"}
	for _, id := range ids {
		r, err := holder.Acquire(ctx, id, time.Minute) // no holder timer fires within the window
		if err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
		defer r.Lease.Release(ctx)
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ { // three waiters per id
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = waiters.Acquire(wctx, ids[i%2], time.Minute)
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	for _, id := range ids {
		q := bb.keyNames(id).Queue
		eventually(t, "three waiters queue on "+id, func() bool { return e.raw.ZCard(ctx, q).Val() == 3 })
	}
	log.take()

	// Measure a fixed window (this is counting, not waiting for an event).
	const window = time.Second
	time.Sleep(window)
	trips := log.take()

	perInterval := window / (waiterTimeout / 3)
	if len(trips) == 0 || len(trips) > int(perInterval)+2 {
		t.Fatalf("%d round trips in %v, want 1..%d (one heartbeat round trip per %v): %v",
			len(trips), window, perInterval+2, waiterTimeout/3, trips)
	}
	for _, trip := range trips {
		if len(trip) != len(ids) {
			t.Fatalf("a round trip with %v, want one heartbeat per id (%d)", trip, len(ids))
		}
		for _, s := range trip {
			if s != "heartbeat" {
				t.Fatalf("an idle waiter's process sent %q (round trip %v); want heartbeats only", s, trip)
			}
		}
	}
	t.Logf("6 idle waiters on 2 ids: %d round trips (%d heartbeat scripts) in %v: %.2f commands/s per waiter",
		len(trips), len(trips)*len(ids), window, float64(len(trips)*len(ids))/window.Seconds()/6)
}
