package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/testkit"
	"github.com/redislocker/lock/memorybackend"
)

func TestLockerInspect(t *testing.T) {
	ctx := context.Background()
	l := mustLocker(testkit.Must(memorybackend.New(nil)), &lock.Options{Logger: quietLogger()})
	res, err := l.Acquire(ctx, "i", time.Minute, nil)
	if err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	in, err := l.Inspect(ctx, "i")
	if err != nil || !in.Held || in.ID != "i" || in.Fence != res.Lease.Fence() || in.Holder != backend.Fingerprint(res.Lease.Token()) {
		t.Fatalf("Inspect: %+v, %v", in, err)
	}
	if strings.Contains(in.Holder, res.Lease.Token()) || len(in.Holder) != 8 {
		t.Fatalf("Holder %q is not a short fingerprint", in.Holder)
	}
	var nilCtx context.Context
	for _, c := range []struct {
		what, arg string
		err       error
	}{
		{"empty id", "id", func() error { _, err := l.Inspect(ctx, ""); return err }()},
		{"long id", "id", func() error { _, err := l.Inspect(ctx, strings.Repeat("x", backend.MaxIDLength+1)); return err }()},
		{"nil ctx", "ctx", func() error { _, err := l.Inspect(nilCtx, "i"); return err }()},
	} {
		var ae *backend.ArgumentError
		if !errors.As(c.err, &ae) || ae.Arg != c.arg {
			t.Errorf("%s: %v, want an *ArgumentError naming %s", c.what, c.err, c.arg)
		}
	}
	_ = l.Close()
	if _, err := l.Inspect(ctx, "i"); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}

	// A backend that is not an Inspector.
	u := mustLocker(batchless{testkit.Must(memorybackend.New(nil))}, &lock.Options{Logger: quietLogger()})
	defer u.Close()
	_, err = u.Inspect(ctx, "i")
	if !errors.Is(err, lock.ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) || errors.Is(err, lock.ErrBackend) {
		t.Fatalf("no Inspector: %v, want ErrUnsupported (and errors.ErrUnsupported), not ErrBackend", err)
	}
}
