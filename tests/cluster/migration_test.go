package cluster

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/harness"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// guard is a real-time detector of one id's grants: at most one holder
// inside, and fences strictly increasing in the order holders enter.
type guard struct {
	mu        sync.Mutex
	inside    int
	lastFence uint64
	grants    int
	lastExit  time.Time
	maxGap    time.Duration // longest release-to-next-grant while measuring
	measuring bool
	overlaps  int
	backwards int
}

func (g *guard) enter(fence uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inside++
	if g.inside > 1 {
		g.overlaps++
	}
	if fence <= g.lastFence {
		g.backwards++
	}
	g.lastFence = fence
	g.grants++
	if g.measuring && !g.lastExit.IsZero() {
		g.maxGap = max(g.maxGap, time.Since(g.lastExit))
	}
}

func (g *guard) exit() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inside--
	g.lastExit = time.Now()
}

func (g *guard) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.grants
}

// TestSlotMigration moves the slot of three ids to another master and
// back while four processes contend for each of them (locks held, waiters
// queued: checked on the source when the slot opens), one key per MIGRATE,
// so the steps meet every partial state (ASK, TRYAGAIN, MOVED). A real-time
// detector sees no double grant and no fence going backwards; after each
// move every id is granted again, each hand-off within 3 s, with the
// holder's TTL (10 s) and the waiters' heartbeats (every 10 s) too slow to
// explain it: waiters are still woken, by pub/sub that followed the slot or
// by tracking. Nothing but the counters is left at the end.
func TestSlotMigration(t *testing.T) {
	c := Shared(t)
	c.RequireOwned(t)
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			testSlotMigration(t, c, a.make)
		})
	}
}

func testSlotMigration(t *testing.T, c *Cluster, newBackend func(*testing.T, []string, string) backend.Backend) {
	e := newClusterEnv(t)
	ks := testKeys(t)
	ids := idsInOneSlot(t.Name(), 3)
	slot := keys.SlotOf(ids[0])
	from := e.owner[slot]
	to := e.masters[(slices.Index(e.masters, from)+1)%len(e.masters)]

	const procs = 4
	const ttl = 10 * time.Second
	const hold = 3 * time.Millisecond
	opts := &lock.Options{
		WaiterTimeout: 30 * time.Second, // heartbeats every 10 s: never the reason of a hand-off
		BatchTick:     10 * time.Millisecond,
		QueueTimeout:  time.Minute,
	}
	guards := map[string]*guard{}
	for _, id := range ids {
		guards[id] = &guard{}
	}
	var errs, timeouts atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var stopOnce sync.Once
	var wg sync.WaitGroup
	halt := func() {
		stopOnce.Do(func() { close(stop) })
		wg.Wait()
	}
	for p := range procs {
		l, err := lock.New(newBackend(t, c.Addrs(), ks.Prefix()), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := guards[id]
				for {
					select {
					case <-stop:
						return
					default:
					}
					res, err := l.Acquire(ctx, id, ttl, nil)
					if err != nil {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("process %d, %s: %v", p, id, err))
						continue
					}
					if !res.Acquired {
						timeouts.Add(1)
						continue
					}
					g.enter(res.Lease.Fence())
					<-time.After(hold) // the work done under the lock
					g.exit()
					// Release is idempotent: retried until it answers.
					for {
						err := res.Lease.Release(ctx)
						if err == nil || errors.Is(err, lock.ErrNotHeld) {
							break
						}
						errs.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("process %d, release %s: %v", p, id, err))
						<-time.After(5 * time.Millisecond)
					}
				}
			}()
		}
	}
	defer halt()

	total := func() int {
		n := 0
		for _, g := range guards {
			n += g.count()
		}
		return n
	}
	// progress waits until every id was granted n more times, or fails.
	progress := func(what string, n int) {
		t.Helper()
		base := map[string]int{}
		for id, g := range guards {
			base[id] = g.count()
		}
		testkit.Eventually(t, adaptertest.Deadline, what, func() bool {
			for id, g := range guards {
				if g.count() < base[id]+n {
					return false
				}
			}
			return true
		})
	}
	// someProgress waits for one more grant of any id, for at most d (the
	// steps of the slot's ids may stall while the slot is open).
	someProgress := func(d time.Duration) {
		base := total()
		deadline := time.Now().Add(d)
		for total() == base && time.Now().Before(deadline) {
			<-time.After(time.Millisecond)
		}
	}
	// The anchor, a fifth process, holds ids[0] while the slot opens, with
	// the other processes queued behind it, and releases it once the first
	// key has moved.
	anchor, err := lock.New(newBackend(t, c.Addrs(), ks.Prefix()), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = anchor.Close() })
	hold0 := func() (release func(), released <-chan struct{}) {
		t.Helper()
		res, err := anchor.Acquire(ctx, ids[0], ttl, nil)
		if err != nil || !res.Acquired {
			t.Fatalf("anchor: %+v, %v", res, err)
		}
		g := guards[ids[0]]
		g.enter(res.Lease.Fence())
		testkit.Eventually(t, adaptertest.Deadline, "every other process queued behind the anchor", func() bool {
			return e.raw.ZCard(ctx, ks.For(ids[0]).Queue).Val() >= procs-1
		})
		done := make(chan struct{})
		var once sync.Once
		return func() {
			once.Do(func() {
				g.exit()
				go func() { // not in the hook: the release may wait for the move
					defer close(done)
					for {
						err := res.Lease.Release(ctx)
						if err == nil || errors.Is(err, lock.ErrNotHeld) {
							return
						}
						errs.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("anchor release: %v", err))
						<-time.After(5 * time.Millisecond)
					}
				}()
			})
		}, done
	}
	// heldAndQueued checks on the source that ids[0] is held, with the
	// other processes queued.
	heldAndQueued := func(source string) error {
		src := redis.NewClient(&redis.Options{Addr: source})
		defer src.Close()
		k := ks.For(ids[0])
		held, err := src.Exists(ctx, k.Lock).Result()
		if err != nil {
			return fmt.Errorf("on the source %s: %w", source, err)
		}
		queued, err := src.ZCard(ctx, k.Queue).Result()
		if err != nil {
			return fmt.Errorf("on the source %s: %w", source, err)
		}
		if held != 1 || queued < procs-1 {
			return fmt.Errorf("when the slot opened, on the source, %s: lock held %d, %d queued; want held, %d queued", ids[0], held, queued, procs-1)
		}
		return nil
	}

	progress("every id granted before the move", 3)
	for round, move := range [][2]string{{from, to}, {to, from}} {
		for _, g := range guards {
			g.mu.Lock()
			g.measuring = false
			g.mu.Unlock()
		}
		release, released := hold0()
		moved := 0
		start := time.Now()
		err := c.MoveSlot(ctx, slot, move[1], MoveHooks{
			Opened: func() error { return heldAndQueued(move[0]) },
			Moved: func(string) error {
				moved++
				release()
				someProgress(100 * time.Millisecond)
				return nil
			},
		})
		if err != nil {
			t.Fatalf("move %d (%s -> %s): %v", round, move[0], move[1], err)
		}
		select {
		case <-released:
		case <-time.After(10 * time.Second):
			t.Fatalf("move %d: the anchor's release did not end within 10s of the move", round)
		}
		if moved < len(ids) {
			t.Fatalf("move %d moved %d keys, want at least one per id (%d)", round, moved, len(ids))
		}
		t.Logf("move %d: %d keys in %v, %d grants so far, %d errors", round, moved, time.Since(start), total(), errs.Load())
		for _, g := range guards {
			g.mu.Lock()
			g.measuring, g.lastExit = true, time.Time{}
			g.mu.Unlock()
		}
		progress(fmt.Sprintf("every id granted 5 times after move %d", round), 5)
		for id, g := range guards {
			g.mu.Lock()
			gap := g.maxGap
			g.mu.Unlock()
			if gap > 3*time.Second {
				t.Errorf("after move %d, %s waited %v from a release to the next grant: the waiter was not woken", round, id, gap)
			}
		}
	}
	halt()
	for id, g := range guards {
		if g.overlaps > 0 {
			t.Errorf("S1: %s was granted to two holders at once %d times", id, g.overlaps)
		}
		if g.backwards > 0 {
			t.Errorf("S3: %s's fence did not increase %d times", id, g.backwards)
		}
	}
	t.Logf("%d grants, %d errors (retried), %d queue timeouts", total(), errs.Load(), timeouts.Load())
	if v := firstErr.Load(); v != nil {
		t.Logf("first error: %v", v)
	}
	if timeouts.Load() > 0 {
		t.Errorf("%d waits ended at the queue timeout", timeouts.Load())
	}
	for _, id := range ids {
		testkit.Eventually(t, adaptertest.Deadline, "nothing but the counters is left of "+id, func() bool { return len(harness.StateLeft(t, e.raw, ks, id)) == 0 })
	}
}
