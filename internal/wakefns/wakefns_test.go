package wakefns

import (
	"testing"

	"github.com/redislocker/lock/backend"
)

// Callbacks are delivered in order, removed by key, and a snapshot taken
// before a change is not affected by it.
func TestListCopyOnWrite(t *testing.T) {
	var l List
	var got []string
	a := l.Add(func(backend.Wake) { got = append(got, "a") })
	l.Add(func(backend.Wake) { got = append(got, "b") })
	before := l.Snapshot()
	l.Add(func(backend.Wake) { got = append(got, "c") })
	if left := l.Remove(a); left != 2 || l.Len() != 2 {
		t.Fatalf("Remove left %d (Len %d), want 2", left, l.Len())
	}
	before.Deliver(backend.Wake{})
	l.Snapshot().Deliver(backend.Wake{})
	if want := "a b b c"; join(got) != want {
		t.Fatalf("delivered %q, want %q (an old snapshot keeps its callbacks)", join(got), want)
	}
	if l.Remove(12345) != 2 {
		t.Fatal("removing an unknown key changed the list")
	}
}

func join(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}
