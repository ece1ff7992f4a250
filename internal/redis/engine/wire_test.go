package engine

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// extend runs one Extend of s, the step these tests send.
func extend(s *Runner) error { return s.Extend(context.Background(), "x", "T", time.Second) }

// The wire check runs before a Backend's first step, and again only before
// the first step keys.WireRefresh or more after the last check's send;
// its call names the prefix's marker, the version and keys.WireTTL.
func TestWireCheckOncePerRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, f := newFake(t, false, Reply{}, Reply{}, Reply{}, Reply{}, Reply{})
		var call Call
		f.onWire = func(c Call) { call = c }
		for range 3 {
			if err := extend(s); err != nil {
				t.Fatal(err)
			}
		}
		if f.wires != 1 || len(f.sent) != 3 {
			t.Fatalf("3 steps sent %d wire checks and %d steps, want 1 check and 3 steps", f.wires, len(f.sent))
		}
		wk, wa := scripts.WireCall(s.e.cfg.Keys, keys.WireVersion, keys.WireTTL)
		if len(call.Keys) != 1 || call.Keys[0] != wk[0] || call.Keys[0] != "lock:wire" || len(call.Args) != 2 || call.Args[0] != wa[0] || call.Args[1] != "120000" {
			t.Fatalf("the wire check's call: keys %v, args %v; want [lock:wire], [%d 120000]", call.Keys, call.Args, keys.WireVersion)
		}
		time.Sleep(keys.WireRefresh - time.Millisecond)
		if err := extend(s); err != nil || f.wires != 1 {
			t.Fatalf("a step just before the refresh period ended: %v, %d checks; want no new check", err, f.wires)
		}
		time.Sleep(time.Millisecond)
		if err := extend(s); err != nil || f.wires != 2 {
			t.Fatalf("a step at the end of the refresh period: %v, %d checks; want a second check", err, f.wires)
		}
	})
}

// A marker of another version fails the step, unsent, with the clear
// error, and the step is not sent; every later step checks again until the
// marker holds this version.
func TestWireCheckRefusesAnotherVersion(t *testing.T) {
	s, f := newFake(t, false, Reply{})
	other := strconv.Itoa(keys.WireVersion + 1)
	f.wire = Reply{Err: errors.New("LOCKWIRE " + other)}
	for i := 1; i <= 2; i++ {
		err := extend(s)
		var we *WireError
		if !errors.As(err, &we) || !fallback.Unsent(err) || errors.Is(err, backend.ErrNotHeld) {
			t.Fatalf("step %d = %v (kind %v), want an unsent *WireError", i, err, backend.KindOf(err))
		}
		want := `test: wire protocol version ` + other + ` found under prefix "lock:", this process speaks ` +
			strconv.Itoa(keys.WireVersion) + `: upgrade every process of the prefix together or use another prefix`
		if err.Error() != want {
			t.Fatalf("error %q,\nwant  %q", err, want)
		}
		if f.wires != i || len(f.sent) != 0 {
			t.Fatalf("after %d refused steps: %d checks, %d steps sent; want %d checks and no step", i, f.wires, len(f.sent), i)
		}
	}
	f.wire = Reply{Err: errors.New("LOCKWIRE not a version")}
	if err := extend(s); err == nil || !strings.Contains(err.Error(), `version "not a version" found under prefix "lock:"`) {
		t.Fatalf("a marker holding text: %v, want it quoted in the error", err)
	}
	f.wire = Reply{} // the other processes stopped and the marker expired
	if err := extend(s); err != nil || len(f.sent) != 1 {
		t.Fatalf("the step once the check passes: %v, %d steps sent; want it sent", err, len(f.sent))
	}
}

// A check whose round trip failed fails the step, unsent (the step was not
// sent, whatever the check did), with the client's error; the next step
// checks again. Another error reply of the check is the step's failure
// too. A closed Backend sends no check.
func TestWireCheckFailure(t *testing.T) {
	for _, failure := range []error{errRefused, errReset, errors.New("WRONGTYPE not a string")} {
		s, f := newFake(t, false, Reply{})
		f.wire = Reply{Err: failure}
		err := extend(s)
		var we *WireError
		if !errors.Is(err, failure) || !fallback.Unsent(err) || errors.As(err, &we) || len(f.sent) != 0 {
			t.Fatalf("a check that failed with %v: step = %v (kind %v), %d steps sent; want the failure, unsent, no step",
				failure, err, backend.KindOf(err), len(f.sent))
		}
		f.wire = Reply{}
		if err := extend(s); err != nil || f.wires != 2 || len(f.sent) != 1 {
			t.Fatalf("the next step: %v, %d checks, %d steps; want a second check, then the step", err, f.wires, len(f.sent))
		}
	}
	s, f := newFake(t, false)
	s.Close()
	if err := extend(s); !errors.Is(err, backend.ErrClosed) || f.wires != 0 {
		t.Fatalf("a step of a closed Backend: %v, %d checks; want ErrClosed and none", err, f.wires)
	}
}

// Steps that need a check at the same time share one; a step whose ctx
// ends while it waits for the check fails unsent, and the check goes on
// for the others.
func TestWireCheckShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &gatedClient{gate: make(chan struct{})}
		s := newTestBackend(testConfig(t), c, false, false)
		const n = 8
		errs := make(chan error, n)
		for range n {
			go func() { errs <- extend(s) }()
		}
		synctest.Wait() // one step runs the check, the others wait for it
		ctx, cancel := context.WithCancel(context.Background())
		gaveUp := make(chan error, 1)
		go func() { gaveUp <- s.Extend(ctx, "x", "T", time.Second) }()
		synctest.Wait()
		cancel()
		if err := <-gaveUp; !errors.Is(err, context.Canceled) || !fallback.Unsent(err) {
			t.Fatalf("a step whose ctx ended while it waited: %v, want unsent, context.Canceled", err)
		}
		close(c.gate)
		for range n {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.wires != 1 || c.steps != n {
			t.Fatalf("%d concurrent first steps sent %d checks and %d steps, want 1 check and %d steps", n, c.wires, c.steps, n)
		}
	})
}

// gatedClient answers every call with success; a wire check waits for
// gate to close.
type gatedClient struct {
	gate         chan struct{}
	mu           sync.Mutex
	wires, steps int
}

func (g *gatedClient) Eval(_ context.Context, c Call, _ Via) Reply {
	if c.Script.Name == scripts.Wire.Name {
		<-g.gate
		g.mu.Lock()
		g.wires++
		g.mu.Unlock()
		return Reply{}
	}
	g.mu.Lock()
	g.steps++
	g.mu.Unlock()
	return Reply{}
}

func (g *gatedClient) EvalAll(ctx context.Context, calls []Call, via Via) []Reply {
	out := make([]Reply, len(calls))
	for i, c := range calls {
		out[i] = g.Eval(ctx, c, via)
	}
	return out
}

func (g *gatedClient) Classify(err error) (backend.Kind, Refusal) {
	if err == nil {
		return backend.KindAnswer, NotRefused
	}
	return backend.KindAnswer, NotRefused
}
