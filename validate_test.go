package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/memorybackend"
)

// coarse is a backend with a 1 s resolution, so the minimum WaiterTimeout
// is 10 s.
type coarse struct{ backend.Backend }

func (coarse) Resolution() time.Duration { return time.Second }

// New refuses bad options with an *ArgumentError naming the field, and
// makes no Locker.
func TestNewValidatesOptions(t *testing.T) {
	mb, err := memorybackend.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		b     backend.Backend
		o     *lock.Options
		field string
	}{
		{nil, nil, "b"},
		{mb, &lock.Options{QueueTimeout: -time.Second}, "opts.QueueTimeout"},
		{mb, &lock.Options{BatchTick: -time.Millisecond}, "opts.BatchTick"},
		{mb, &lock.Options{WaiterTimeout: -time.Second}, "opts.WaiterTimeout"},
		{mb, &lock.Options{WaiterTimeout: time.Millisecond}, "opts.WaiterTimeout"},
		{mb, &lock.Options{WaiterTimeout: (100 * time.Millisecond) - 1}, "opts.WaiterTimeout"},
		{coarse{mb}, &lock.Options{WaiterTimeout: 5 * time.Second}, "opts.WaiterTimeout"},
	} {
		l, err := lock.New(c.b, c.o)
		var ae *backend.ArgumentError
		if l != nil || !errors.Is(err, lock.ErrInvalidArgument) || !errors.As(err, &ae) || ae.Arg != c.field {
			t.Errorf("New(%v, %+v) = (%v, %v); want no Locker and an *ArgumentError naming %s", c.b, c.o, l, err, c.field)
		}
	}
	for _, o := range []*lock.Options{nil, {}, {WaiterTimeout: (100 * time.Millisecond)}} {
		l, err := lock.New(mb, o)
		if err != nil {
			t.Errorf("New(%+v) = %v; want a Locker", o, err)
			continue
		}
		_ = l.Close()
	}
}

// Acquire and Do refuse a negative QueueTimeout and an ExtendEvery
// outside [0, ttl) before any I/O.
func TestAcquireOptionsValidated(t *testing.T) {
	b, _ := memorybackend.New(nil)
	l := newLocker(t, b, nil)
	ctx := context.Background()
	for _, c := range []struct {
		o     lock.AcquireOptions
		field string
	}{
		{lock.AcquireOptions{QueueTimeout: -1}, "opts.QueueTimeout"},
		{lock.AcquireOptions{ExtendEvery: -1, KeepAlive: true}, "opts.ExtendEvery"},
		{lock.AcquireOptions{ExtendEvery: time.Second, KeepAlive: true}, "opts.ExtendEvery"},
		{lock.AcquireOptions{Token: strings.Repeat("t", backend.MaxTokenLength+1)}, "opts.Token"},
	} {
		_, err := l.Acquire(ctx, "x", time.Second, &c.o)
		var ae *backend.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != c.field {
			t.Errorf("Acquire(%+v) = %v; want an *ArgumentError naming %s", c.o, err, c.field)
		}
		_, err = lock.Do(ctx, l, "x", time.Second, func(context.Context, *lock.Lease) (int, error) { return 0, nil }, &c.o)
		if !errors.As(err, &ae) || ae.Arg != c.field {
			t.Errorf("Do(%+v) = %v; want an *ArgumentError naming %s", c.o, err, c.field)
		}
	}
}

// memorybackend's constructors refuse negative options, naming the field.
func TestMemorybackendValidatesOptions(t *testing.T) {
	for _, c := range []struct {
		o     memorybackend.Options
		field string
	}{
		{memorybackend.Options{MaxWaiters: -1}, "opts.MaxWaiters"},
		{memorybackend.Options{PurgeLimit: -1}, "opts.PurgeLimit"},
	} {
		s, err := memorybackend.NewStore(&c.o)
		var ae *backend.ArgumentError
		if s != nil || !errors.As(err, &ae) || ae.Arg != c.field || !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("NewStore(%+v) = (%v, %v); want an *ArgumentError naming %s", c.o, s, err, c.field)
		}
		if b, err := memorybackend.New(&c.o); b != nil || !errors.As(err, &ae) {
			t.Errorf("New(%+v) = (%v, %v); want an *ArgumentError", c.o, b, err)
		}
	}
}
