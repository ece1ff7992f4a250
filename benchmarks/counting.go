package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Client commands are counted in two places, because no single place sees
// exactly the commands that clients send:
//
//   - data and script commands (EVALSHA, EVAL, SET, ...) by a hook in every
//     client of every library (go-redis hooks; a rueidis.Client wrapper).
//     The server cannot tell them apart from the commands that scripts call
//     (INFO commandstats counts both);
//   - connection-level commands (PING, the SUBSCRIBE family, HELLO, CLIENT
//     ...) by the server's INFO commandstats, because some are sent on
//     connections that hooks do not see (go-redis pub/sub, rueidis pings and
//     tracking setup), and scripts never call them.
//
// The hooks skip connection-level names so nothing is counted twice.
var connLevel = map[string]bool{
	"ping": true, "subscribe": true, "unsubscribe": true, "psubscribe": true,
	"punsubscribe": true, "ssubscribe": true, "sunsubscribe": true, "hello": true,
	"auth": true, "select": true, "readonly": true, "quit": true, "reset": true,
}

// isConnLevel reports whether a commandstats name (e.g. "client|setinfo")
// is a connection-level command.
func isConnLevel(name string) bool {
	name = strings.ToLower(name)
	if i := strings.IndexByte(name, '|'); i >= 0 {
		name = name[:i]
	}
	return connLevel[name] || name == "client" || name == "command" || name == "cluster"
}

// adminCommand reports whether a commandstats name belongs to this tool's
// own measuring (INFO, CONFIG, SCAN/UNLINK of the cleanup), never to a
// library under test.
func adminCommand(name string) bool {
	switch strings.ToLower(name) {
	case "info", "config|resetstat", "config|get", "config|set", "scan", "unlink", "dbsize", "flushall":
		return true
	}
	return false
}

// goredisCounter is a go-redis hook that counts the commands a client sends.
type goredisCounter struct{ n *atomic.Int64 }

func (h goredisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h goredisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isConnLevel(cmd.Name()) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h goredisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var k int64
		for _, c := range cmds {
			if !isConnLevel(c.Name()) {
				k++
			}
		}
		h.n.Add(k)
		return next(ctx, cmds)
	}
}

// newGoRedis returns a go-redis client with the counting hook: one per
// "process".
func newGoRedis(e *env) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: e.addr})
	c.AddHook(goredisCounter{e.cmds})
	return c
}

// countingRueidis wraps a rueidis.Client and counts the commands sent
// through it.
type countingRueidis struct {
	rueidis.Client
	n *atomic.Int64
}

func (c *countingRueidis) count(cmds ...rueidis.Completed) {
	var k int64
	for _, cmd := range cmds {
		if cs := cmd.Commands(); len(cs) > 0 && !isConnLevel(cs[0]) {
			k++
		}
	}
	c.n.Add(k)
}

func (c *countingRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.count(cmd)
	return c.Client.Do(ctx, cmd)
}

func (c *countingRueidis) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.count(multi...)
	return c.Client.DoMulti(ctx, multi...)
}

// DoCache counts one command; a cache hit sends none, but the libraries
// measured here do not read through the cache.
func (c *countingRueidis) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c *countingRueidis) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	c.n.Add(int64(len(multi)))
	return c.Client.DoMultiCache(ctx, multi...)
}

// newRueidis returns a rueidis client with the counting wrapper.
func newRueidis(e *env, opt rueidis.ClientOption) (rueidis.Client, error) {
	if len(opt.InitAddress) == 0 {
		opt.InitAddress = []string{e.addr}
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, err
	}
	return &countingRueidis{Client: c, n: e.cmds}, nil
}

// serverStats is one INFO commandstats + cpu reading.
type serverStats struct {
	calls map[string]int64
	usec  map[string]int64
	cpuUs float64 // used_cpu_user + used_cpu_sys, in microseconds
}

func readServerStats(ctx context.Context, admin *redis.Client) (serverStats, error) {
	txt, err := admin.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return serverStats{}, fmt.Errorf("INFO: %w", err)
	}
	s := serverStats{calls: map[string]int64{}, usec: map[string]int64{}}
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(k, "cmdstat_"):
			name := strings.TrimPrefix(k, "cmdstat_")
			for _, f := range strings.Split(v, ",") {
				fk, fv, _ := strings.Cut(f, "=")
				n, _ := strconv.ParseInt(fv, 10, 64)
				switch fk {
				case "calls":
					s.calls[name] = n
				case "usec":
					s.usec[name] = n
				}
			}
		case k == "used_cpu_user" || k == "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			s.cpuUs += f * 1e6
		}
	}
	return s, nil
}

// cost is what a measured window cost, from snapshots at its ends.
type cost struct {
	ClientCmds float64             // hooks + connection-level commands (see above)
	ServerCmds float64             // every command the server ran, incl. those scripts called
	ServerCPU  float64             // µs of server process CPU (user+sys)
	PerCommand map[string][2]int64 `json:",omitempty"` // commandstats name -> {calls, usec} (a script's usec includes its inner calls')
}

func costBetween(hooks int64, a, b serverStats) cost {
	c := cost{ClientCmds: float64(hooks), ServerCPU: b.cpuUs - a.cpuUs, PerCommand: map[string][2]int64{}}
	for name, n := range b.calls {
		if adminCommand(name) {
			continue
		}
		d := n - a.calls[name]
		if d == 0 {
			continue
		}
		du := b.usec[name] - a.usec[name]
		c.PerCommand[name] = [2]int64{d, du}
		c.ServerCmds += float64(d)
		if isConnLevel(name) {
			c.ClientCmds += float64(d)
		}
	}
	return c
}

func (c *cost) add(o cost) {
	c.ClientCmds += o.ClientCmds
	c.ServerCmds += o.ServerCmds
	c.ServerCPU += o.ServerCPU
	if len(o.PerCommand) > 0 && c.PerCommand == nil {
		c.PerCommand = map[string][2]int64{}
	}
	for k, v := range o.PerCommand {
		w := c.PerCommand[k]
		c.PerCommand[k] = [2]int64{w[0] + v[0], w[1] + v[1]}
	}
}
