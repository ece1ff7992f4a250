package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// testBackend chains the steps the tests run as the adapters do: the
// Engine's call, the Runner's send with a fake Sender, the Engine's parse.
type testBackend struct {
	e   *Engine
	run *Runner
}

// testConfig returns the Config of the default options.
func testConfig(t testing.TB) Config {
	t.Helper()
	ks, err := ParsePrefix("")
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ParseLimits(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return Config{Adapter: "test", Keys: ks, Limits: lim, Process: NewProcess()}
}

func newTestBackend(cfg Config, s Sender, cluster, resendBroken bool) *testBackend {
	e := New(cfg, cluster)
	return &testBackend{e: e, run: NewRunner(e, s, nil, resendBroken)}
}

func (b *testBackend) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	r, err := b.run.Send(ctx, b.e.ExtendCall(backend.ExtendRequest{ID: id, Token: token, TTL: ttl}))
	if err != nil {
		return err
	}
	return b.e.ExtendReply(r)
}

func (b *testBackend) Release(ctx context.Context, id, token string) error {
	r, err := b.run.Send(ctx, b.e.ReleaseCall(id, token))
	if err != nil {
		return err
	}
	return b.e.ReleaseReply(r)
}

func (b *testBackend) ForceRelease(ctx context.Context, id string, fence uint64) error {
	c, err := b.e.ForceReleaseCall(id, fence)
	if err != nil {
		return err
	}
	r, err := b.run.Send(ctx, c)
	if err != nil {
		return err
	}
	return b.e.ForceReleaseReply(r)
}

func (b *testBackend) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	batch := b.e.AcquireBatchCalls(reqs)
	rs, err := b.run.SendAll(ctx, batch.Calls)
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	return b.e.AcquireBatchReply(batch, rs)
}

// Each option's check names the option in an *backend.ArgumentError and
// fills in its default.
func TestParseOptions(t *testing.T) {
	isArg := func(err error, arg string) bool {
		var ae *backend.ArgumentError
		return errors.As(err, &ae) && ae.Arg == arg && errors.Is(err, backend.ErrInvalidArgument)
	}
	if _, err := ParsePrefix("a{"); !isArg(err, "opts.Prefix") {
		t.Errorf("ParsePrefix(a{) = %v", err)
	}
	if ks, err := ParsePrefix(""); err != nil || ks.Prefix() != "lock:" {
		t.Errorf("ParsePrefix() = %q, %v; want lock:", ks.Prefix(), err)
	}
	for _, tc := range []struct {
		max, purge int
		arg        string
	}{{-1, 0, "opts.MaxWaiters"}, {0, -1, "opts.PurgeLimit"}, {0, 100001, "opts.PurgeLimit"}} {
		if _, err := ParseLimits(tc.max, tc.purge); !isArg(err, tc.arg) {
			t.Errorf("ParseLimits(%d, %d) = %v, want an ArgumentError for %s", tc.max, tc.purge, err, tc.arg)
		}
	}
	if l, err := ParseLimits(0, 0); err != nil || l != (Limits{DefaultMaxWaiters, DefaultPurgeLimit}) {
		t.Errorf("ParseLimits(0, 0) = %+v, %v; want the defaults", l, err)
	}
	for _, tc := range []struct {
		n   int
		d   time.Duration
		arg string
	}{{-1, 0, "opts.WaitReplicas"}, {0, -1, "opts.WaitTimeout"}, {1, time.Microsecond, "opts.WaitTimeout"}} {
		if _, err := ParseWait(tc.n, tc.d); !isArg(err, tc.arg) {
			t.Errorf("ParseWait(%d, %v) = %v, want an ArgumentError for %s", tc.n, tc.d, err, tc.arg)
		}
	}
	if w, err := ParseWait(0, time.Second); err != nil || w != (Wait{}) {
		t.Errorf("ParseWait(0, 1s) = %+v, %v; want no WAIT", w, err)
	}
	if w, err := ParseWait(2, 0); err != nil || w != (Wait{2, DefaultWaitTimeout}) {
		t.Errorf("ParseWait(2, 0) = %+v, %v; want the default timeout", w, err)
	}
}
