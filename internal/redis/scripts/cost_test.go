package scripts

import (
	"context"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// TestUncontendedCycleCost checks what an uncontended acquire + release
// costs the server, in commands (EVALSHA and the commands a script calls),
// and prints it with the server's CPU time per cycle. The command counts
// are the contract of the scripts' fast paths: EXISTS queue, TIME, SET ...
// GET of the slot's fence key (GET and SET before Redis 7), SET NX PX for
// the grant; GET, DEL, SADD and PEXPIRE of the release record, EXISTS
// queue for the release; and an EVALSHA each.
func TestUncontendedCycleCost(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	ks := testKeys(t, c, "")
	k := ks.For("cycle")
	want := int64(11)
	if v, err := c.Eval(ctx, "return redis.REDIS_VERSION_NUM", nil).Int(); err != nil || v < 0x070000 {
		want = 12 // no SET ... GET in a script
	}
	cs := NewConsts(100, 100, Classic)
	cycle := func() {
		ak, aa := cs.Acquire(k, backend.AcquireRequest{ID: "cycle", Token: "T", TTL: 10 * time.Second}, testInbox(ks))
		r, err := evalsha(ctx, c, Acquire, ak, aa).Int64Slice()
		if err != nil || r[0] != 1 {
			t.Fatalf("acquire = %v, %v", r, err)
		}
		rk, ra := releaseCall(cs, ks, "cycle", "T")
		if err := evalsha(ctx, c, Release, rk, ra).Err(); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // loads the scripts and leaves a release mark, as in steady state
	const n = 2000
	calls0, cpu0 := serverStats(t, c)
	for range n {
		cycle()
	}
	calls1, cpu1 := serverStats(t, c)
	per := float64(calls1-calls0) / n
	t.Logf("%.2f server commands, %.1f µs server CPU per uncontended acquire+release", per, (cpu1-cpu0)/n)
	if redisserver.External() {
		return // another client may share the server
	}
	if calls1-calls0 != want*n {
		t.Errorf("%.2f server commands per cycle, want %d", per, want)
	}
}

// BenchmarkUncontendedCycle measures an uncontended acquire + release
// through a plain client, and the server's CPU per cycle, next to a
// redislock-style pair of scripts (SET NX PX; GET + DEL) as the floor, and
// to bare scripts that run the fast paths' commands on the same KEYS and
// ARGV without validation or helpers: "evalsha" sends the scripts by
// EVALSHA, "functions" as FCALL of their functions in Lib (whose helpers
// are made once, at FUNCTION LOAD). server-script-µs/op is the server's
// time in the EVALSHA, EVAL and FCALL commands (INFO commandstats).
func BenchmarkUncontendedCycle(b *testing.B) {
	c := ownClient(b)
	ctx := context.Background()
	ks, _ := keys.New("bench:")
	k := ks.For("cycle")
	obtain := newScript("obtain", `return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`)
	unlock := newScript("unlock", `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	// The fast paths' commands with the same KEYS and ARGV, without
	// validation or helpers: what the commands and arguments cost alone.
	bareAcquire := newScript("bare-acquire", `
if redis.call('EXISTS', KEYS[2]) == 0 then
  local t = redis.call('TIME')
  local f = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('SET', KEYS[4], string.format('%d', f), 'PX', '3600000', 'GET')) or 0
  if last >= f then
    f = last + 1
    redis.call('SET', KEYS[4], string.format('%d', f), 'PX', '3600000')
  end
  if redis.call('SET', KEYS[1], string.format('%d', f) .. ':' .. ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {1, f, tonumber(ARGV[2]), 0, 0, 0, 0}
  end
end
return {0, 0, 0, 0, 0, 0, 0}`)
	bareRelease := newScript("bare-release", `
local v = redis.call('GET', KEYS[1])
if not v or string.match(v, '^[0-9]+:(.*)$') ~= ARGV[1] then return redis.error_reply('LOCKNOTHELD') end
redis.call('DEL', KEYS[1])
redis.call('SADD', KEYS[5], ARGV[4])
redis.call('PEXPIRE', KEYS[5], '60000')
redis.call('EXISTS', KEYS[2])
return 1`)
	// pair is a cycle of acquire and release scripts with cs's arguments,
	// sent by EVALSHA, or as FCALL with functions.
	pair := func(cs Consts, acquire, release Script, functions ...bool) func() {
		send := evalsha
		if len(functions) > 0 && functions[0] {
			send = fcall
		}
		return func() {
			ak, aa := cs.Acquire(k, backend.AcquireRequest{ID: "cycle", Token: "T", TTL: 10 * time.Second}, testInbox(ks))
			if err := send(ctx, c, acquire, ak, aa).Err(); err != nil {
				b.Fatal(err)
			}
			rk, ra := releaseCall(cs, ks, "cycle", "T")
			if err := send(ctx, c, release, rk, ra).Err(); err != nil {
				b.Fatal(err)
			}
		}
	}
	type variant struct {
		name  string
		cycle func()
	}
	variants := []variant{
		{"redislock-style", func() {
			if err := evalsha(ctx, c, obtain, []string{k.Lock}, []string{"T", "10000"}).Err(); err != nil {
				b.Fatal(err)
			}
			if err := evalsha(ctx, c, unlock, []string{k.Lock}, []string{"T"}).Err(); err != nil {
				b.Fatal(err)
			}
		}},
		{"bare-same-commands", pair(NewConsts(100, 100, Classic), bareAcquire, bareRelease)},
		{"evalsha", pair(NewConsts(100, 100, Classic), Acquire, Release)},
		{"functions", pair(NewConsts(100, 100, Classic), Acquire, Release, true)},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			v.cycle()
			calls0, cpu0 := serverStats(b, c)
			us0, _ := scriptUsec(b, c)
			b.ResetTimer()
			for range b.N {
				v.cycle()
			}
			b.StopTimer()
			calls1, cpu1 := serverStats(b, c)
			us1, _ := scriptUsec(b, c)
			b.ReportMetric(float64(us1-us0)/float64(b.N), "server-script-µs/op")
			b.ReportMetric(float64(calls1-calls0)/float64(b.N), "server-cmds/op")
			b.ReportMetric((cpu1-cpu0)/float64(b.N), "server-cpu-µs/op")
		})
	}
}

// TestContendedCycleCost checks what a contended acquisition costs the
// server, in commands, and prints it with the server's CPU time: three
// tokens take turns on one id, so that each cycle is one release that
// hands the lock off to the head (and tells the next head the new lease's
// TTL) and one enqueue behind a held lock into a queue that exists. The
// command counts are the contract of the contended path: 12 for the
// release (GET; SADD and PEXPIRE of the release record; ZRANGE of the
// first two entries, TIME, HMGET of their records; SET ... GET of the
// fence key, SET of the lock, PUBLISH of the grant, ZREM, HDEL, PUBLISH to
// the next head) and 9 for the enqueue (EXISTS of the lock and queue, GET,
// TIME, PTTL of the lock, ZRANGE of the tail, ZCARD, ZADD NX, which also
// tells that the requester had no entry, HSET, PTTL of the queue), and an
// EVALSHA each; the queue keys' PEXPIREs come once per two thirds of
// their TTL.
func TestContendedCycleCost(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	ks := testKeys(t, c, "")
	k := ks.For("contended")
	cs := NewConsts(100, 100, Classic)
	acquire := func(token string) backend.Grant {
		req := backend.AcquireRequest{ID: "contended", Token: token, TTL: 10 * time.Second, Wait: true, WaiterTTL: time.Minute}
		ak, aa := cs.Acquire(k, req, testInbox(ks))
		r, err := evalsha(ctx, c, Acquire, ak, aa).Int64Slice()
		if err != nil {
			t.Fatalf("acquire %s: %v", token, err)
		}
		g, err := ParseAcquire(r)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	release := func(token string) {
		rk, ra := releaseCall(cs, ks, "contended", token)
		if err := evalsha(ctx, c, Release, rk, ra).Err(); err != nil {
			t.Fatalf("release %s: %v", token, err)
		}
	}
	tokens := []string{"A", "B", "C"}
	if g := acquire("A"); !g.Acquired {
		t.Fatalf("A = %+v, want the grant", g)
	}
	for _, tok := range tokens[1:] {
		if g := acquire(tok); !g.Queued {
			t.Fatalf("%s = %+v, want queued", tok, g)
		}
	}
	holder := 0
	cycle := func() {
		release(tokens[holder])
		if g := acquire(tokens[holder]); g.Acquired || !g.Queued || g.HolderTTL <= 0 {
			t.Fatalf("%s behind the hand-off = %+v, want queued behind a held lock", tokens[holder], g)
		}
		holder = (holder + 1) % len(tokens)
		if owner, _, _ := keys.ParseLock(c.Get(ctx, k.Lock).Val()); owner != tokens[holder] {
			t.Fatalf("the lock holder is %q, want %s (the hand-off)", owner, tokens[holder])
		}
	}
	cycle()
	const n = 600
	calls0, cpu0 := serverStats(t, c)
	for range n {
		cycle()
	}
	calls1, cpu1 := serverStats(t, c)
	// Each cycle has two GETs of the check above; the PEXPIREs of the
	// queue keys come once per two thirds of their TTL, not in 600 quick
	// cycles after the first one's.
	per := float64(calls1-calls0)/n - 1
	t.Logf("%.2f server commands, %.1f µs server CPU per contended acquisition (a release with hand-off and an enqueue)", per, (cpu1-cpu0)/n)
	if redisserver.External() {
		return
	}
	want := 23.0
	if v, err := c.Eval(ctx, "return redis.REDIS_VERSION_NUM", nil).Int(); err != nil || v < 0x070000 {
		want++ // no SET ... GET in a script
	}
	if per != want {
		t.Errorf("%.2f server commands per contended acquisition, want %v", per, want)
	}
}

// TestSharedUncontendedCycleCost pins the server commands of an acquire
// and a release of a shared id (capacity 2) that nobody else uses: the
// first acquire makes the id's hash, the release deletes it (idle).
func TestSharedUncontendedCycleCost(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	ks := testKeys(t, c, "")
	k := ks.For("shared-cycle")
	const want = 20
	cs := NewConsts(100, 100, Classic)
	cycle := func() {
		req := backend.AcquireRequest{ID: "shared-cycle", Token: "T", TTL: 10 * time.Second, Capacity: 2, Permits: 1}
		ak, aa := cs.AcquireShared(k, req, testInbox(ks))
		r, err := evalsha(ctx, c, AcquireShared, ak, aa).Int64Slice()
		if err != nil || r[0] != 1 {
			t.Fatalf("acquire_shared = %v, %v", r, err)
		}
		rk, ra := releaseCall(cs, ks, "shared-cycle", "T")
		if err := evalsha(ctx, c, Release, rk, ra).Err(); err != nil {
			t.Fatal(err)
		}
		if n := c.Exists(ctx, k.Lock).Val(); n != 0 {
			t.Fatal("the idle shared id's hash is left after its release")
		}
	}
	cycle() // loads the scripts
	const n = 500
	calls0, cpu0 := serverStats(t, c)
	for range n {
		cycle()
	}
	calls1, cpu1 := serverStats(t, c)
	per := float64(calls1-calls0)/n - 1 // the EXISTS of the check above
	t.Logf("%.2f server commands, %.1f µs server CPU per uncontended shared acquire+release", per, (cpu1-cpu0)/n)
	if redisserver.External() {
		return
	}
	if per != want {
		t.Errorf("%.2f server commands per cycle, want %d", per, want)
	}
}
