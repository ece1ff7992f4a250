package scripts

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

// BenchmarkAcquireMany acquires 10,000 free ids per op: with AcquireMany
// (MaxAcquireBatch ids per call, the calls pipelined), with one acquire
// script per id pipelined in one round trip (what AcquireBatch did before
// AcquireMany), and with one acquire per id in a loop. It reports ids/s,
// the server's script µs and CPU µs per id, and the longest a single call
// ran on the server on average (µs per call: a call blocks the server that
// long; script µs are wall time, which a loaded machine inflates).
func BenchmarkAcquireMany(b *testing.B) {
	c := ownClient(b)
	ctx := context.Background()
	cs := NewConsts(100, 100, Classic)
	const n = 10000
	reqsFor := func(i int) []backend.AcquireRequest {
		reqs := make([]backend.AcquireRequest, n)
		for j := range reqs {
			reqs[j] = backend.AcquireRequest{ID: fmt.Sprint("id-", j), Token: "T", TTL: time.Minute}
		}
		return reqs
	}
	run := map[string]func(ks keys.Keyspace, reqs []backend.AcquireRequest){
		"batch-script": func(ks keys.Keyspace, reqs []backend.AcquireRequest) {
			groups := GroupAcquires(reqs, false, 0)
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, g := range groups {
					k, a := cs.AcquireMany(ks, g, testInbox(ks))
					p.EvalSha(ctx, AcquireMany.SHA1, k, anys(a)...)
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			out := make([]backend.BatchGrant, len(reqs))
			for i, g := range groups {
				vals, err := cmds[i].(*redis.Cmd).Int64Slice()
				if err != nil {
					b.Fatal(err)
				}
				if err := ScatterAcquireMany(out, g, vals); err != nil {
					b.Fatal(err)
				}
			}
			if !out[n-1].Acquired {
				b.Fatalf("last id not acquired: %+v", out[n-1])
			}
		},
		"script-per-id-pipelined": func(ks keys.Keyspace, reqs []backend.AcquireRequest) {
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, r := range reqs {
					k, a := cs.Acquire(ks.For(r.ID), r, testInbox(ks))
					p.EvalSha(ctx, Acquire.SHA1, k, anys(a)...)
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			if v, err := cmds[n-1].(*redis.Cmd).Int64Slice(); err != nil || v[0] != 1 {
				b.Fatalf("last id: %v, %v", v, err)
			}
		},
		"script-per-id-loop": func(ks keys.Keyspace, reqs []backend.AcquireRequest) {
			for _, r := range reqs {
				k, a := cs.Acquire(ks.For(r.ID), r, testInbox(ks))
				if err := c.EvalSha(ctx, Acquire.SHA1, k, anys(a)...).Err(); err != nil {
					b.Fatal(err)
				}
			}
		},
	}
	for _, s := range []Script{Acquire, AcquireMany} {
		if err := c.ScriptLoad(ctx, s.Source).Err(); err != nil {
			b.Fatal(err)
		}
	}
	for _, name := range []string{"batch-script", "script-per-id-pipelined", "script-per-id-loop"} {
		b.Run(name, func(b *testing.B) {
			reqs := reqsFor(0)
			var elapsed time.Duration
			var usec, calls int64
			var cpu float64
			for i := range b.N {
				ks, _ := keys.New(fmt.Sprintf("bench%d:%s:", i, name))
				ks = ks.OneServer() // as the engine on one server: one fence key
				u0, c0 := scriptUsec(b, c)
				_, cpu0 := serverStats(b, c)
				start := time.Now()
				run[name](ks, reqs)
				elapsed += time.Since(start)
				_, cpu1 := serverStats(b, c)
				cpu += cpu1 - cpu0
				u1, c1 := scriptUsec(b, c)
				usec += u1 - u0
				calls += c1 - c0
				b.StopTimer()
				if err := c.FlushDB(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "ids/s")
			b.ReportMetric(float64(usec)/float64(n*b.N), "server-µs/id")
			b.ReportMetric(float64(usec)/float64(calls), "server-µs/call")
			b.ReportMetric(cpu/float64(n*b.N), "server-cpu-µs/id")
		})
	}
}

// BenchmarkAcquireManyFloor is the floor of BenchmarkAcquireMany's
// batch-script: the server's CPU per id of scripts that do no more than
// SET NX PX per id (64 ids per call, pipelined), replying 1 integer per
// id, 8 integers per id (what acquire_many replies), and 8 with the value
// formatted as the lock value is. The gap to batch-script is what the
// script's own work costs per id (validation, four keys per id, the
// fence and the helpers' calls).
func BenchmarkAcquireManyFloor(b *testing.B) {
	c := ownClient(b)
	ctx := context.Background()
	variants := map[string]string{
		"set-8ints": `local out = {}
for i = 1, #KEYS do
  local ok = redis.call('SET', KEYS[i], ARGV[i], 'NX', 'PX', '60000')
  local o = #out
  out[o+1], out[o+2], out[o+3], out[o+4] = 0, 1, 12345678901234, 60000
  for j = 5, 8 do out[o + j] = 0 end
end
return out`,
		"set-1int": `local out = {}
for i = 1, #KEYS do
  local ok = redis.call('SET', KEYS[i], ARGV[i], 'NX', 'PX', '60000')
  out[i] = 1
end
return out`,
		"set-fmt-8ints": `local out = {}
local us = 1764000000000000
for i = 1, #KEYS do
  us = us + 1
  local v = string.format('%d', us) .. ':' .. ARGV[i]
  local ok = redis.call('SET', KEYS[i], v, 'NX', 'PX', '60000')
  local o = #out
  out[o+1], out[o+2], out[o+3], out[o+4] = 0, 1, us, 60000
  for j = 5, 8 do out[o + j] = 0 end
end
return out`,
	}
	for _, name := range []string{"set-1int", "set-8ints", "set-fmt-8ints"} {
		sc := newScript(name, variants[name])
		if err := c.ScriptLoad(ctx, sc.Source).Err(); err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			var cpu float64
			const n = 10000
			for i := range b.N {
				_, cpu0 := serverStats(b, c)
				_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
					for g := 0; g < n; g += 64 {
						ks := make([]string, 64)
						as := make([]any, 64)
						for j := range ks {
							ks[j] = fmt.Sprintf("b%d:%s:{id-%d}:lock", i, name, g+j)
							as[j] = "T"
						}
						p.EvalSha(ctx, sc.SHA1, ks, as...)
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				_, cpu1 := serverStats(b, c)
				cpu += cpu1 - cpu0
			}
			b.ReportMetric(cpu/float64(n*b.N), "server-cpu-µs/id")
		})
	}
}
