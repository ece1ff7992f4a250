package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/memorybackend"
)

// config holds a run's sizes: the full run and the quick (CI smoke) run.
type config struct {
	Quick       bool
	FloorDur    time.Duration // PING loop at the start and at the end
	RoundPing   time.Duration // PING loop before each round
	UncRounds   int           // uncontended: rounds over the libraries
	UncDur      time.Duration // uncontended window per library and round
	ContRounds  int           // contended: rounds over the libraries
	Warm        time.Duration // contended: run before the window opens
	ContDur     time.Duration // contended window per library and round
	Workers     int           // contended: workers on one id, each its own process
	Holds       []time.Duration
	IdleWaiters int
	IdleSettle  time.Duration // idle: time for waiters to queue before the window
	IdleWindow  time.Duration
	IdleShared  bool // idle: also run all waiters in one process
	ContShared  bool // contended, hold 1 ms: also run all workers in one process
	ManyN       int  // AcquireMany: free ids
	ManyRounds  int
	BytesN      int // bytes left: distinct ids locked once each
	TTL         time.Duration
}

func fullConfig() config {
	return config{
		FloorDur: 2 * time.Second, RoundPing: 300 * time.Millisecond,
		UncRounds: 5, UncDur: 600 * time.Millisecond,
		ContRounds: 3, Warm: 300 * time.Millisecond, ContDur: 1500 * time.Millisecond, Workers: 8,
		Holds:       []time.Duration{0, time.Millisecond},
		IdleWaiters: 8, IdleSettle: time.Second, IdleWindow: 10 * time.Second, IdleShared: true, ContShared: true,
		ManyN: 10000, ManyRounds: 3, BytesN: 10000, TTL: 10 * time.Second,
	}
}

func quickConfig() config {
	return config{
		Quick:    true,
		FloorDur: 200 * time.Millisecond, RoundPing: 50 * time.Millisecond,
		UncRounds: 1, UncDur: 200 * time.Millisecond,
		ContRounds: 1, Warm: 100 * time.Millisecond, ContDur: 300 * time.Millisecond, Workers: 8,
		Holds:       []time.Duration{0, time.Millisecond},
		IdleWaiters: 8, IdleSettle: 200 * time.Millisecond, IdleWindow: 300 * time.Millisecond,
		ManyN: 500, ManyRounds: 1, BytesN: 200, TTL: 10 * time.Second,
	}
}

// runner runs the scenarios against one Redis.
type runner struct {
	cfg    config
	addr   string
	prefix string
	admin  *redis.Client // INFO snapshots and cleanup; never counted
}

func (r *runner) newEnv() *env {
	mem, _ := memorybackend.NewStore(nil) // nil options never fail
	return &env{addr: r.addr, prefix: r.prefix, cmds: new(atomic.Int64), mem: mem}
}

// snapshot is the state at one end of a measured window.
type snapshot struct {
	t       time.Time
	hooks   int64
	srv     serverStats
	mallocs uint64
	bytes   uint64
	cpuUs   float64 // this process (clients and libraries)
}

func (r *runner) snap(ctx context.Context, e *env, mem bool) (snapshot, error) {
	var s snapshot
	if mem {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s.mallocs, s.bytes = ms.Mallocs, ms.TotalAlloc
	}
	if r.admin != nil {
		var err error
		if s.srv, err = readServerStats(ctx, r.admin); err != nil {
			return s, err
		}
	}
	s.hooks = e.cmds.Load()
	s.cpuUs = processCPU()
	s.t = time.Now()
	return s, nil
}

func between(a, b snapshot) cost {
	if a.srv.calls == nil {
		return cost{ClientCmds: float64(b.hooks - a.hooks)}
	}
	return costBetween(b.hooks-a.hooks, a.srv, b.srv)
}

func slug(name string) string { return strings.NewReplacer("/", "-", " ", "-").Replace(name) }

func bg(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// ---- floor ----

// Floor is the Redis round trip of this run.
type Floor struct {
	PingUs        float64   // the run's RTT: median of every PING measurement (start, each round, end)
	PingsUs       []float64 // every measurement (mean go-redis PING round trip), in order
	PingStartUs   float64
	PingEndUs     float64
	PingP50Us     float64 // start
	RueidisPingUs float64 // mean rueidis PING round trip, for reference
	CycleFloor    float64 // 1/(2 RTT): acquire+release cycles/s at two round trips
}

// ping measures sequential PINGs for d: mean and median, in µs.
func ping(ctx context.Context, d time.Duration, do func(context.Context) error) (mean, p50 float64, err error) {
	for range 200 {
		if err := do(ctx); err != nil {
			return 0, 0, err
		}
	}
	var samples []int64
	start := time.Now()
	for time.Since(start) < d {
		t := time.Now()
		if err := do(ctx); err != nil {
			return 0, 0, err
		}
		samples = append(samples, int64(time.Since(t)))
	}
	total := time.Since(start)
	return float64(total.Microseconds()) / float64(len(samples)), pct(samples, 0.5) / 1e3, nil
}

func (r *runner) pingGoRedis(ctx context.Context, d time.Duration) (mean, p50 float64, err error) {
	c := redis.NewClient(&redis.Options{Addr: r.addr})
	defer c.Close()
	return ping(ctx, d, func(ctx context.Context) error { return c.Ping(ctx).Err() })
}

func (r *runner) pingRueidis(ctx context.Context) (float64, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.addr}})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	mean, _, err := ping(ctx, r.cfg.FloorDur/2, func(ctx context.Context) error { return c.Do(ctx, c.B().Ping().Build()).Error() })
	return mean, err
}

// ---- uncontended ----

// Uncontended: one process, one worker, Acquire + Release of one id, in
// rounds interleaved with the other libraries (the machine's load changes;
// each round has its own PING).
type Uncontended struct {
	Lib         string
	Rounds      int
	Cycles      int
	Seconds     float64
	PerSec      float64   // median of the rounds' rates
	XFloor      float64   `json:",omitempty"` // median of the rounds' rate / (1/(2 RTT of the round))
	RoundPerSec []float64 // each round's rate
	ClientCmds  float64   // per cycle (all rounds)
	ServerCmds  float64   // per cycle, incl. commands called by scripts
	ServerCPUUs float64   // per cycle
	ClientCPUUs float64   // per cycle: this process's CPU (client and lock library)
	AllocsPerOp float64
	BytesPerOp  float64
	Cost        cost
	Err         string `json:",omitempty"`
}

type uncRound struct {
	n       int
	secs    float64
	c       cost
	cpuUs   float64
	mallocs uint64
	bytes   uint64
	rtt     float64
}

func (r *runner) uncontendedRound(l lib) (uncRound, error) {
	var out uncRound
	e := r.newEnv()
	p, err := l.New(e)
	if err != nil {
		return out, err
	}
	defer p.Close()
	ctx, cancel := bg(r.cfg.UncDur + time.Minute)
	defer cancel()
	id := r.prefix + "u:" + slug(l.Name)
	cycle := func() error {
		unlock, err := p.Lock(ctx, id, r.cfg.TTL)
		if err != nil {
			return err
		}
		return unlock(ctx)
	}
	for range 50 { // connections, scripts
		if err := cycle(); err != nil {
			return out, err
		}
	}
	runtime.GC()
	a, err := r.snap(ctx, e, true)
	if err != nil {
		return out, err
	}
	start := time.Now()
	for time.Since(start) < r.cfg.UncDur {
		if err := cycle(); err != nil {
			return out, err
		}
		out.n++
	}
	out.secs = time.Since(start).Seconds()
	b, err := r.snap(ctx, e, true)
	if err != nil {
		return out, err
	}
	out.c = between(a, b)
	out.cpuUs = b.cpuUs - a.cpuUs
	out.mallocs, out.bytes = b.mallocs-a.mallocs, b.bytes-a.bytes
	return out, nil
}

func aggregateUnc(name string, rounds []uncRound) Uncontended {
	out := Uncontended{Lib: name, Rounds: len(rounds)}
	var cpu float64
	var mallocs, bytes uint64
	var ratios []float64
	for _, rd := range rounds {
		out.Cycles += rd.n
		out.Seconds += rd.secs
		rate := float64(rd.n) / rd.secs
		out.RoundPerSec = append(out.RoundPerSec, rate)
		if rd.rtt > 0 {
			ratios = append(ratios, rate/(1e6/(2*rd.rtt)))
		}
		out.Cost.add(rd.c)
		cpu += rd.cpuUs
		mallocs += rd.mallocs
		bytes += rd.bytes
	}
	if out.Cycles == 0 {
		return out
	}
	n := float64(out.Cycles)
	out.PerSec = median(out.RoundPerSec)
	out.XFloor = median(ratios)
	out.ClientCmds, out.ServerCmds, out.ServerCPUUs = out.Cost.ClientCmds/n, out.Cost.ServerCmds/n, out.Cost.ServerCPU/n
	out.ClientCPUUs = cpu / n
	out.AllocsPerOp, out.BytesPerOp = float64(mallocs)/n, float64(bytes)/n
	return out
}

// ---- contended ----

// Contended: Workers processes (one worker each) on one id, each holding it
// for Hold, in a loop; in rounds like Uncontended.
type Contended struct {
	Lib          string
	HoldMs       float64
	Workers      int
	Procs        int // processes the workers run in: Workers (one each) or 1
	Rounds       int
	Acquisitions int
	Seconds      float64
	PerSec       float64   // median of the rounds' rates
	RoundPerSec  []float64 // each round's rate
	MeanHoldUs   float64   // measured hold (time.Sleep overshoots)
	Floor        float64   // 1/(mean hold + 2 RTT), with the run's RTT
	XFloor       float64   // median of the rounds' rate / (1/(the round's mean hold + 2 RTT of the round))
	WaitP50Ms    float64   // over every acquisition of every round, and the waits still going on at each window's end
	WaitP99Ms    float64
	WaitMaxMs    float64
	HandoffP50Us float64 // release call begins -> next holder's Lock returns
	HandoffP99Us float64
	Fairness     float64 // median of the rounds' min/max acquisitions per worker
	MinPerWorker int     // of the median round
	MaxPerWorker int
	GaveUps      int     // times a library stopped waiting on its own (the worker called again)
	ClientCmds   float64 // per acquisition
	ServerCmds   float64 // per acquisition, incl. commands called by scripts
	ServerCPUUs  float64 // per acquisition
	Cost         cost
	Err          string `json:",omitempty"`
}

type workerStat struct {
	waiting  atomic.Int64 // ns since base when the current wait began; 0 while holding
	acq      int
	holdNs   int64
	waits    []int64
	handoffs []int64
	gaveUps  int
	err      error
}

type contRound struct {
	censored  []int64 // waits still going on when the window closed
	secs      float64
	perWorker []int
	holdNs    int64
	waits     []int64
	handoffs  []int64
	gaveUps   int
	c         cost
	rtt       float64
}

func (rd contRound) acq() int {
	n := 0
	for _, k := range rd.perWorker {
		n += k
	}
	return n
}

// contendedRound runs the Workers in procs processes (worker i in process
// i mod procs): Workers processes of one worker each, or all in one.
func (r *runner) contendedRound(l lib, hold time.Duration, procs int) (contRound, error) {
	G := r.cfg.Workers
	var out contRound
	e := r.newEnv()
	ps := make([]proc, 0, procs)
	defer func() {
		for _, p := range ps {
			p.Close()
		}
	}()
	id := fmt.Sprintf("%sc:%s:%d:%d", r.prefix, slug(l.Name), hold.Microseconds(), procs)
	wctx, wcancel := bg(time.Minute)
	defer wcancel()
	for range procs {
		p, err := l.New(e)
		if err != nil {
			return out, err
		}
		ps = append(ps, p)
		unlock, err := p.Lock(wctx, id, r.cfg.TTL) // connect, load scripts
		if err != nil {
			return out, err
		}
		if err := unlock(wctx); err != nil {
			return out, err
		}
	}

	rd := r.newRound()
	defer rd.cancel()
	base := rd.base
	var relStamp atomic.Int64 // ns since base when the last release began; 0 = consumed
	stats := make([]workerStat, G)
	for i := range G {
		rd.wg.Go(func() {
			st := &stats[i]
			lock := func() (func(context.Context) error, error) { return ps[i%procs].Lock(rd.ctx, id, r.cfg.TTL) }
			for !rd.stop.Load() {
				t0 := time.Now()
				st.waiting.Store(int64(t0.Sub(base)))
				unlock := rd.lock(lock, &st.gaveUps, &st.err)
				if unlock == nil {
					return
				}
				granted := time.Now()
				st.waiting.Store(0)
				m := rd.measuring.Load()
				if rs := relStamp.Swap(0); rs != 0 && m {
					st.handoffs = append(st.handoffs, int64(granted.Sub(base))-rs)
				}
				if m {
					st.acq++
					st.waits = append(st.waits, int64(granted.Sub(t0)))
				}
				if hold > 0 {
					time.Sleep(hold)
				}
				if m {
					st.holdNs += int64(time.Since(granted))
				}
				relStamp.Store(int64(time.Since(base)))
				if !rd.unlock(unlock, &st.err) {
					return
				}
			}
		})
	}
	a, b, err := r.window(rd, e, func(closed int64) {
		for i := range stats {
			if since := stats[i].waiting.Load(); since != 0 {
				out.censored = append(out.censored, closed-since)
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
		out.perWorker = append(out.perWorker, st.acq)
		out.waits = append(out.waits, st.waits...)
		out.handoffs = append(out.handoffs, st.handoffs...)
		out.holdNs += st.holdNs
		out.gaveUps += st.gaveUps
	}
	if out.acq() == 0 {
		return out, fmt.Errorf("no acquisition in the %v window", r.cfg.ContDur)
	}
	out.secs = b.t.Sub(a.t).Seconds()
	out.c = between(a, b)
	return out, nil
}

func aggregateCont(name string, hold time.Duration, workers, procs int, rtt float64, rounds []contRound) Contended {
	out := Contended{Lib: name, HoldMs: float64(hold) / 1e6, Workers: workers, Procs: procs, Rounds: len(rounds)}
	var waits, handoffs []int64
	var holdNs int64
	var ratios, fair []float64
	type fw struct {
		f        float64
		min, max int
	}
	var fws []fw
	for _, rd := range rounds {
		n := rd.acq()
		out.Acquisitions += n
		out.Seconds += rd.secs
		rate := float64(n) / rd.secs
		out.RoundPerSec = append(out.RoundPerSec, rate)
		if rd.rtt > 0 {
			ratios = append(ratios, rate/(1e6/(float64(rd.holdNs)/float64(n)/1e3+2*rd.rtt)))
		}
		lo, hi := slices.Min(rd.perWorker), slices.Max(rd.perWorker)
		fws = append(fws, fw{float64(lo) / float64(hi), lo, hi})
		fair = append(fair, float64(lo)/float64(hi))
		waits = append(waits, rd.waits...)
		waits = append(waits, rd.censored...)
		handoffs = append(handoffs, rd.handoffs...)
		holdNs += rd.holdNs
		out.GaveUps += rd.gaveUps
		out.Cost.add(rd.c)
	}
	n := out.Acquisitions
	if n == 0 {
		return out
	}
	out.PerSec = median(out.RoundPerSec)
	out.XFloor = median(ratios)
	out.MeanHoldUs = float64(holdNs) / float64(n) / 1e3
	out.Floor = 1e6 / (out.MeanHoldUs + 2*rtt)
	out.WaitP50Ms, out.WaitP99Ms = pct(waits, 0.5)/1e6, pct(waits, 0.99)/1e6
	out.WaitMaxMs = float64(slices.Max(waits)) / 1e6
	if len(handoffs) > 0 {
		out.HandoffP50Us, out.HandoffP99Us = pct(handoffs, 0.5)/1e3, pct(handoffs, 0.99)/1e3
	}
	out.Fairness = median(fair)
	slices.SortFunc(fws, func(a, b fw) int { return cmp.Compare(a.f, b.f) })
	mid := fws[(len(fws)-1)/2]
	out.MinPerWorker, out.MaxPerWorker = mid.min, mid.max
	out.ClientCmds, out.ServerCmds, out.ServerCPUUs = out.Cost.ClientCmds/float64(n), out.Cost.ServerCmds/float64(n), out.Cost.ServerCPU/float64(n)
	return out
}

// median returns the median of vs, or 0.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// ---- idle waiters ----

// Idle: one process holds an id; Waiters wait for it, in Procs processes;
// commands are counted over a window while nothing changes.
type Idle struct {
	Lib              string
	Waiters          int
	Procs            int
	Seconds          float64
	ClientCmdsPerSec float64 // per waiter: every client command in the window (the holder's too) / waiters
	ServerCmdsPerSec float64 // per waiter, incl. commands called by scripts
	ServerCPUUsPerS  float64 // per waiter: server CPU µs per second
	Cost             cost
	Err              string `json:",omitempty"`
}

// serverBaseline measures the server's own CPU per second while no client
// sends anything (its cron jobs): the floor under the idle scenario's CPU.
func (r *runner) serverBaseline(d time.Duration) (float64, error) {
	ctx, cancel := bg(d + time.Minute)
	defer cancel()
	a, err := readServerStats(ctx, r.admin)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(d)
	b, err := readServerStats(ctx, r.admin)
	if err != nil {
		return 0, err
	}
	return (b.cpuUs - a.cpuUs) / time.Since(start).Seconds(), nil
}

func (r *runner) idle(l lib, procs int) (Idle, error) {
	W := r.cfg.IdleWaiters
	out := Idle{Lib: l.Name, Waiters: W, Procs: procs}
	e := r.newEnv()
	ttl := r.cfg.IdleSettle + r.cfg.IdleWindow + time.Minute
	id := fmt.Sprintf("%si:%s:%d", r.prefix, slug(l.Name), procs)
	ctx, cancel := bg(ttl)
	defer cancel()
	holder, err := l.New(e)
	if err != nil {
		return out, err
	}
	defer holder.Close()
	unlock, err := holder.Lock(ctx, id, ttl)
	if err != nil {
		return out, err
	}
	ps := make([]proc, 0, procs)
	defer func() {
		for _, p := range ps {
			p.Close()
		}
	}()
	for range procs {
		p, err := l.New(e)
		if err != nil {
			return out, err
		}
		ps = append(ps, p)
	}
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var granted atomic.Int32
	errs := make([]error, W)
	for i := range W {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				u, err := ps[i%procs].Lock(wctx, id, ttl)
				switch {
				case err == nil:
					granted.Add(1)
					_ = u(context.Background())
					return
				case wctx.Err() != nil:
					return
				case errors.Is(err, errGaveUp):
					continue
				default:
					errs[i] = err
					return
				}
			}
		}()
	}
	stopWaiters := func() {
		wcancel()
		wg.Wait()
	}
	time.Sleep(r.cfg.IdleSettle)
	a, err := r.snap(ctx, e, false)
	if err != nil {
		stopWaiters()
		return out, err
	}
	time.Sleep(r.cfg.IdleWindow)
	b, err := r.snap(ctx, e, false)
	stopWaiters()
	uctx, ucancel := bg(5 * time.Second)
	uerr := unlock(uctx)
	ucancel()
	if err != nil {
		return out, err
	}
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	if g := granted.Load(); g > 0 {
		return out, fmt.Errorf("%d waiters were granted a held lock", g)
	}
	if uerr != nil {
		return out, fmt.Errorf("holder's release: %w", uerr)
	}
	c := between(a, b)
	out.Seconds = b.t.Sub(a.t).Seconds()
	per := out.Seconds * float64(W)
	out.ClientCmdsPerSec, out.ServerCmdsPerSec, out.ServerCPUUsPerS = c.ClientCmds/per, c.ServerCmds/per, c.ServerCPU/per
	out.Cost = c
	return out, nil
}

// ---- AcquireMany ----

// Many: AcquireMany of N free ids against a loop of Acquire over N other
// free ids (ours only), one process, in rounds (medians reported).
type Many struct {
	Lib             string
	N               int
	Rounds          int
	ManySeconds     float64 // median
	LoopSeconds     float64 // median
	Ratio           float64 // median of the rounds' loop time / AcquireMany time
	Snapshots       int     // of the last round
	ManyClientCmds  float64 // per id
	LoopClientCmds  float64 // per id
	ManyServerCPUUs float64 // per id
	LoopServerCPUUs float64 // per id
	Err             string  `json:",omitempty"`
}

func (r *runner) many(l lib, progress func(string)) (Many, error) {
	out := Many{Lib: l.Name, N: r.cfg.ManyN}
	e := r.newEnv()
	p, err := l.New(e)
	if err != nil {
		return out, err
	}
	defer p.Close()
	op, ok := p.(interface{ locker() *lock.Locker })
	if !ok {
		return out, fmt.Errorf("%s has no AcquireMany", l.Name)
	}
	lk := op.locker()
	ctx, cancel := bg(10 * time.Minute)
	defer cancel()
	ttl := time.Minute
	base := fmt.Sprintf("%sm:%s:", r.prefix, slug(l.Name))
	if unlock, err := p.Lock(ctx, base+"warm", ttl); err != nil {
		return out, err
	} else if err := unlock(ctx); err != nil {
		return out, err
	}
	var manyS, loopS, ratios []float64
	var cm, cl cost
	for round := range r.cfg.ManyRounds {
		manyIDs, loopIDs := make([]string, out.N), make([]string, out.N)
		for i := range out.N {
			manyIDs[i] = fmt.Sprintf("%s%d:a%d", base, round, i)
			loopIDs[i] = fmt.Sprintf("%s%d:b%d", base, round, i)
		}
		var leases []*lock.Lease
		a, err := r.snap(ctx, e, false)
		if err != nil {
			return out, err
		}
		out.Snapshots = 0
		for s, err := range lk.AcquireMany(ctx, manyIDs, ttl, nil) {
			if err != nil {
				releaseAll(leases)
				return out, err
			}
			out.Snapshots++
			leases = append(leases, s.Acquired...)
			if len(s.NotAcquired) > 0 {
				releaseAll(leases)
				return out, fmt.Errorf("AcquireMany: %d free ids timed out", len(s.NotAcquired))
			}
		}
		b, err := r.snap(ctx, e, false)
		if err != nil {
			releaseAll(leases)
			return out, err
		}
		if len(leases) != out.N {
			releaseAll(leases)
			return out, fmt.Errorf("AcquireMany granted %d of %d free ids", len(leases), out.N)
		}
		for _, id := range loopIDs {
			res, err := lk.Acquire(ctx, id, ttl, nil)
			if err == nil && !res.Acquired {
				err = fmt.Errorf("Acquire(%s) of a free id: not acquired", id)
			}
			if err != nil {
				releaseAll(leases)
				return out, err
			}
			leases = append(leases, res.Lease)
		}
		c, err := r.snap(ctx, e, false)
		releaseAll(leases)
		if err != nil {
			return out, err
		}
		ms, ls := b.t.Sub(a.t).Seconds(), c.t.Sub(b.t).Seconds()
		manyS, loopS, ratios = append(manyS, ms), append(loopS, ls), append(ratios, ls/ms)
		cm.add(between(a, b))
		cl.add(between(b, c))
		progress(fmt.Sprintf("round %d: AcquireMany %.3f s, loop %.3f s", round+1, ms, ls))
	}
	out.Rounds = len(ratios)
	out.ManySeconds, out.LoopSeconds, out.Ratio = median(manyS), median(loopS), median(ratios)
	n := float64(out.N * out.Rounds)
	out.ManyClientCmds, out.LoopClientCmds = cm.ClientCmds/n, cl.ClientCmds/n
	out.ManyServerCPUUs, out.LoopServerCPUUs = cm.ServerCPU/n, cl.ServerCPU/n
	return out, nil
}

// releaseAll releases leases with a few goroutines (not measured).
func releaseAll(leases []*lock.Lease) {
	ctx, cancel := bg(time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	ch := make(chan *lock.Lease)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for le := range ch {
				_ = le.Release(ctx)
			}
		}()
	}
	for _, le := range leases {
		ch <- le
	}
	close(ch)
	wg.Wait()
}

// pct returns the q-quantile of samples (nearest rank), as float64.
func pct(samples []int64, q float64) float64 {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	i = max(0, min(i, len(s)-1))
	return float64(s[i])
}

// ---- bytes left per id ----

// BytesLeft: what locking N distinct ids once each (lock, then unlock, as
// a service locking "order-<id>" does) leaves on the server, per id. Keys
// with a TTL go by BoundSeconds; keys without one stay for good, so
// BytesAfterBound (the MEMORY USAGE of those, per id) is what the server
// keeps after the idle bound, measured without waiting for it.
type BytesLeft struct {
	Lib             string
	N               int
	KeysPerID       float64 // keys right after the last unlock, per id
	BytesPerID      float64 // their MEMORY USAGE, per id
	BoundSeconds    float64 // the longest TTL among them: all of them are gone by then
	BytesAfterBound float64 // MEMORY USAGE of the keys without a TTL, per id (target 0)
	Err             string  `json:",omitempty"`
}

// bytesLeft runs the BytesLeft scenario for l with n ids and deletes what
// it left. A library whose keys do not contain the id does not count.
func (r *runner) bytesLeft(l lib, n int) (BytesLeft, error) {
	out := BytesLeft{Lib: l.Name, N: n}
	if r.admin == nil {
		return out, errors.New("bytes left: no admin client")
	}
	p, err := l.New(r.newEnv())
	if err != nil {
		return out, err
	}
	defer p.Close()
	ctx, cancel := bg(10 * time.Minute)
	defer cancel()
	marker := fmt.Sprintf("bl-%s-%d-", strings.NewReplacer("/", "-", "*", "-", "?", "-", "[", "-", "]", "-").Replace(l.Name), time.Now().UnixNano())
	for i := range n {
		unlock, err := p.Lock(ctx, fmt.Sprintf("%s%s%d", r.prefix, marker, i), time.Minute)
		if err != nil {
			return out, err
		}
		if err := unlock(ctx); err != nil {
			return out, err
		}
	}
	var keys int
	var bytes, forever int64
	var bound time.Duration
	iter := r.admin.Scan(ctx, 0, "*"+marker+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		pttl, err := r.admin.PTTL(ctx, k).Result()
		if err != nil {
			return out, err
		}
		if pttl == -2 { // gone since the SCAN
			continue
		}
		use, err := r.admin.MemoryUsage(ctx, k).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return out, err
		}
		keys++
		bytes += use
		if pttl == -1 {
			forever += use
		}
		bound = max(bound, pttl)
		if err := r.admin.Del(ctx, k).Err(); err != nil {
			return out, err
		}
	}
	if err := iter.Err(); err != nil {
		return out, err
	}
	out.KeysPerID, out.BytesPerID = float64(keys)/float64(n), float64(bytes)/float64(n)
	out.BoundSeconds, out.BytesAfterBound = bound.Seconds(), float64(forever)/float64(n)
	return out, nil
}
