package testkit

import (
	"reflect"
	"sync"
	"testing"
)

// A Recorder keeps each callback's values in order, under its name, from
// concurrent callers; Got is a copy the recorder does not change later.
func TestRecorder(t *testing.T) {
	var r Recorder[int]
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		fn := r.Fn(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				fn(i)
			}
		}()
	}
	wg.Wait()
	got := r.Got()
	want := make([]int, 100)
	for i := range want {
		want[i] = i
	}
	if !reflect.DeepEqual(got["a"], want) || !reflect.DeepEqual(got["b"], want) || len(got) != 2 {
		t.Fatalf("Got = %v, want 0..99 under a and b", got)
	}
	r.Fn("a")(100)
	if len(got["a"]) != 100 {
		t.Fatal("Got's copy changed after a later record")
	}
}
