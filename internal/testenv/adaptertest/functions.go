package adaptertest

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/scripts"
	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// FunctionsBackend returns a Backend of an adapter on the server at addr,
// and a func that reports whether its steps go as FCALL now.
type FunctionsBackend func(t *testing.T, addr string) (b backend.Backend, fcall func() bool)

// Functions checks an adapter's use of the scripts' function library
// (scripts.Lib), each case on a server of its own: the library is loaded
// before the first step and the steps go as FCALL; after FUNCTION FLUSH
// the next step still succeeds (as EVALSHA) and the library comes back
// within the reload period; a server or an ACL user that refuses FCALL,
// or FUNCTION LOAD, gets EVALSHA.
func Functions(t *testing.T, newBackend FunctionsBackend) {
	server := func(t *testing.T, args ...string) (*redis.Client, string) {
		srv := redisserver.StartT(t, redisserver.Options{Args: args})
		raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { raw.Close() })
		return raw, srv.Addr
	}
	cycle := func(t *testing.T, b backend.Backend) {
		t.Helper()
		MustAcquire(t, b, Req("f", "A", false))
		if err := b.Release(ctx, "f", "A"); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	calls := func(t *testing.T, raw *redis.Client, cmd string) int64 {
		t.Helper()
		s, err := raw.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		return redisserver.CommandStat(t, s, cmd, "calls")
	}
	loaded := func(t *testing.T, raw *redis.Client) bool {
		t.Helper()
		libs, err := raw.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: scripts.Lib.Name}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(libs) == 1
	}

	t.Run("loaded", func(t *testing.T) {
		raw, addr := server(t)
		b, fcall := newBackend(t, addr)
		cycle(t, b)
		if !fcall() || !loaded(t, raw) {
			t.Fatalf("after a cycle: FCALL %v, library loaded %v; want both", fcall(), loaded(t, raw))
		}
		n, e := calls(t, raw, "fcall"), calls(t, raw, "evalsha")
		cycle(t, b)
		if got, sha := calls(t, raw, "fcall")-n, calls(t, raw, "evalsha")-e; got != 2 || sha != 0 {
			t.Fatalf("a cycle sent %d FCALLs and %d EVALSHAs, want 2 and none", got, sha)
		}
	})

	t.Run("flushed", func(t *testing.T) {
		raw, addr := server(t)
		b, fcall := newBackend(t, addr)
		cycle(t, b)
		if err := raw.FunctionFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := raw.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		cycle(t, b) // FCALL, not found: EVALSHA, NOSCRIPT: EVAL
		if n := calls(t, raw, "eval"); n < 1 {
			t.Fatalf("after FUNCTION FLUSH: %d EVALs, want the steps resent", n)
		}
		// The library comes back after the reload period (5s).
		end := time.Now().Add(Deadline)
		for !loaded(t, raw) || !fcall() {
			if time.Now().After(end) {
				t.Fatalf("the library is not back after %v (FCALL %v)", Deadline, fcall())
			}
			time.Sleep(20 * time.Millisecond) // the poll's period
			cycle(t, b)
		}
		n := calls(t, raw, "fcall")
		cycle(t, b)
		if got := calls(t, raw, "fcall") - n; got != 2 {
			t.Fatalf("a cycle once the library is back sent %d FCALLs, want 2", got)
		}
	})

	// An ACL user without FCALL, or without FUNCTION LOAD (NOPERM): here
	// the default user, which the Backend logs in as.
	for _, rule := range []string{"-fcall", "-function|load"} {
		t.Run("acl "+rule, func(t *testing.T) {
			raw, addr := server(t)
			if err := raw.Do(ctx, "ACL", "SETUSER", "default", rule).Err(); err != nil {
				t.Fatal(err)
			}
			b, fcall := newBackend(t, addr)
			cycle(t, b)
			cycle(t, b)
			if fcall() || calls(t, raw, "evalsha") < 4 {
				t.Fatalf("FCALL %v, %d EVALSHAs; want EVALSHA for good", fcall(), calls(t, raw, "evalsha"))
			}
			entries, err := raw.ACLLog(ctx, 10).Result()
			if err != nil || len(entries) != 1 || entries[0].Count != 1 {
				t.Fatalf("ACL LOG = %+v, %v; want the one refusal, once", entries, err)
			}
		})
	}

	t.Run("fcall refused", func(t *testing.T) {
		raw, addr := server(t, "--rename-command", "FCALL", "")
		b, fcall := newBackend(t, addr)
		cycle(t, b)
		cycle(t, b)
		if fcall() || calls(t, raw, "evalsha") < 4 {
			t.Fatalf("FCALL %v, %d EVALSHAs; want EVALSHA for good", fcall(), calls(t, raw, "evalsha"))
		}
	})

	t.Run("load refused", func(t *testing.T) {
		raw, addr := server(t, "--rename-command", "FUNCTION", "")
		b, fcall := newBackend(t, addr)
		cycle(t, b)
		cycle(t, b)
		if fcall() || calls(t, raw, "evalsha") < 4 {
			t.Fatalf("FCALL %v, %d EVALSHAs; want EVALSHA for good", fcall(), calls(t, raw, "evalsha"))
		}
	})
}
