package scripts

import (
	"context"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
)

// TestLibraryLoads loads Lib on a server of its own: it registers one
// function per script, and a second FUNCTION LOAD says that it exists.
func TestLibraryLoads(t *testing.T) {
	c := ownClient(t)
	ctx := context.Background()
	name, err := c.FunctionLoad(ctx, Lib.Source).Result()
	if err != nil {
		t.Fatalf("FUNCTION LOAD: %v", err)
	}
	if name != Lib.Name || !strings.HasPrefix(Lib.Name, "lock_") || len(Lib.Name) != len("lock_")+12 {
		t.Fatalf("FUNCTION LOAD = %q, Lib.Name %q: want lock_<12 hex digits>", name, Lib.Name)
	}
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: Lib.Name}).Result()
	if err != nil || len(libs) != 1 {
		t.Fatalf("FUNCTION LIST = %v, %v", libs, err)
	}
	got := map[string]bool{}
	for _, f := range libs[0].Functions {
		got[f.Name] = true
	}
	for _, s := range library {
		if s.Function != Lib.Name+"_"+s.Name || !got[s.Function] {
			t.Errorf("%s: function %q not in the library's %v", s.Name, s.Function, got)
		}
	}
	if len(got) != len(library) {
		t.Errorf("the library has %d functions, want %d", len(got), len(library))
	}
	err = c.FunctionLoad(ctx, Lib.Source).Err()
	if err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("FUNCTION LOAD again = %v, want an \"already exists\" error", err)
	}
}

// TestLibraryNameFollowsFiles changes each Lua file in turn: the library's
// name (and so its functions') changes with any of them.
func TestLibraryNameFollowsFiles(t *testing.T) {
	entries, err := fs.ReadDir(files, "lua")
	if err != nil {
		t.Fatal(err)
	}
	base := fstest.MapFS{}
	for _, e := range entries {
		b, err := fs.ReadFile(files, "lua/"+e.Name())
		if err != nil {
			t.Fatal(err)
		}
		base["lua/"+e.Name()] = &fstest.MapFile{Data: b}
	}
	build := func(fsys fs.FS) Library {
		copies := make([]*Script, len(library))
		for i, s := range library {
			c := *s
			copies[i] = &c
		}
		return newLibrary(fsys, copies)
	}
	if l := build(base); l.Name != Lib.Name || l.Source != Lib.Source {
		t.Fatalf("the library of the same files is %s, want %s", l.Name, Lib.Name)
	}
	used := 0
	for _, e := range entries {
		changed := fstest.MapFS{}
		for k, v := range base {
			changed[k] = v
		}
		// A comment changes the text, not the logic.
		data := append([]byte("-- changed\n"), base["lua/"+e.Name()].Data...)
		changed["lua/"+e.Name()] = &fstest.MapFile{Data: data}
		l := build(changed)
		if l.Source == Lib.Source {
			// Every file is in the library: a change must show.
			t.Errorf("%s: changing it leaves the library as it is", e.Name())
			continue
		}
		used++
		if l.Name == Lib.Name {
			t.Errorf("%s: changing it keeps the library's name %s", e.Name(), Lib.Name)
		}
	}
	if used != len(entries) {
		t.Errorf("%d of %d files make up the library", used, len(entries))
	}
}

// TestLibraryTopLevel: hoist keeps constants at the library's top level
// and sets computed and assigned locals on every call; it refuses a
// statement that would run at FUNCTION LOAD.
func TestLibraryTopLevel(t *testing.T) {
	all := strings.Split(read(files, "lib")+"\n  fences = {}", "\n")
	code, set := hoist(all, "x", strings.Join([]string{
		"local A = 5",
		"local B = 'text' -- comment",
		"local C = tonumber('7')",
		"local fences = false",
		"local function f()",
		"  fences = {}",
		"end",
	}, "\n"))
	if !strings.Contains(code, "local A = 5\n") || !strings.Contains(code, "local B = 'text'") ||
		!strings.Contains(code, "\nlocal C\n") || !strings.Contains(code, "\nlocal fences\n") {
		t.Errorf("top level:\n%s", code)
	}
	if strings.Join(set, "; ") != "C = tonumber('7'); fences = false" {
		t.Errorf("per call: %q", set)
	}
	for _, bad := range []string{"redis.call('TIME')", "local x = f(\n  1)", "x = 1", "local a, b = 1, 2"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%q: no panic", bad)
				}
			}()
			hoist(all, "x", bad)
		}()
	}
}

// TestFunctionsRunTheScenarios runs the package's scenario tests again with
// every script sent as FCALL of its function in Lib (viaFCall).
func TestFunctionsRunTheScenarios(t *testing.T) {
	viaFCall = true
	t.Cleanup(func() { viaFCall = false })
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"AcquireManyMatchesAcquire", TestAcquireManyMatchesAcquire},
		{"AcquireManyValidates", TestAcquireManyValidates},
		{"AcquireManyBatchChecks", TestAcquireManyBatchChecks},
		{"GroupAndScatterHeartbeats", TestGroupAndScatterHeartbeats},
		{"WakeGoesToTheInbox", TestWakeGoesToTheInbox},
		{"InspectScript", TestInspectScript},
		{"ForceReleaseScript", TestForceReleaseScript},
		{"SlotKeysTTL", TestSlotKeysTTL},
		{"EnqueueBehindHeldLock", TestEnqueueBehindHeldLock},
		{"FullQueueSweep", TestFullQueueSweep},
		{"ReleaseResentAfterOthers", TestReleaseResentAfterOthers},
		{"ReleaseRecordsArePerID", TestReleaseRecordsArePerID},
		{"ScriptsValidateArgv", TestScriptsValidateArgv},
		{"ShardedWakeUp", TestShardedWakeUp},
		{"WaiterRecordFollowsTheQueue", TestWaiterRecordFollowsTheQueue},
		{"HeadChangeWhileHeldTellsNewHead", TestHeadChangeWhileHeldTellsNewHead},
		{"ReleaseHandsOff", TestReleaseHandsOff},
		{"SharedSteps", TestSharedSteps},
		{"SharedOnMutex", TestSharedOnMutex},
		{"SharedKeysExpireAndReleaseResent", TestSharedKeysExpireAndReleaseResent},
		{"HeartbeatSweepsBehindLiveWaiter", TestHeartbeatSweepsBehindLiveWaiter},
		{"KeepNoStateBetweenCalls", testNoStateBetweenCalls},
	} {
		t.Run(tc.name, tc.f)
	}
}

// testNoStateBetweenCalls: acquire_many keeps the fences of its call in a
// table (fences); the next call must write its fence key as a script
// does, not keep the fence in the last call's table.
func testNoStateBetweenCalls(t *testing.T) {
	o := newOps(t, "id")
	ctx := context.Background()
	cs := NewConsts(100, 100, Classic)
	out := runAcquireMany(t, o.c, cs, o.ks, []backend.AcquireRequest{{ID: "id", Token: "A", TTL: time.Minute}}, false, 0)
	if !out[0].Acquired {
		t.Fatalf("acquire_many: %+v", out[0])
	}
	rk, ra := o.releaseCall(cs, "A")
	run(t, o.c, Release, rk, ra)
	g := o.acquireTTL("B", time.Minute, false)
	if v, _ := o.c.Get(ctx, o.k.Fence).Uint64(); !g.Acquired || v != g.Fence {
		t.Fatalf("after acquire_many, acquire granted %+v and left the fence key at %d, want its fence", g, v)
	}
}

// TestLibraryNoShadowing: no script's own top-level local has the name of
// a local of the library's top level (lib.lua and the shared parts). In a
// script, the helpers past lib.lua's "[slow path]" line come after the
// script's fast path, and would shadow such a local there; in the
// library they come first, and the script's local would shadow them.
func TestLibraryNoShadowing(t *testing.T) {
	decl := regexp.MustCompile(`(?m)^local (?:function )?([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)`)
	names := func(src string) []string {
		var out []string
		for _, m := range decl.FindAllStringSubmatch(src, -1) {
			for _, n := range strings.Split(m[1], ",") {
				out = append(out, strings.TrimSpace(n))
			}
		}
		return out
	}
	top := map[string]string{}
	parts := []string{"lib", "shared", "acquire_step"}
	for _, f := range parts {
		for _, n := range names(read(files, f)) {
			top[n] = f
		}
	}
	if top["fail"] != "lib" || top["try_fast"] != "acquire_step" {
		t.Fatalf("top-level names %v: the test no longer reads them", top)
	}
	for _, s := range library {
		for _, p := range s.parts {
			if !slices.Contains(parts, p) {
				t.Fatalf("%s: shared part %s: add it to the test", s.Name, p)
			}
		}
		for _, n := range names(read(files, s.Name)) {
			if f, ok := top[n]; ok {
				t.Errorf("lua/%s.lua declares %s, a top-level local of lua/%s.lua", s.Name, n, f)
			}
		}
	}
}
