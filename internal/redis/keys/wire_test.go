package keys

import (
	"errors"
	"strings"
	"testing"
)

// The wire marker is "<prefix>wire": no id's key and no inbox, never
// parsed as an id's key, without a hash tag (the slot of its whole name,
// the same for every process of the prefix), and under the prefix's SCAN
// pattern, so that a deployment's key ACLs for the prefix cover it.
func TestWireMarker(t *testing.T) {
	k, err := New("app:locks:")
	if err != nil {
		t.Fatal(err)
	}
	w := k.Wire()
	if w != "app:locks:wire" {
		t.Fatalf("Wire() = %q, want app:locks:wire", w)
	}
	if _, _, err := k.Parse(w); !errors.Is(err, ErrNotInKeyspace) {
		t.Fatalf("Parse(%q) = %v, want ErrNotInKeyspace: the marker is no id's key", w, err)
	}
	if strings.HasPrefix(w, k.Prefix()+SuffixInbox) {
		t.Fatalf("the marker %q looks like an inbox", w)
	}
	if hashTag(w) != w || Slot(w) != Slot("app:locks:wire") {
		t.Fatalf("the marker %q has a hash tag %q", w, hashTag(w))
	}
	if !strings.HasPrefix(w, k.Prefix()) {
		t.Fatalf("the marker %q is not under the prefix %q", w, k.Prefix())
	}
	if WireVersion < 1 || WireRefresh*3 > WireTTL {
		t.Fatalf("WireVersion %d, WireRefresh %v, WireTTL %v: want a version from 1 and a TTL of 3 refresh periods or more",
			WireVersion, WireRefresh, WireTTL)
	}
}
