package fault

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
)

// resource is a store that checks fencing tokens: it remembers the highest
// fence it has seen (on reads and writes) and rejects any access with a
// lower one. This is the check a protected resource must make.
type resource struct {
	mu       sync.Mutex
	maxFence uint64
	value    int
	accepted int
	rejected int
	reads    int // reads so far, stale ones included
}

// read returns the value if fence is not stale, and raises the fence seen.
// seq numbers the read among all reads.
func (r *resource) read(fence uint64) (v int, ok bool, seq int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	if fence < r.maxFence {
		return 0, false, r.reads
	}
	r.maxFence = fence
	return r.value, true, r.reads
}

// readsSince reports whether another read came after read seq.
func (r *resource) readsSince(seq int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads > seq
}

// write stores v if fence is not stale.
func (r *resource) write(fence uint64, v int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fence < r.maxFence {
		r.rejected++
		return false
	}
	r.maxFence = fence
	r.value = v
	r.accepted++
	return true
}

type workloadResult struct {
	accepted, rejected, value int
	pausedPastTTL             int // holders that wrote after their lease's ValidUntil
	falseRejects              int // writes rejected while their lease was still valid
	grants                    int
}

// runFencedWorkload runs workers that increment the resource's value under
// the lock (read, pause, write). Every third hold pauses like a GC pause:
// until its lease ended (Lost) and another holder has read the resource
// since (or no other worker is left), then writes. So each paused write
// surely comes after a newer holder's read, whatever the machine's speed:
// with working fences it is rejected, with a constant fence it loses an
// update. wrap, if set, wraps each worker's backend.
func runFencedWorkload(t *testing.T, e *env, wrap func(backend.Backend) backend.Backend) workloadResult {
	const workers, rounds = 4, 6
	ttl := 150 * time.Millisecond
	id := "resource"
	res := &resource{}
	var mu sync.Mutex
	var out workloadResult
	var wg sync.WaitGroup
	var running atomic.Int32 // workers not finished
	running.Store(workers)
	for w := range workers {
		b := e.backend(e.srv.Addr, clientOpts{})
		if wrap != nil {
			b = wrap(b)
		}
		l := e.locker(b, lock.Options{WaiterTimeout: 3 * time.Second})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer running.Add(-1)
			for i := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := l.Acquire(ctx, id, ttl, nil)
				cancel()
				if err != nil || !r.Acquired {
					t.Errorf("worker %d: acquire: %v, acquired %v", w, err, r.Acquired)
					return
				}
				le := r.Lease
				v, ok, seq := res.read(le.Fence())
				pause := (w+i)%3 == 0
				if pause {
					// The holder stalls past its lease (Lost), and on until
					// the next holder has read the resource. The others
					// are queued, or paused themselves and waiting for a
					// read after theirs, which this one made: one of them
					// reads next, unless none is left.
					<-le.Lost()
					for deadline := time.Now().Add(10 * time.Second); !res.readsSince(seq) && running.Load() > 1; {
						if time.Now().After(deadline) {
							t.Errorf("worker %d: no other holder read the resource within 10s after this one's lease ended", w)
							return
						}
						time.Sleep(2 * time.Millisecond) // poll interval of a condition with a deadline
					}
				}
				expired := time.Now().After(le.ValidUntil())
				wrote := ok && res.write(le.Fence(), v+1)
				mu.Lock()
				out.grants++
				if expired {
					out.pausedPastTTL++
				}
				if !wrote && !expired {
					out.falseRejects++
				}
				mu.Unlock()
				_ = le.Release(context.Background())
			}
		}()
	}
	wg.Wait()
	res.mu.Lock()
	defer res.mu.Unlock()
	out.accepted, out.rejected, out.value = res.accepted, res.rejected, res.value
	return out
}

// TestFencedResourceRejectsStaleWrites: holders paused longer than their
// TTL write late; the resource, checking fences, rejects every stale write
// and no update is lost: the value equals the number of accepted writes
// (S3, and S2: a write made while ValidUntil said the lease was valid is
// never rejected).
func TestFencedResourceRejectsStaleWrites(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *env) {
		r := runFencedWorkload(t, e, nil)
		t.Logf("%+v", r)
		if r.value != r.accepted {
			t.Errorf("S3: lost update: value %d after %d accepted increments", r.value, r.accepted)
		}
		if r.pausedPastTTL == 0 || r.rejected == 0 {
			t.Errorf("the workload paused no holder past its TTL (paused %d, rejected %d): it proves nothing", r.pausedPastTTL, r.rejected)
		}
		if r.falseRejects > 0 {
			t.Errorf("S2: %d writes rejected while their lease's ValidUntil was still ahead", r.falseRejects)
		}
	})
	t.Run("checker-catches-repeated-fences", func(t *testing.T) {
		// With fences that do not increase (a broken backend), the same
		// workload loses updates: the check above can fail.
		e := newEnv(t, adapters[0])
		r := runFencedWorkload(t, e, func(b backend.Backend) backend.Backend { return constFence{b} })
		if r.value == r.accepted {
			t.Errorf("with a constant fence no update was lost (%+v): the workload cannot detect broken fencing", r)
		}
	})
}

// constFence is a broken backend: every grant has fence 1.
type constFence struct{ backend.Backend }

func (c constFence) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	g, err := c.Backend.Acquire(ctx, req)
	if g.Acquired {
		g.Fence = 1
	}
	return g, err
}
