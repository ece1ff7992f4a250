package engine

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// Via is how a call is sent.
type Via int

const (
	// EvalSHA sends the call as EVALSHA of Script.SHA1.
	EvalSHA Via = iota
	// Eval sends the call as EVAL of Script.Source (after a NOSCRIPT).
	Eval
	// FCall sends the call as FCALL of Script.Function, a function of
	// scripts.Lib, once a Loader loaded it (Redis 7 or newer).
	FCall
)

// Loader is what a Sender offers, in addition, when its client can load a
// function library: then the Runner loads scripts.Lib and sends the calls
// as FCALL, falling back to EVALSHA where that fails (see functions).
type Loader interface {
	// LoadLibrary sends FUNCTION LOAD of src to the server; on Redis
	// Cluster to every master, each through the client's connection to
	// it. It returns the failures (error replies included), one per node
	// that did not reply OK; none when every node did.
	LoadLibrary(ctx context.Context, src string) []error
}

// functionsRetry is how long after a load of the library the next one may
// be tried: after a failed round trip or an OOM reply, or after a call
// found the library gone (FUNCTION FLUSH, a restart without persistence,
// a new master).
const functionsRetry = 5 * time.Second

// functions is a Runner's use of scripts.Lib: whether its calls go as
// FCALL, and when to load the library.
type functions struct {
	load  Loader        // nil: the Sender cannot load libraries, every call is EVALSHA
	retry time.Duration // functionsRetry; tests shorten it
	state atomic.Int32  // fn*
	mu    sync.Mutex    // serializes the changes of state around a load
	next  time.Time     // the earliest next load, under mu
}

// The states of functions.
const (
	fnUnknown int32 = iota // not loaded: EVALSHA; a load is due at next
	fnLoading              // a load is under way: EVALSHA meanwhile
	fnOn                   // loaded: FCALL
	fnOff                  // the server or the user refused: EVALSHA for good
)

// via returns how calls go now: FCALL once the library is loaded and when
// every call has its function, else EVALSHA.
func (r *Runner) via(calls ...Call) Via {
	if r.fn.state.Load() != fnOn {
		return EvalSHA
	}
	for i := range calls {
		if calls[i].Script.Function == "" {
			return EvalSHA
		}
	}
	return FCall
}

// loadFunctions loads scripts.Lib when the Sender can and a load is due:
// before the first step, and at most every retry while it is not loaded
// (see functions.loaded). The steps that come meanwhile do not wait: they
// go as EVALSHA.
func (r *Runner) loadFunctions(ctx context.Context) {
	f := &r.fn
	if f.load == nil || f.state.Load() != fnUnknown {
		return
	}
	f.mu.Lock()
	if f.state.Load() != fnUnknown || time.Now().Before(f.next) {
		f.mu.Unlock()
		return
	}
	f.state.Store(fnLoading)
	f.mu.Unlock()
	state := r.loaded(f.load.LoadLibrary(ctx, scripts.Lib.Source))
	f.mu.Lock()
	f.next = time.Now().Add(f.retry)
	f.state.CompareAndSwap(fnLoading, state) // unless a call turned FCALL off meanwhile
	f.mu.Unlock()
}

// loaded returns the state after a load that failed with errs on some
// nodes: on when none did, or only with "already exists" (the library's
// name is the digest of its code, so it is this one); off for good when a
// node refused it (NOPERM from an ACL user without FUNCTION LOAD, an
// unknown command before Redis 7, an error in the library); unknown, to
// load again after retry, when a round trip failed or a node was out of
// memory (OOM).
func (r *Runner) loaded(errs []error) int32 {
	state := fnOn
	for _, err := range errs {
		if err == nil {
			continue
		}
		k, _ := r.s.Classify(err)
		switch {
		case k != backend.KindAnswer, strings.HasPrefix(err.Error(), "OOM"):
			state = fnUnknown
		case strings.Contains(err.Error(), "already exists"):
		default:
			return fnOff
		}
	}
	return state
}

// fcallRefused reports whether err, the reply of an FCALL, refused to run
// it: the call did not run, and is sent again at once as EVALSHA. FCALL
// itself refused (NOPERM for an ACL user without it, an unknown command)
// turns FCALL off for good; a function not found (FUNCTION FLUSH, a
// restart without persistence, a new master) makes the library load again
// before a later step, at most every retry after the last load; OOM (a
// function without the allow-oom flag is refused whole on a server out of
// memory, where a script runs until its first write that needs memory)
// leaves FCALL on.
func (r *Runner) fcallRefused(err error) bool {
	if err == nil {
		return false
	}
	if k, ref := r.s.Classify(err); k != backend.KindAnswer || ref != NotRefused {
		return false
	}
	msg := strings.TrimPrefix(err.Error(), "ERR ") // rueidis leaves "ERR " out
	switch {
	case strings.HasPrefix(msg, "Function not found"):
		r.fn.state.CompareAndSwap(fnOn, fnUnknown)
		return true
	case (strings.HasPrefix(msg, "NOPERM") || strings.HasPrefix(msg, "unknown command")) &&
		strings.Contains(strings.ToLower(msg), "fcall"):
		r.fn.state.Store(fnOff)
		return true
	case strings.HasPrefix(msg, "OOM ") && !strings.Contains(msg, "script:"):
		return true
	}
	return false
}

// Functions reports whether the Runner sends its calls as FCALL now.
func (r *Runner) Functions() bool { return r.fn.state.Load() == fnOn }

// String returns the command v sends: "EVALSHA", "EVAL" or "FCALL".
func (v Via) String() string {
	switch v {
	case Eval:
		return "EVAL"
	case FCall:
		return "FCALL"
	}
	return "EVALSHA"
}
