package testkit

import (
	"slices"
	"sync"
)

// Recorder records the values that callbacks receive, per callback name.
// It is safe for concurrent use.
type Recorder[T any] struct {
	mu  sync.Mutex
	got map[string][]T
}

// Fn returns a callback that records each value it gets under name.
func (r *Recorder[T]) Fn(name string) func(T) {
	return func(v T) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.got == nil {
			r.got = map[string][]T{}
		}
		r.got[name] = append(r.got[name], v)
	}
}

// Got returns a copy of what was recorded so far, by name. Names that
// recorded nothing are absent.
func (r *Recorder[T]) Got() map[string][]T {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]T, len(r.got))
	for name, vs := range r.got {
		out[name] = slices.Clone(vs)
	}
	return out
}
