package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// loaderClient is a fakeClient that loads the library: each load takes
// the next of loads (nil: OK) and is counted.
type loaderClient struct {
	*fakeClient
	loads  [][]error
	loaded int
}

func (l *loaderClient) LoadLibrary(_ context.Context, src string) []error {
	if src != scripts.Lib.Source {
		panic("LoadLibrary: not scripts.Lib")
	}
	l.loaded++
	if len(l.loads) == 0 {
		return nil
	}
	errs := l.loads[0]
	l.loads = l.loads[1:]
	return errs
}

// newLoader returns a Runner over a loaderClient whose steps get replies
// and whose loads get loads, with retry between loads.
func newLoader(t *testing.T, retry time.Duration, loads [][]error, replies ...Reply) (*Runner, *loaderClient) {
	t.Helper()
	l := &loaderClient{fakeClient: &fakeClient{replies: replies}, loads: loads}
	r := newTestBackend(testConfig(t), l, false, false)
	r.fn.retry = retry
	return r, l
}

func extendOK(t *testing.T, r *Runner) {
	t.Helper()
	if err := r.Extend(context.Background(), "x", "T", time.Second); err != nil {
		t.Fatalf("extend: %v", err)
	}
}

func wantSent(t *testing.T, l *loaderClient, want ...Via) {
	t.Helper()
	if !slices.Equal(l.sent, want) {
		t.Fatalf("sent (via) %v, want %v", l.sent, want)
	}
	l.sent = nil
}

// A Sender that is a Loader gets the library loaded before the first
// step, and every step as FCALL; one that is not gets EVALSHA.
func TestFunctionsLoadedBeforeTheFirstStep(t *testing.T) {
	r, l := newLoader(t, time.Hour, nil, Reply{}, Reply{})
	extendOK(t, r)
	extendOK(t, r)
	wantSent(t, l, FCall, FCall)
	if l.loaded != 1 || !r.Functions() {
		t.Fatalf("%d loads, Functions %v; want 1, true", l.loaded, r.Functions())
	}
	plain, f := newFake(t, false, Reply{})
	if err := plain.Extend(context.Background(), "x", "T", time.Second); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.sent, []Via{EvalSHA}) || plain.Functions() {
		t.Fatalf("without a Loader: sent %v, Functions %v; want EVALSHA", f.sent, plain.Functions())
	}
}

// "already exists" is a loaded library: its name is its code's digest.
func TestFunctionsAlreadyExists(t *testing.T) {
	r, l := newLoader(t, time.Hour, [][]error{{errors.New("ERR Library 'lock_x' already exists")}}, Reply{})
	extendOK(t, r)
	wantSent(t, l, FCall)
}

// A refused FUNCTION LOAD (an ACL user without it, a server before Redis
// 7, any error reply) is EVALSHA for good; a failed round trip or OOM is
// tried again after the retry time, not before.
func TestFunctionsLoadRefused(t *testing.T) {
	for _, refusal := range []string{
		"NOPERM this user has no permissions to run the 'function|load' command",
		"ERR unknown command 'FUNCTION', with args beginning with: 'LOAD'",
		"ERR Error registering functions: whatever",
	} {
		r, l := newLoader(t, 0, [][]error{{nil, errors.New(refusal)}}, Reply{}, Reply{})
		extendOK(t, r)
		extendOK(t, r)
		wantSent(t, l, EvalSHA, EvalSHA)
		if l.loaded != 1 {
			t.Fatalf("%s: %d loads, want 1: EVALSHA for good", refusal, l.loaded)
		}
	}
	for _, failure := range []error{errReset, errors.New("OOM command not allowed when used memory > 'maxmemory'.")} {
		r, l := newLoader(t, time.Hour, [][]error{{failure}}, Reply{}, Reply{}, Reply{})
		extendOK(t, r)
		extendOK(t, r)
		wantSent(t, l, EvalSHA, EvalSHA)
		if l.loaded != 1 {
			t.Fatalf("%v: %d loads within the retry time, want 1", failure, l.loaded)
		}
		r.fn.mu.Lock()
		r.fn.next = time.Now() // the retry time is up
		r.fn.mu.Unlock()
		extendOK(t, r)
		wantSent(t, l, FCall)
		if l.loaded != 2 {
			t.Fatalf("%v: %d loads after the retry time, want 2", failure, l.loaded)
		}
	}
}

// An FCALL that the server refuses as a command (NOPERM, unknown) is sent
// again at once as EVALSHA, and every later call goes as EVALSHA.
func TestFunctionsFCallRefused(t *testing.T) {
	for _, refusal := range []string{
		"NOPERM this user has no permissions to run the 'fcall' command",
		"ERR unknown command 'FCALL', with args beginning with: 'lock_x_extend'",
		"unknown command 'FCALL', with args beginning with: 'lock_x_extend'", // rueidis
	} {
		r, l := newLoader(t, 0, nil, Reply{Err: errors.New(refusal)}, Reply{}, Reply{})
		extendOK(t, r)
		extendOK(t, r)
		wantSent(t, l, FCall, EvalSHA, EvalSHA)
		if r.Functions() || l.loaded != 1 {
			t.Fatalf("%s: Functions %v after %d loads, want EVALSHA for good", refusal, r.Functions(), l.loaded)
		}
	}
	// A NOPERM of a key or a command inside the script is the step's answer.
	r, l := newLoader(t, 0, nil, Reply{Err: errors.New("NOPERM this user has no permissions to access one of the keys used as arguments")})
	if err := r.Extend(context.Background(), "x", "T", time.Second); err == nil {
		t.Fatal("extend: no error")
	}
	wantSent(t, l, FCall)
}

// A function not found (FUNCTION FLUSH, a restart) sends the call again
// at once as EVALSHA (EVAL after NOSCRIPT), and the library loads again at
// most every retry; meanwhile the calls go as EVALSHA.
func TestFunctionsNotFound(t *testing.T) {
	for _, msg := range []string{"ERR Function not found", "Function not found"} { // go-redis, rueidis
		testFunctionsNotFound(t, Reply{Err: errors.New(msg)})
	}
}

func testFunctionsNotFound(t *testing.T, notFound Reply) {
	r, l := newLoader(t, time.Hour, nil, notFound, Reply{Err: errNoScript}, Reply{}, Reply{})
	extendOK(t, r)
	extendOK(t, r)
	wantSent(t, l, FCall, EvalSHA, Eval, EvalSHA)
	if l.loaded != 1 {
		t.Fatalf("%d loads within the retry time, want 1", l.loaded)
	}
	r.fn.mu.Lock()
	r.fn.next = time.Now()
	r.fn.mu.Unlock()
	l.replies = []Reply{{}}
	extendOK(t, r)
	wantSent(t, l, FCall)
	if l.loaded != 2 {
		t.Fatalf("%d loads after the retry time, want 2", l.loaded)
	}
}

// OOM refuses an FCALL whole (a function without allow-oom): it goes
// again as EVALSHA, which runs until a write that needs memory, as
// without functions; FCALL stays on.
func TestFunctionsOOM(t *testing.T) {
	oom := Reply{Err: errors.New("OOM command not allowed when used memory > 'maxmemory'.")}
	r, l := newLoader(t, time.Hour, nil, oom, Reply{}, Reply{})
	extendOK(t, r)
	extendOK(t, r)
	wantSent(t, l, FCall, EvalSHA, FCall)
}

// A batch round trip resends only the refused calls, as EVALSHA, then the
// unknown scripts among them as EVAL.
func TestFunctionsBatchRounds(t *testing.T) {
	notFound := Reply{Err: errors.New("ERR Function not found")}
	r, l := newLoader(t, time.Hour, nil, Reply{}, notFound, notFound, Reply{}, Reply{Err: errNoScript}, Reply{})
	reqs := []backend.ExtendRequest{{ID: "a", Token: "T", TTL: time.Second}, {ID: "b", Token: "T", TTL: time.Second}, {ID: "c", Token: "T", TTL: time.Second}}
	errs, err := r.ExtendBatch(context.Background(), reqs)
	if err != nil || errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("ExtendBatch = %v, %v", errs, err)
	}
	wantSent(t, l, FCall, FCall, FCall, EvalSHA, EvalSHA, Eval)
}
