package scripts

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/redisserver"
)

func TestConstantsMatchBackend(t *testing.T) {
	if MaxTokenLength != backend.MaxTokenLength {
		t.Fatalf("MaxTokenLength %d != backend.MaxTokenLength %d (lib.lua checks 128)", MaxTokenLength, backend.MaxTokenLength)
	}
	if !strings.Contains(Acquire.Source, "#s <= 128") {
		t.Fatal("lib.lua no longer checks the token length against 128")
	}
}

func TestErrorCode(t *testing.T) {
	cases := map[string]error{
		"LOCKNOTHELD the token does not hold the lock":     backend.ErrNotHeld,
		"ERR LOCKNOTHELD the token does not hold the lock": backend.ErrNotHeld,
		"LOCKQUEUEFULL the queue has 3 waiters":            backend.ErrQueueFull,
		"LOCKBADARG ttl: x":                                nil,
		"NOSCRIPT No matching script":                      nil,
		"LOCKNOTHELDX":                                     nil,
	}
	for msg, want := range cases {
		if got := MapError(msg); got != want {
			t.Errorf("MapError(%q) = %v, want %v", msg, got, want)
		}
	}
	if ErrorCode("ERR LOCKBADARG x: y") != CodeBadArg {
		t.Error("ErrorCode does not see LOCKBADARG behind ERR")
	}
}

func TestMillisRoundsUp(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Millisecond: "1", 1500 * time.Microsecond: "2", time.Nanosecond: "1", time.Hour: "3600000",
	} {
		if got := Millis(d); got != want {
			t.Errorf("Millis(%v) = %s, want %s", d, got, want)
		}
	}
}

// TestScriptsLoadWithTheirSHA1 checks that every script compiles on the
// server and that Script.SHA1 is the digest the server uses for EVALSHA.
func TestScriptsLoadWithTheirSHA1(t *testing.T) {
	c := client(t)
	names := map[string]bool{}
	for _, s := range All() {
		names[s.Name] = true
		sha, err := c.ScriptLoad(context.Background(), s.Source).Result()
		if err != nil {
			t.Fatalf("SCRIPT LOAD %s: %v", s.Name, err)
		}
		if sha != s.SHA1 {
			t.Fatalf("%s: server SHA1 %s, Script.SHA1 %s", s.Name, sha, s.SHA1)
		}
		if !strings.HasPrefix(s.Source, "-- lib.lua") {
			t.Fatalf("%s does not start with lib.lua", s.Name)
		}
	}
	if len(names) != 8 {
		t.Fatalf("All() = %v, want 8 distinct scripts", names)
	}
}

// TestScriptsValidateArgv sends bad ARGV to every script and expects a
// LOCKBADARG error reply and no key written.
func TestScriptsValidateArgv(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	ks := testKeys(t, c, "")
	k := ks.For("id")
	long := strings.Repeat("t", 129)
	good := backend.AcquireRequest{ID: "id", Token: "T", TTL: time.Second, Wait: true, WaiterTTL: time.Second}
	cs := NewConsts(10, 10, Classic)
	acqKeys, acqArgs := cs.Acquire(k, good, testInbox(ks))
	with := func(args []string, i int, v string) []string {
		out := append([]string(nil), args...)
		out[i] = v
		return out
	}
	relKeys, relArgs := releaseCall(cs, ks, "id", "T")
	extKeys, extArgs := cs.Extend(k, "T", time.Second)
	lvKeys, lvArgs := cs.Leave(k, "T")
	hbKeys, hbArgs := cs.Heartbeat(k, []string{"T"}, time.Second)
	wireKeys, wireArgs := WireCall(ks, 1, time.Second)
	cases := []struct {
		name   string
		script Script
		keys   []string
		args   []string
	}{
		{"acquire empty token", Acquire, acqKeys, with(acqArgs, 0, "")},
		{"acquire long token", Acquire, acqKeys, with(acqArgs, 0, long)},
		{"acquire ttl 0", Acquire, acqKeys, with(acqArgs, 1, "0")},
		{"acquire ttl negative", Acquire, acqKeys, with(acqArgs, 1, "-5")},
		{"acquire ttl fraction", Acquire, acqKeys, with(acqArgs, 1, "1.5")},
		{"acquire ttl huge", Acquire, acqKeys, with(acqArgs, 1, "1234567890123456")},
		{"acquire ttl text", Acquire, acqKeys, with(acqArgs, 1, "10s")},
		{"acquire wait 2", Acquire, acqKeys, with(acqArgs, 2, "2")},
		{"acquire waiter ttl 0", Acquire, acqKeys, with(acqArgs, 3, "0")},
		{"acquire max waiters 0", Acquire, acqKeys, with(acqArgs, 4, "0")},
		{"acquire purge limit too big", Acquire, acqKeys, with(acqArgs, 5, "100001")},
		{"acquire no publish", Acquire, acqKeys, with(acqArgs, 6, "")},
		{"acquire publish lowercase", Acquire, acqKeys, with(acqArgs, 6, "publish")},
		{"acquire publish other command", Acquire, acqKeys, with(acqArgs, 6, "DEL")},
		{"acquire no inbox", Acquire, acqKeys, with(acqArgs, 7, "")},
		{"acquire inbox missing", Acquire, acqKeys, acqArgs[:7]},
		{"acquire inbox of no kind", Acquire, acqKeys, with(acqArgs, 7, "Xname")},
		{"acquire inbox with no name", Acquire, acqKeys, with(acqArgs, 7, "P")},
		{"acquire missing args", Acquire, acqKeys, acqArgs[:3]},
		{"release empty token", Release, relKeys, with(relArgs, 0, "")},
		{"release purge limit 0", Release, relKeys, with(relArgs, 1, "0")},
		{"release no publish", Release, relKeys, relArgs[:2]},
		{"release publish other command", Release, relKeys, with(relArgs, 2, "SET")},
		{"release no mark", Release, relKeys, relArgs[:3]},
		{"release empty mark", Release, relKeys, with(relArgs, 3, "")},
		{"release long mark", Release, relKeys, with(relArgs, 3, strings.Repeat("m", 33))},
		{"extend ttl 0", Extend, extKeys, with(extArgs, 1, "0")},
		{"extend long token", Extend, extKeys, with(extArgs, 0, long)},
		{"leave empty token", Leave, lvKeys, with(lvArgs, 0, "")},
		{"leave purge limit text", Leave, lvKeys, with(lvArgs, 1, "x")},
		{"leave no publish", Leave, lvKeys, lvArgs[:2]},
		{"heartbeat ttl 0", Heartbeat, hbKeys, with(hbArgs, 0, "0")},
		{"heartbeat no tokens", Heartbeat, hbKeys, hbArgs[:3]},
		{"heartbeat empty token", Heartbeat, hbKeys, with(hbArgs, 3, "")},
		{"heartbeat publish is a token", Heartbeat, hbKeys, with(hbArgs, 2, "T")},
		{"wire version 0", Wire, wireKeys, with(wireArgs, 0, "0")},
		{"wire version text", Wire, wireKeys, with(wireArgs, 0, "v1")},
		{"wire ttl 0", Wire, wireKeys, with(wireArgs, 1, "0")},
		{"wire no ttl", Wire, wireKeys, wireArgs[:1]},
	}
	for _, tc := range cases {
		err := evalsha(ctx, c, tc.script, tc.keys, tc.args).Err()
		var re redis.Error
		if !errors.As(err, &re) || ErrorCode(err.Error()) != CodeBadArg {
			t.Errorf("%s: got %v, want a LOCKBADARG error reply", tc.name, err)
		}
	}
	if n := c.Exists(ctx, k.Lock, k.Queue, k.Fence, k.Waiters, relKeys[4], relKeys[5], ks.Wire()).Val(); n != 0 {
		t.Fatalf("bad input wrote %d keys", n)
	}
	// The good arguments pass validation.
	if err := evalsha(ctx, c, Acquire, acqKeys, acqArgs).Err(); err != nil {
		t.Fatalf("good acquire: %v", err)
	}
	if err := evalsha(ctx, c, Release, relKeys, relArgs).Err(); err != nil {
		t.Fatalf("good release: %v", err)
	}
}

func TestParseAcquire(t *testing.T) {
	g, err := ParseAcquire([]int64{0, 0, 0, 1500, 1, 7, 1})
	if err != nil {
		t.Fatal(err)
	}
	want := backend.Grant{HolderTTL: 1500 * time.Millisecond, Queued: true, Ticket: 7, Head: true}
	if g != want {
		t.Fatalf("ParseAcquire = %+v, want %+v", g, want)
	}
	if _, err := ParseAcquire([]int64{1, 2}); err == nil {
		t.Fatal("ParseAcquire accepted a short reply")
	}
	if _, err := ParseAcquire([]int64{1, -1, 0, 0, 0, 0, 0}); err == nil {
		t.Fatal("ParseAcquire accepted a negative value")
	}
	if r := ParseHeartbeat(3); !r.Queued || !r.Ready {
		t.Fatalf("ParseHeartbeat(3) = %+v", r)
	}
	if r := ParseHeartbeat(0); r.Queued || r.Ready {
		t.Fatalf("ParseHeartbeat(0) = %+v", r)
	}
}

// TestShardedWakeUp checks that a wake-up to an inbox of the sharded kind
// goes by SPUBLISH (an SSUBSCRIBE subscriber hears it, a SUBSCRIBE one
// does not), and to one of the classic kind by PUBLISH, whatever the
// releasing Backend's own setting.
func TestShardedWakeUp(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	if v, err := c.Eval(ctx, "return redis.REDIS_VERSION_NUM", nil).Int(); err != nil || v < 0x070000 {
		t.Skipf("sharded pub/sub needs Redis 7.0 (REDIS_VERSION_NUM %x, %v)", v, err)
	}
	ks := testKeys(t, c, "")
	k := ks.For("id")
	inbox := ks.Inbox("t", keys.SlotOf("id"))
	classic := c.Subscribe(ctx, inbox)
	defer classic.Close()
	sharded := c.SSubscribe(ctx, inbox)
	defer sharded.Close()
	for _, ps := range []*redis.PubSub{classic, sharded} {
		if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil { // the confirmation
			t.Fatal(err)
		}
	}
	for _, kind := range []InboxKind{InboxSharded, InboxClassic} {
		pub := Sharded
		if kind == InboxSharded {
			pub = Classic // the releasing Backend's setting does not choose the command
		}
		cs := NewConsts(10, 10, pub)
		hold := backend.AcquireRequest{ID: "id", Token: "H", TTL: time.Minute}
		wait := backend.AcquireRequest{ID: "id", Token: "W", TTL: time.Minute, Wait: true, WaiterTTL: time.Minute}
		for _, r := range []backend.AcquireRequest{hold, wait} {
			kk, a := cs.Acquire(k, r, InboxAddress(kind, inbox))
			if err := evalsha(ctx, c, Acquire, kk, a).Err(); err != nil {
				t.Fatal(err)
			}
		}
		kk, a := releaseCall(cs, ks, "id", "H")
		if err := evalsha(ctx, c, Release, kk, a).Err(); err != nil {
			t.Fatal(err)
		}
		heard, silent := sharded, classic
		if kind == InboxClassic {
			heard, silent = classic, sharded
		}
		m, err := heard.ReceiveTimeout(ctx, 5*time.Second)
		if msg, ok := m.(*redis.Message); err != nil || !ok || !strings.HasPrefix(msg.Payload, "2:idg") || !strings.HasSuffix(msg.Payload, ":W") {
			t.Fatalf("inbox kind %c: the subscriber got %v, %v; want W's grant", kind, m, err)
		}
		// The silent one gets nothing: a PING's PONG is the next thing it reads.
		if err := silent.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if m, err := silent.ReceiveTimeout(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		} else if _, ok := m.(*redis.Pong); !ok {
			t.Fatalf("inbox kind %c: the other kind of subscriber got %v", kind, m)
		}
		kk, a = releaseCall(cs, ks, "id", "W")
		if err := evalsha(ctx, c, Release, kk, a).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestShardedNeedsRedis7 checks that SPUBLISH is refused, before anything
// is written, by a server whose scripts do not report Redis 7
// (miniredis, standing in for Redis 5 and 6).
func TestShardedNeedsRedis7(t *testing.T) {
	srv, err := redisserver.StartMiniredis()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	ks, _ := keys.New("t:")
	k := ks.For("id")
	req := backend.AcquireRequest{ID: "id", Token: "T", TTL: time.Second}
	classic := InboxAddress(InboxClassic, ks.Inbox("t", -1))
	sharded := InboxAddress(InboxSharded, ks.Inbox("t", keys.SlotOf("id")))
	type call struct {
		what       string
		script     Script
		keys, args []string
	}
	var calls []call
	add := func(what string, script Script, k, a []string) { calls = append(calls, call{what, script, k, a}) }
	kk, a := NewConsts(10, 10, Sharded).Acquire(k, req, classic)
	add("an acquire with SPUBLISH", Acquire, kk, a)
	kk, a = NewConsts(10, 10, Classic).Acquire(k, req, sharded)
	add("an acquire with a sharded inbox", Acquire, kk, a)
	kk, a = releaseCall(NewConsts(10, 10, Sharded), ks, "id", "T")
	rel := kk[4:6]
	add("a release with SPUBLISH", Release, kk, a)
	for _, cl := range calls {
		err := evalsha(ctx, c, cl.script, cl.keys, cl.args).Err()
		if err == nil || ErrorCode(err.Error()) != CodeBadArg || !strings.Contains(err.Error(), "Redis 7.0") {
			t.Fatalf("%s on miniredis: %v; want LOCKBADARG naming Redis 7.0", cl.what, err)
		}
		if n := c.Exists(ctx, append([]string{k.Lock, k.Fence}, rel...)...).Val(); n != 0 {
			t.Fatalf("%s, refused, wrote %d keys", cl.what, n)
		}
	}
	kk, a = NewConsts(10, 10, Classic).Acquire(k, req, classic)
	if err := evalsha(ctx, c, Acquire, kk, a).Err(); err != nil {
		t.Fatalf("acquire with PUBLISH on miniredis: %v", err)
	}
}
