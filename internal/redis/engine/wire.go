package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// WireError is the failure of every step of a Backend whose prefix's wire
// marker (keys.SuffixWire) holds another wire protocol version than
// keys.WireVersion: processes of different versions must not share a
// prefix. The step was not sent (backend.KindUnsent); the core wraps the
// error as a backend error, so it matches lock.ErrBackend.
type WireError struct {
	Adapter string // the adapter, e.g. "redisbackend"
	Prefix  string // the key prefix
	Found   string // what the marker holds
	Speaks  int    // keys.WireVersion
}

func (e *WireError) Error() string {
	found := e.Found
	if _, err := strconv.ParseUint(found, 10, 63); err != nil {
		found = strconv.Quote(found)
	}
	return fmt.Sprintf("%s: wire protocol version %s found under prefix %q, this process speaks %d: "+
		"upgrade every process of the prefix together or use another prefix", e.Adapter, found, e.Prefix, e.Speaks)
}

// wireCheck is a Backend's check of its prefix's wire marker: once before
// its first step, and again before a step when the last successful check
// is wireRefresh old or more (see keys.SuffixWire). Steps of one Backend
// that need a check at the same time share one.
type wireCheck struct {
	ttl, refresh time.Duration // keys.WireTTL and keys.WireRefresh; tests shorten them
	epoch        time.Time     // the monotonic origin of passed
	passed       atomic.Int64  // 1 + ns since epoch at the send of the last check that passed; 0: none
	mu           sync.Mutex
	flight       *wireFlight // the check under way; nil when none
}

// wireFlight is one check under way; err is set before done is closed.
type wireFlight struct {
	done chan struct{}
	err  error
}

func newWireCheck() wireCheck {
	return wireCheck{ttl: keys.WireTTL, refresh: keys.WireRefresh, epoch: time.Now()}
}

// fresh reports whether the last check passed less than refresh ago.
func (w *wireCheck) fresh() bool {
	p := w.passed.Load()
	return p != 0 && time.Since(w.epoch)-time.Duration(p-1) < w.refresh
}

// wire makes sure that the prefix's marker holds keys.WireVersion before
// a step is sent: at once when a check passed less than the refresh period
// ago, else after a check (one round trip), shared with the other steps
// that wait for one. Its error is the step's, of kind unsent: a
// *WireError when the marker holds another version, or the failure of the
// check's round trip.
func (r *Runner) wire(ctx context.Context) error {
	w := &r.wireCheck
	for {
		if w.fresh() {
			return nil
		}
		w.mu.Lock()
		if w.fresh() {
			w.mu.Unlock()
			return nil
		}
		if f := w.flight; f != nil {
			w.mu.Unlock()
			select {
			case <-f.done:
				if we := (*WireError)(nil); errors.As(f.err, &we) {
					return backend.WithKind(backend.KindUnsent, f.err) // the store's answer
				}
				continue // passed, or failed for that caller only: look again
			case <-ctx.Done():
				return backend.WithKind(backend.KindUnsent, ctx.Err())
			}
		}
		f := &wireFlight{done: make(chan struct{})}
		w.flight = f
		w.mu.Unlock()
		sent := time.Since(w.epoch)
		f.err = r.checkWire(ctx)
		w.mu.Lock()
		if f.err == nil {
			w.passed.Store(1 + int64(sent))
		}
		w.flight = nil
		w.mu.Unlock()
		close(f.done)
		if f.err != nil {
			return backend.WithKind(backend.KindUnsent, f.err)
		}
		return nil
	}
}

// checkWire runs the wire script once: nil when the marker holds (or now
// holds) keys.WireVersion, with its TTL set again.
func (r *Runner) checkWire(ctx context.Context) error {
	rep, err := r.run(ctx, r.e.wireCall(r.wireCheck.ttl))
	if err != nil {
		return fmt.Errorf("%s: the wire protocol check: %w", r.e.cfg.Adapter, err)
	}
	if r.refusal(rep.Err) != NotRefused {
		return fmt.Errorf("%s: the wire protocol check: %w", r.e.cfg.Adapter, rep.Err)
	}
	return r.e.wireReply(rep)
}

// wireCall is the wire script: the prefix's marker must hold
// keys.WireVersion, and lives ttl after the check.
func (e *Engine) wireCall(ttl time.Duration) Call {
	k, a := scripts.WireCall(e.cfg.Keys, keys.WireVersion, ttl)
	return Call{Script: scripts.Wire, Keys: k, Args: a}
}

// wireReply parses the wire script's reply: nil, a *WireError when the
// marker holds another version, or the error reply.
func (e *Engine) wireReply(r Reply) error {
	if r.Err == nil {
		return nil
	}
	if found, ok := scripts.WireFound(r.Err.Error()); ok {
		return &WireError{Adapter: e.cfg.Adapter, Prefix: e.cfg.Keys.Prefix(), Found: found, Speaks: keys.WireVersion}
	}
	return fmt.Errorf("%s: the wire protocol check: %w", e.cfg.Adapter, r.Err)
}
