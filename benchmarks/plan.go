package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"time"
)

type task struct {
	name string
	run  func() (string, error)
}

// contCase is one contended case: a hold time and the number of processes
// the workers are spread over.
type contCase struct {
	hold  time.Duration
	procs int
}

// plan is one run's list of tasks, in the order they run, and the state
// they share: the floor's pings, the round trip measured before the
// current round, and the rounds measured so far.
type plan struct {
	ctx    context.Context
	cfg    config
	r      *runner
	res    *Results
	table  []lib
	filter *regexp.Regexp
	tasks  []task

	pings                             []float64
	startMean, startP50, endMean, rtt float64

	roundErrs  map[string]error       // scenario/lib -> its first error
	uncRounds  map[string][]uncRound  // lib -> uncontended rounds
	contRounds map[string][]contRound // scenario/lib -> contended rounds
	contCases  []contCase

	sharedRounds map[string][]shRound // scenario/lib -> shared rounds
}

func newPlan(ctx context.Context, cfg config, r *runner, res *Results, table []lib, filter *regexp.Regexp) *plan {
	return &plan{ctx: ctx, cfg: cfg, r: r, res: res, table: table, filter: filter,
		roundErrs: map[string]error{}, uncRounds: map[string][]uncRound{}, contRounds: map[string][]contRound{},
		sharedRounds: map[string][]shRound{}}
}

func (p *plan) add(name string, fn func() (string, error)) { p.tasks = append(p.tasks, task{name, fn}) }

// selected reports whether -only lets scenario run for l.
func (p *plan) selected(scenario string, l lib) bool {
	return p.filter == nil || p.filter.MatchString(scenario+"/"+l.Name)
}

// addRoundPing measures the round trip that the next round's figures are
// compared with.
func (p *plan) addRoundPing(name string) {
	p.add(name, func() (string, error) {
		m, _, err := p.r.pingGoRedis(p.ctx, p.cfg.RoundPing)
		p.rtt = m
		p.pings = append(p.pings, m)
		return fmt.Sprintf("PING %.1f µs", m), err
	})
}

// addFloorStart measures the floor before any scenario: go-redis and
// rueidis PING.
func (p *plan) addFloorStart() {
	p.add("floor/start", func() (string, error) {
		var err error
		p.startMean, p.startP50, err = p.r.pingGoRedis(p.ctx, p.cfg.FloorDur)
		if err != nil {
			return "", err
		}
		p.pings = append(p.pings, p.startMean)
		p.res.Floor.RueidisPingUs, err = p.r.pingRueidis(p.ctx)
		return fmt.Sprintf("PING %.1f µs (go-redis, mean), %.1f µs (rueidis)", p.startMean, p.res.Floor.RueidisPingUs), err
	})
}

// addUncontended runs the uncontended cycle in rounds over the libraries,
// each round after its own PING.
func (p *plan) addUncontended() {
	var ls []lib
	for _, l := range p.table {
		if p.selected("uncontended", l) {
			ls = append(ls, l)
		}
	}
	for round := 1; len(ls) > 0 && round <= p.cfg.UncRounds; round++ {
		p.addRoundPing(fmt.Sprintf("uncontended round %d/%d: floor", round, p.cfg.UncRounds))
		for _, l := range ls {
			key := "uncontended/" + l.Name
			p.add(fmt.Sprintf("%s (%d/%d)", key, round, p.cfg.UncRounds), func() (string, error) {
				if p.roundErrs[key] != nil {
					return "skipped after an error", nil
				}
				rd, err := p.r.uncontendedRound(l)
				if err != nil {
					p.roundErrs[key] = err
					return "", err
				}
				rd.rtt = p.rtt
				p.uncRounds[l.Name] = append(p.uncRounds[l.Name], rd)
				return fmt.Sprintf("%s cycles/s, %.1f client cmds/cycle", num(float64(rd.n)/rd.secs), rd.c.ClientCmds/float64(rd.n)), nil
			})
		}
	}
}

// addContended runs the contended cases, per hold, in rounds over the
// Redis libraries: each worker its own process, and (hold 1 ms, full run)
// all in one process.
func (p *plan) addContended() {
	for _, h := range p.cfg.Holds {
		p.contCases = append(p.contCases, contCase{h, p.cfg.Workers})
	}
	if p.cfg.ContShared {
		p.contCases = append(p.contCases, contCase{time.Millisecond, 1})
	}
	for _, cc := range p.contCases {
		scenario := contScenario(cc.hold, cc.procs, p.cfg.Workers)
		var ls []lib
		for _, l := range p.table {
			if l.Redis && p.selected(scenario, l) {
				ls = append(ls, l)
			}
		}
		for round := 1; len(ls) > 0 && round <= p.cfg.ContRounds; round++ {
			p.addRoundPing(fmt.Sprintf("%s round %d/%d: floor", scenario, round, p.cfg.ContRounds))
			for _, l := range ls {
				key := scenario + "/" + l.Name
				p.add(fmt.Sprintf("%s (%d/%d)", key, round, p.cfg.ContRounds), func() (string, error) {
					if p.roundErrs[key] != nil {
						return "skipped after an error", nil
					}
					rd, err := p.r.contendedRound(l, cc.hold, cc.procs)
					if err != nil {
						p.roundErrs[key] = err
						return "", err
					}
					rd.rtt = p.rtt
					p.contRounds[key] = append(p.contRounds[key], rd)
					n := rd.acq()
					return fmt.Sprintf("%s acq/s, min/max %d/%d, %.1f client cmds/acq", num(float64(n)/rd.secs),
						slices.Min(rd.perWorker), slices.Max(rd.perWorker), rd.c.ClientCmds/float64(n)), nil
				})
			}
		}
	}
}

// addShared runs the shared scenarios (semaphore, reader-writer lock) in
// rounds over the libraries that run them (lib.Shared), each round after
// its own PING.
func (p *plan) addShared() {
	for _, sc := range sharedCases() {
		var ls []lib
		for _, l := range p.table {
			if l.Shared && p.selected(sc.name, l) {
				ls = append(ls, l)
			}
		}
		for round := 1; len(ls) > 0 && round <= p.cfg.ContRounds; round++ {
			p.addRoundPing(fmt.Sprintf("%s round %d/%d: floor", sc.name, round, p.cfg.ContRounds))
			for _, l := range ls {
				key := sc.name + "/" + l.Name
				p.add(fmt.Sprintf("%s (%d/%d)", key, round, p.cfg.ContRounds), func() (string, error) {
					if p.roundErrs[key] != nil {
						return "skipped after an error", nil
					}
					rd, err := p.r.sharedRound(l, sc)
					if err != nil {
						p.roundErrs[key] = err
						return "", err
					}
					rd.rtt = p.rtt
					p.sharedRounds[key] = append(p.sharedRounds[key], rd)
					nr, nw := rd.acq(classRead), rd.acq(classWrite)
					f, _, _ := fairness(rd.total())
					s := fmt.Sprintf("%s acq/s", num(float64(nr+nw)/rd.secs))
					if sc.writeEvery > 0 {
						s = fmt.Sprintf("%s reads/s, %s writes/s", num(float64(nr)/rd.secs), num(float64(nw)/rd.secs))
					}
					return fmt.Sprintf("%s, min/max %.2f, peak %d of %d permits, %d violations", s, f, rd.peak, sc.capacity, rd.violations), nil
				})
			}
		}
	}
}

// addIdle measures idle waiters, one window each (command counts do not
// depend on load), after the server's baseline with no client.
func (p *plan) addIdle() {
	procsList := []int{p.cfg.IdleWaiters}
	if p.cfg.IdleShared {
		procsList = append(procsList, 1)
	}
	idleSelected := false
	for _, procs := range procsList {
		for _, l := range p.table {
			idleSelected = idleSelected || l.Redis && p.selected(fmt.Sprintf("idle-%dprocs", procs), l)
		}
	}
	if idleSelected {
		p.add("idle/baseline", func() (string, error) {
			v, err := p.r.serverBaseline(p.cfg.IdleWindow / 2)
			p.res.IdleBaselineCPUUsPerS = v
			return fmt.Sprintf("server CPU %.0f µs/s with no client", v), err
		})
	}
	for _, procs := range procsList {
		scenario := fmt.Sprintf("idle-%dprocs", procs)
		for _, l := range p.table {
			if !l.Redis || !p.selected(scenario, l) {
				continue
			}
			p.add(scenario+"/"+l.Name, func() (string, error) {
				i, err := p.r.idle(l, procs)
				if err != nil {
					i.Err = err.Error()
				}
				p.res.Idle = append(p.res.Idle, i)
				return fmt.Sprintf("%s client cmds/s per waiter", num(i.ClientCmdsPerSec)), err
			})
		}
	}
}

// addAcquireMany compares AcquireMany with a loop of Acquire, for our Redis
// adapters.
func (p *plan) addAcquireMany() {
	for _, l := range p.table {
		if !l.Ours || !l.Redis || !p.selected("acquiremany", l) {
			continue
		}
		p.add("acquiremany/"+l.Name, func() (string, error) {
			m, err := p.r.many(l, func(string) {})
			if err != nil {
				m.Err = err.Error()
			}
			p.res.Many = append(p.res.Many, m)
			return fmt.Sprintf("%d ids, %d rounds: AcquireMany %.3f s, loop %.3f s: %.1fx", m.N, m.Rounds, m.ManySeconds, m.LoopSeconds, m.Ratio), err
		})
	}
}

// addBytesLeft measures what locking distinct ids once each leaves on the
// server, for every Redis library. It runs last: its keys are deleted as
// they are measured, but the server's memory is not what it was.
func (p *plan) addBytesLeft() {
	for _, l := range p.table {
		if !l.Redis || !p.selected("bytesleft", l) {
			continue
		}
		p.add("bytesleft/"+l.Name, func() (string, error) {
			bl, err := p.r.bytesLeft(l, p.cfg.BytesN)
			if err != nil {
				bl.Err = err.Error()
			}
			p.res.BytesLeft = append(p.res.BytesLeft, bl)
			return fmt.Sprintf("%d ids: %.2f keys/id, %.0f B/id right after, %.0f B/id after the bound (%.0f s)",
				bl.N, bl.KeysPerID, bl.BytesPerID, bl.BytesAfterBound, bl.BoundSeconds), err
		})
	}
}

// addFloorEnd measures the floor again after every scenario.
func (p *plan) addFloorEnd() {
	p.add("floor/end", func() (string, error) {
		var err error
		p.endMean, _, err = p.r.pingGoRedis(p.ctx, p.cfg.FloorDur)
		if err == nil {
			p.pings = append(p.pings, p.endMean)
		}
		return fmt.Sprintf("PING %.1f µs (go-redis, mean)", p.endMean), err
	})
}

// execute runs the tasks in order, printing one progress line each to w,
// and returns their errors.
func (p *plan) execute(w io.Writer) []error {
	var errs []error
	for i, t := range p.tasks {
		fmt.Fprintf(w, "[%2d/%d] %-40s ", i+1, len(p.tasks), t.name)
		t0 := time.Now()
		summary, err := t.run()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.name, err))
			fmt.Fprintf(w, "ERROR: %v (%.1fs)\n", err, time.Since(t0).Seconds())
			continue
		}
		fmt.Fprintf(w, "%s (%.1fs)\n", summary, time.Since(t0).Seconds())
	}
	return errs
}

// aggregate fills the results' floor and the uncontended, contended and
// shared rows from the rounds.
func (p *plan) aggregate() {
	res := p.res
	res.Floor.PingStartUs, res.Floor.PingEndUs, res.Floor.PingP50Us = p.startMean, p.endMean, p.startP50
	res.Floor.PingsUs = p.pings
	res.Floor.PingUs = median(p.pings)
	for _, l := range p.table {
		key := "uncontended/" + l.Name
		if rounds, err := p.uncRounds[l.Name], p.roundErrs[key]; len(rounds) > 0 || err != nil {
			u := aggregateUnc(l.Name, rounds)
			if err != nil {
				u.Err = err.Error()
			}
			res.Uncontended = append(res.Uncontended, u)
		}
	}
	for _, cc := range p.contCases {
		for _, l := range p.table {
			key := contScenario(cc.hold, cc.procs, p.cfg.Workers) + "/" + l.Name
			if rounds, err := p.contRounds[key], p.roundErrs[key]; len(rounds) > 0 || err != nil {
				c := aggregateCont(l.Name, cc.hold, p.cfg.Workers, cc.procs, res.Floor.PingUs, rounds)
				if err != nil {
					c.Err = err.Error()
				}
				res.Contended = append(res.Contended, c)
			}
		}
	}
	for _, sc := range sharedCases() {
		for _, l := range p.table {
			key := sc.name + "/" + l.Name
			if rounds, err := p.sharedRounds[key], p.roundErrs[key]; len(rounds) > 0 || err != nil {
				s := aggregateShared(sc, l.Name, p.cfg.Workers, rounds)
				if err != nil {
					s.Err = err.Error()
				}
				res.Shared = append(res.Shared, s)
			}
		}
	}
}
