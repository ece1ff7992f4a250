// Command lockbench runs the lock library's benchmarks against one Redis,
// side by side with go-redsync/redsync, bsm/redislock and
// rueidis/rueidislock, and writes a table, raw results and charts.
//
//	cd benchmarks && go run . [-quick] [-redis ADDR] [-out DIR] [-only REGEXP] [-cpuprofile FILE]
//
// Without -redis (or REDIS_ADDR) it starts its own redis-server on a free
// loopback port. See README.md for what each scenario measures.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is main, testable: it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "CI smoke run: small counts, a few seconds; asserts nothing about speed")
	addr := fs.String("redis", os.Getenv("REDIS_ADDR"), "Redis address (default $REDIS_ADDR; empty: start a redis-server)")
	out := fs.String("out", "", "directory for results.json, results.csv, table.md and the SVG charts (default results, or results-quick with -quick)")
	only := fs.String("only", "", "run only the scenarios whose \"scenario/library\" name matches this regexp (the floor always runs)")
	note := fs.String("note", "", "free text for the run's header (e.g. the library's commit)")
	render := fs.String("render", "", "render the tables and charts again from a results.json (into -out) instead of running")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run (this process: clients and lock libraries) to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *out == "" {
		*out = "results"
		if *quick {
			*out = "results-quick"
		}
	}
	if *render != "" {
		return rerender(*render, *out, stdout, stderr)
	}
	var filter *regexp.Regexp
	if *only != "" {
		var err error
		if filter, err = regexp.Compile(*only); err != nil {
			fmt.Fprintln(stderr, "lockbench: -only:", err)
			return 2
		}
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(stderr, "lockbench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "lockbench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	cfg := fullConfig()
	if *quick {
		cfg = quickConfig()
	}

	own := false
	if *addr == "" {
		srv, err := startServer()
		if err != nil {
			fmt.Fprintln(stderr, "lockbench:", err)
			return 1
		}
		defer srv.Close()
		*addr, own = srv.Addr, true
		fmt.Fprintln(stderr, "started redis-server at", *addr)
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sig)
		go func() {
			if _, ok := <-sig; ok {
				srv.Close()
				os.Exit(130)
			}
		}()
	}
	res, err := runAll(cfg, *addr, own, filter, strings.Join(append([]string{"go run ."}, args...), " "), stderr)
	if res == nil {
		fmt.Fprintln(stderr, "lockbench:", err)
		return 1
	}
	res.Meta.Note = *note
	if werr := writeResults(*out, res); werr != nil {
		fmt.Fprintln(stderr, "lockbench:", werr)
		return 1
	}
	fmt.Fprint(stdout, markdown(res))
	fmt.Fprintf(stderr, "wrote %s/{results.json,results.csv,table.md,*.svg}\n", *out)
	if err != nil {
		fmt.Fprintln(stderr, "lockbench: some scenarios failed:", err)
		return 1
	}
	return 0
}

// rerender writes the outputs of a past run again from its results.json,
// e.g. after a change to the report's layout; the targets are evaluated
// again, nothing is measured.
func rerender(path, out string, stdout, stderr io.Writer) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(stderr, "lockbench:", err)
		return 1
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		fmt.Fprintf(stderr, "lockbench: %s: %v\n", path, err)
		return 1
	}
	finish(&res)
	if err := writeResults(out, &res); err != nil {
		fmt.Fprintln(stderr, "lockbench:", err)
		return 1
	}
	fmt.Fprint(stdout, markdown(&res))
	return 0
}

// runAll runs every scenario in order, printing progress to w. It returns
// the results (nil only when nothing could run) and the scenarios' errors.
func runAll(cfg config, addr string, own bool, filter *regexp.Regexp, command string, w io.Writer) (*Results, error) {
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	ver, err := redisVersion(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("redis at %s: %w", addr, err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	r := &runner{cfg: cfg, addr: addr, prefix: "lockbench:" + hex.EncodeToString(b[:]) + ":", admin: admin}
	res := &Results{Meta: newMeta(cfg, command, ver, own)}
	table := libs()
	res.Libs = make([]LibInfo, len(table))
	for i, l := range table {
		res.Libs[i] = LibInfo{Name: l.Name, Ours: l.Ours, Setting: l.Setting}
	}

	p := newPlan(ctx, cfg, r, res, table, filter)
	p.addFloorStart()
	p.addUncontended()
	p.addContended()
	p.addShared()
	p.addIdle()
	p.addAcquireMany()
	p.addBytesLeft()
	p.addFloorEnd()

	start := time.Now()
	errs := p.execute(w)
	res.Meta.Seconds = time.Since(start).Seconds()
	res.Meta.LoadAfter = loadavg()
	if !own {
		if err := cleanup(ctx, admin, r.prefix); err != nil {
			errs = append(errs, fmt.Errorf("cleanup of %s*: %w", r.prefix, err))
		}
	}
	if p.startMean == 0 || p.endMean == 0 {
		return res, errors.Join(append(errs, errors.New("no floor measured"))...)
	}
	p.aggregate()
	finish(res)
	return res, errors.Join(errs...)
}

// contScenario names a contended case: "contended-hold1ms", or
// "contended-hold1ms-1proc" when the workers share one process.
func contScenario(hold time.Duration, procs, workers int) string {
	s := "contended-" + holdName(hold)
	if procs != workers {
		s += fmt.Sprintf("-%dproc", procs)
	}
	return s
}

func holdName(h time.Duration) string {
	if h == 0 {
		return "hold0"
	}
	return "hold" + strings.ReplaceAll(h.String(), "µ", "u")
}

func redisVersion(ctx context.Context, c *redis.Client) (string, error) {
	txt, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(txt, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "?", nil
}

// cleanup removes this run's keys from a server the tool did not start.
func cleanup(ctx context.Context, c *redis.Client, prefix string) error {
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			if err := c.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		if err := c.Unlink(ctx, batch...).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func newMeta(cfg config, command, redisVersion string, own bool) Meta {
	return Meta{
		Date:         time.Now().UTC().Format(time.RFC3339),
		Command:      command,
		Quick:        cfg.Quick,
		GoVersion:    runtime.Version(),
		OS:           runtime.GOOS + "/" + runtime.GOARCH,
		CPUs:         runtime.NumCPU(),
		CPU:          cpuModel(),
		RedisVersion: redisVersion,
		OwnServer:    own,
		LoadBefore:   loadavg(),
		Config:       cfg,
	}
}
