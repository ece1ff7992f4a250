package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"

	"github.com/redislocker/lock"
)

// Shared ids (issue 26): a semaphore of N permits and a reader-writer
// lock, ours (AcquireOptions.Capacity and Permits) against the closest
// peer pattern, bsm/redislock with one key per permit slot.

// sharedProc is a process of a library that can hold an id shared: a
// semaphore of capacity permits, of which one acquisition takes permits
// (permits == capacity: exclusive, a writer).
type sharedProc interface {
	LockShared(ctx context.Context, id string, ttl time.Duration, capacity, permits int) (unlock func(context.Context) error, err error)
}

// sharedCase is one shared scenario.
type sharedCase struct {
	name     string // scenario name, for -only and the report
	capacity int
	// writeEvery: a worker's k-th acquisition takes all the permits (a
	// writer) when (k + worker index) % writeEvery == 0, so every worker
	// writes once in writeEvery acquisitions, the workers out of step;
	// 0: no writer (a plain semaphore).
	writeEvery int
	hold       time.Duration
}

// sharedCases returns the shared scenarios: a semaphore of 4 permits and
// a read-heavy reader-writer lock (8 reader permits, 1 acquisition in 10
// a writer).
func sharedCases() []sharedCase {
	return []sharedCase{
		{name: "semaphore-n4", capacity: 4, hold: time.Millisecond},
		{name: "rw-read-heavy", capacity: 8, writeEvery: 10, hold: time.Millisecond},
	}
}

// peerShared is the peer every shared figure is compared with.
const peerShared = "redislock/tuned"

// Shared is one shared scenario for one library: Workers processes (one
// worker each) on one id, each acquiring (1 permit, or all of them for a
// write), holding for Hold and releasing, in a loop; in rounds like
// Contended.
type Shared struct {
	Scenario     string
	Lib          string
	Capacity     int
	WriteEvery   int // 0: no writer
	HoldMs       float64
	Workers      int
	Rounds       int
	Acquisitions int
	Reads        int // acquisitions of 1 permit
	Writes       int // acquisitions of every permit
	Seconds      float64
	PerSec       float64   // median of the rounds' rates
	ReadsPerSec  float64   // median of the rounds' rates
	WritesPerSec float64   // median of the rounds' rates
	RoundPerSec  []float64 // each round's rate
	MeanHoldUs   float64   // measured hold (time.Sleep overshoots)
	// XFloor (no writer only): median of the rounds' rate / (Capacity /
	// (the round's mean hold + 2 RTT of the round)).
	XFloor float64 `json:",omitempty"`
	// Waits, from the call to the grant, over every acquisition of every
	// round plus the waits still going on when a window closed.
	WaitP50Ms, WaitP99Ms, WaitMaxMs                float64
	ReadWaitP50Ms, ReadWaitP99Ms, ReadWaitMaxMs    float64
	WriteWaitP50Ms, WriteWaitP99Ms, WriteWaitMaxMs float64
	// Fairness: median of the rounds' min/max acquisitions per worker;
	// per class, of that class's acquisitions per worker.
	Fairness      float64
	MinPerWorker  int // of the median round
	MaxPerWorker  int
	ReadFairness  float64
	WriteFairness float64 `json:",omitempty"`
	// Violations counts the grants that took the permits held at once (by
	// the tool's count of its own holders) over Capacity; it must be 0.
	Violations int
	// PeakPermits is the most permits held at once, by the same count.
	PeakPermits int
	GaveUps     int
	ClientCmds  float64 // per acquisition
	ServerCmds  float64 // per acquisition, incl. commands called by scripts
	ServerCPUUs float64 // per acquisition
	Cost        cost
	Err         string `json:",omitempty"`
}

// Classes of a shared acquisition.
const (
	classRead  = 0
	classWrite = 1
)

// sharedWorker is one worker's figures in a shared round.
type sharedWorker struct {
	waiting  atomic.Int64 // ns since base when the current wait began; 0 while holding
	wclass   atomic.Int32 // the class of the current wait
	acq      [2]int
	waits    [2][]int64
	holdNs   int64
	gaveUps  int
	err      error
	attempts int // acquisitions begun, which decide the class of the next
}

// shRound is one shared round of one library, as sharedRound measured it.
type shRound struct {
	secs       float64
	perWorker  [2][]int // per class
	waits      [2][]int64
	censored   [2][]int64
	holdNs     int64
	gaveUps    int
	violations int
	peak       int
	c          cost
	rtt        float64
}

// acq returns the round's acquisitions of class.
func (rd shRound) acq(class int) int {
	n := 0
	for _, k := range rd.perWorker[class] {
		n += k
	}
	return n
}

// total returns the acquisitions of both classes per worker.
func (rd shRound) total() []int {
	out := make([]int, len(rd.perWorker[classRead]))
	for i := range out {
		out[i] = rd.perWorker[classRead][i] + rd.perWorker[classWrite][i]
	}
	return out
}

// holders counts the permits held at once by the workers of one round, as
// they see them: a worker adds its permits once its acquire returns and
// takes them back before it calls release, so the count never runs ahead
// of what the lock granted, and a count over the capacity is a grant the
// lock should not have made.
type holders struct {
	capacity   int64
	inUse      atomic.Int64
	peak       atomic.Int64
	violations atomic.Int64
}

func (h *holders) take(permits int) {
	v := h.inUse.Add(int64(permits))
	if v > h.capacity {
		h.violations.Add(1)
	}
	for {
		p := h.peak.Load()
		if v <= p || h.peak.CompareAndSwap(p, v) {
			return
		}
	}
}

func (h *holders) give(permits int) { h.inUse.Add(-int64(permits)) }

// sharedRound runs one round of sc for l: Workers processes of one worker
// each.
func (r *runner) sharedRound(l lib, sc sharedCase) (shRound, error) {
	G := r.cfg.Workers
	var out shRound
	e := r.newEnv()
	ps := make([]sharedProc, 0, G)
	defer func() {
		for _, p := range ps {
			p.(proc).Close()
		}
	}()
	id := fmt.Sprintf("%ss:%s:%s", r.prefix, sc.name, slug(l.Name))
	wctx, wcancel := bg(time.Minute)
	defer wcancel()
	for range G {
		p, err := l.New(e)
		if err != nil {
			return out, err
		}
		sp, ok := p.(sharedProc)
		if !ok {
			p.Close()
			return out, fmt.Errorf("%s cannot hold an id shared", l.Name)
		}
		ps = append(ps, sp)
		unlock, err := sp.LockShared(wctx, id, r.cfg.TTL, sc.capacity, 1) // connect, load scripts
		if err != nil {
			return out, err
		}
		if err := unlock(wctx); err != nil {
			return out, err
		}
	}

	rd := r.newRound()
	defer rd.cancel()
	h := &holders{capacity: int64(sc.capacity)}
	stats := make([]sharedWorker, G)
	for i := range G {
		rd.wg.Go(func() {
			st := &stats[i]
			for !rd.stop.Load() {
				class, permits := classRead, 1
				if sc.writeEvery > 0 && (st.attempts+i)%sc.writeEvery == 0 {
					class, permits = classWrite, sc.capacity
				}
				st.attempts++
				t0 := time.Now()
				st.wclass.Store(int32(class))
				st.waiting.Store(int64(t0.Sub(rd.base)))
				unlock := rd.lock(func() (func(context.Context) error, error) {
					return ps[i].LockShared(rd.ctx, id, r.cfg.TTL, sc.capacity, permits)
				}, &st.gaveUps, &st.err)
				if unlock == nil {
					return
				}
				h.take(permits)
				granted := time.Now()
				st.waiting.Store(0)
				m := rd.measuring.Load()
				if m {
					st.acq[class]++
					st.waits[class] = append(st.waits[class], int64(granted.Sub(t0)))
				}
				if sc.hold > 0 {
					time.Sleep(sc.hold)
				}
				if m {
					st.holdNs += int64(time.Since(granted))
				}
				h.give(permits)
				if !rd.unlock(unlock, &st.err) {
					return
				}
			}
		})
	}
	a, b, err := r.window(rd, e, func(closed int64) {
		for i := range stats {
			if since := stats[i].waiting.Load(); since != 0 {
				c := stats[i].wclass.Load()
				out.censored[c] = append(out.censored[c], closed-since)
			}
		}
	})
	if err != nil {
		return out, err
	}
	for i := range stats {
		st := &stats[i]
		if st.err != nil {
			return out, st.err
		}
		for c := range 2 {
			out.perWorker[c] = append(out.perWorker[c], st.acq[c])
			out.waits[c] = append(out.waits[c], st.waits[c]...)
		}
		out.holdNs += st.holdNs
		out.gaveUps += st.gaveUps
	}
	out.violations, out.peak = int(h.violations.Load()), int(h.peak.Load())
	if out.acq(classRead)+out.acq(classWrite) == 0 {
		return out, fmt.Errorf("no acquisition in the %v window", r.cfg.ContDur)
	}
	out.secs = b.t.Sub(a.t).Seconds()
	out.c = between(a, b)
	return out, nil
}

// fairness returns min/max of per, and the min and max; 0 when max is 0.
func fairness(per []int) (f float64, lo, hi int) {
	if len(per) == 0 {
		return 0, 0, 0
	}
	lo, hi = slices.Min(per), slices.Max(per)
	if hi == 0 {
		return 0, lo, hi
	}
	return float64(lo) / float64(hi), lo, hi
}

// aggregateShared makes the Shared row of sc for the library name from
// its rounds: rates, fairness and XFloor are medians of the rounds, waits
// over every acquisition of every round.
func aggregateShared(sc sharedCase, name string, workers int, rounds []shRound) Shared {
	out := Shared{Scenario: sc.name, Lib: name, Capacity: sc.capacity, WriteEvery: sc.writeEvery,
		HoldMs: float64(sc.hold) / 1e6, Workers: workers, Rounds: len(rounds)}
	var waits, classWaits [2][]int64
	var holdNs int64
	var ratios, fair, rfair, wfair, rrates, wrates []float64
	type fw struct {
		f        float64
		min, max int
	}
	var fws []fw
	for _, rd := range rounds {
		nr, nw := rd.acq(classRead), rd.acq(classWrite)
		n := nr + nw
		out.Reads += nr
		out.Writes += nw
		out.Acquisitions += n
		out.Seconds += rd.secs
		rate := float64(n) / rd.secs
		out.RoundPerSec = append(out.RoundPerSec, rate)
		rrates, wrates = append(rrates, float64(nr)/rd.secs), append(wrates, float64(nw)/rd.secs)
		if rd.rtt > 0 && sc.writeEvery == 0 && n > 0 {
			ratios = append(ratios, rate/(float64(sc.capacity)*1e6/(float64(rd.holdNs)/float64(n)/1e3+2*rd.rtt)))
		}
		f, lo, hi := fairness(rd.total())
		fws = append(fws, fw{f, lo, hi})
		fair = append(fair, f)
		f, _, _ = fairness(rd.perWorker[classRead])
		rfair = append(rfair, f)
		if sc.writeEvery > 0 {
			f, _, _ = fairness(rd.perWorker[classWrite])
			wfair = append(wfair, f)
		}
		for c := range 2 {
			classWaits[c] = append(classWaits[c], rd.waits[c]...)
			classWaits[c] = append(classWaits[c], rd.censored[c]...)
			waits[0] = append(waits[0], rd.waits[c]...)
			waits[0] = append(waits[0], rd.censored[c]...)
		}
		holdNs += rd.holdNs
		out.GaveUps += rd.gaveUps
		out.Violations += rd.violations
		out.PeakPermits = max(out.PeakPermits, rd.peak)
		out.Cost.add(rd.c)
	}
	n := out.Acquisitions
	if n == 0 {
		return out
	}
	out.PerSec, out.ReadsPerSec, out.WritesPerSec = median(out.RoundPerSec), median(rrates), median(wrates)
	out.XFloor = median(ratios)
	out.MeanHoldUs = float64(holdNs) / float64(n) / 1e3
	all, rw, ww := waits[0], classWaits[classRead], classWaits[classWrite]
	out.WaitP50Ms, out.WaitP99Ms, out.WaitMaxMs = pct(all, 0.5)/1e6, pct(all, 0.99)/1e6, maxMs(all)
	out.ReadWaitP50Ms, out.ReadWaitP99Ms, out.ReadWaitMaxMs = pct(rw, 0.5)/1e6, pct(rw, 0.99)/1e6, maxMs(rw)
	out.WriteWaitP50Ms, out.WriteWaitP99Ms, out.WriteWaitMaxMs = pct(ww, 0.5)/1e6, pct(ww, 0.99)/1e6, maxMs(ww)
	out.Fairness, out.ReadFairness, out.WriteFairness = median(fair), median(rfair), median(wfair)
	slices.SortFunc(fws, func(a, b fw) int { return cmp.Compare(a.f, b.f) })
	mid := fws[(len(fws)-1)/2]
	out.MinPerWorker, out.MaxPerWorker = mid.min, mid.max
	out.ClientCmds, out.ServerCmds, out.ServerCPUUs = out.Cost.ClientCmds/float64(n), out.Cost.ServerCmds/float64(n), out.Cost.ServerCPU/float64(n)
	return out
}

// maxMs returns the longest of ns in milliseconds, or 0.
func maxMs(ns []int64) float64 {
	if len(ns) == 0 {
		return 0
	}
	return float64(slices.Max(ns)) / 1e6
}

// ---- ours ----

// LockShared acquires permits of the semaphore id of capacity permits.
func (p *oursProc) LockShared(ctx context.Context, id string, ttl time.Duration, capacity, permits int) (func(context.Context) error, error) {
	r, err := p.l.Acquire(ctx, id, ttl, &lock.AcquireOptions{Capacity: capacity, Permits: permits})
	if err != nil {
		return nil, err
	}
	if !r.Acquired {
		return nil, errGaveUp
	}
	return r.Lease.Release, nil
}

// ---- the peer pattern: bsm/redislock, one key per permit slot ----

// LockShared takes permits of capacity with redislock and one key per
// permit, "<id>:<slot>" for slot 0 to capacity-1:
//
//   - one permit (a reader, or a holder of a semaphore): a pass tries
//     each slot once with NoRetry, starting one slot further at each
//     call of this process (so that the processes do not all begin on
//     slot 0); after a pass that found no free slot it waits the
//     process's RetryStrategy's next backoff (LinearBackoff(1ms) for
//     redislock/tuned) and passes again;
//   - every permit (a writer): it obtains the slots in order, 0 first,
//     each with the library's own retry (Obtain with the process's
//     RetryStrategy), keeping the ones it has; on an error it releases
//     those. Two writers cannot deadlock (the same order), but nothing
//     keeps readers from taking a slot a writer waits for: the pattern
//     has no fairness, and readers can starve a writer.
func (p *bsmProc) LockShared(ctx context.Context, id string, ttl time.Duration, capacity, permits int) (func(context.Context) error, error) {
	slot := func(k int) string { return id + ":" + strconv.Itoa(k) }
	retry := redislock.LinearBackoff(p.retry)
	if permits >= capacity {
		held := make([]*redislock.Lock, 0, capacity)
		releaseAll := func(ctx context.Context) error {
			var errs []error
			for _, l := range held {
				errs = append(errs, l.Release(ctx))
			}
			return errors.Join(errs...)
		}
		for k := range capacity {
			l, err := p.l.Obtain(ctx, slot(k), ttl, &redislock.Options{RetryStrategy: retry})
			if err != nil {
				rctx, cancel := bg(5 * time.Second)
				_ = releaseAll(rctx)
				cancel()
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
					return nil, errGaveUp
				}
				return nil, err
			}
			held = append(held, l)
		}
		return releaseAll, nil
	}
	if permits != 1 {
		return nil, fmt.Errorf("the slot pattern takes 1 permit or all %d, not %d", capacity, permits)
	}
	start := int(p.next.Add(1))
	var timer *time.Timer
	for {
		for j := range capacity {
			l, err := p.l.Obtain(ctx, slot((start+j)%capacity), ttl, &redislock.Options{RetryStrategy: redislock.NoRetry()})
			if err == nil {
				return l.Release, nil
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if !errors.Is(err, redislock.ErrNotObtained) {
				return nil, err
			}
		}
		d := retry.NextBackoff()
		if d < 1 {
			return nil, errGaveUp
		}
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
}
