package lock

import (
	"reflect"
	"testing"

	"github.com/redislocker/lock/internal/testenv/testkit"
	"github.com/redislocker/lock/memorybackend"
)

// TestObservedBackendForwardsEveryCapability checks that the wrapper an
// Observer puts around the backend keeps every optional capability that
// package backend declares: the core would not find one it drops.
func TestObservedBackendForwardsEveryCapability(t *testing.T) {
	testkit.Forwards(t, reflect.TypeFor[*observedBackend](), "backend")
}

// TestNoObserverNoWrapper checks that a Locker without an Observer uses
// its backend as given: no wrapper, no event, no clock read per step.
func TestNoObserverNoWrapper(t *testing.T) {
	b, err := memorybackend.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.obs != nil || l.b != b {
		t.Fatalf("without an Observer: obs=%v, backend %T; want nil and the backend itself", l.obs, l.b)
	}
	if !l.obsNow().IsZero() {
		t.Fatal("obsNow read the clock without an Observer")
	}
	b2, err := memorybackend.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	o, err := New(b2, &Options{Observer: observerFunc(func(Event) {})})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, ok := o.b.(*observedBackend); !ok || o.obs == nil {
		t.Fatalf("with an Observer: backend %T, want *observedBackend", o.b)
	}
}

// observerFunc adapts a function to an Observer.
type observerFunc func(Event)

func (f observerFunc) Observe(e Event) { f(e) }
