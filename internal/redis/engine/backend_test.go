package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

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

// newTestBackend returns the Runner of cfg's steps on s, as an adapter
// builds it.
func newTestBackend(cfg Config, s Sender, cluster, resendBroken bool) *Runner {
	return NewRunner(New(cfg, cluster), s, nil, resendBroken)
}

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
