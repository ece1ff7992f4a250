package wakeup

import (
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// The payloads are the scripts' wake-up messages on a process's inbox
// (ParseInbox), each a payload (Parse) after the id.

// Parse reads the scripts' payloads, keeps colons inside tokens, and
// takes nothing else for a wake-up.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		payload string
		want    backend.Wake
		ok      bool
	}{
		{":T", backend.Wake{ID: "x", Token: "T"}, true},
		{"1500:T", backend.Wake{ID: "x", Token: "T", HolderTTL: 1500 * time.Millisecond}, true},
		{"1:a:b", backend.Wake{ID: "x", Token: "a:b", HolderTTL: time.Millisecond}, true},
		{"::", backend.Wake{ID: "x", Token: ":"}, true},
		{"T", backend.Wake{}, false},                      // no colon
		{"ab:c", backend.Wake{}, false},                   // not digits before the colon
		{"+5:c", backend.Wake{}, false},                   // not only digits
		{"-5:c", backend.Wake{}, false},                   // not only digits
		{"99999999999999999999:c", backend.Wake{}, false}, // too long a TTL
	} {
		if got, ok := Parse("x", c.payload); ok != c.ok || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, %v", c.payload, got, ok, c.want, c.ok)
		}
	}
}

// ParseInbox reads the id's encoding by its length, decodes it, and hands
// the rest to Parse; anything else is not an inbox message.
func TestParseInbox(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want backend.Wake
		ok   bool
	}{
		{"3:abc:T", backend.Wake{ID: "abc", Token: "T"}, true},
		{"3:abc1500:T", backend.Wake{ID: "abc", Token: "T", HolderTTL: 1500 * time.Millisecond}, true},
		{"5:a%7Bb:x:y", backend.Wake{ID: "a{b", Token: "x:y"}, true}, // encoded id, colons in the token
		{"1:%:T", backend.Wake{ID: "", Token: "T"}, true},            // the empty id's encoding
		{"2:ab", backend.Wake{}, false},                              // no payload
		{"4:abc:T", backend.Wake{}, false},                           // n covers the payload's colon: "T" is no payload
		{"4:abc::T", backend.Wake{ID: "abc:", Token: "T"}, true},     // an id with a colon
		{"9:abc", backend.Wake{}, false},                             // too long
		{"0:abc", backend.Wake{}, false},
		{"+3:abc:T", backend.Wake{}, false},
		{"x:abc", backend.Wake{}, false},
		{"abc", backend.Wake{}, false},
		{"2:a{:T", backend.Wake{}, false}, // not an encoding
	} {
		got, ok := ParseInbox(c.msg)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("ParseInbox(%q) = %+v, %v; want %+v, %v", c.msg, got, ok, c.want, c.ok)
		}
	}
}

// Parse reads a hand-off's grant, "g<fence>,<ttl ms>,<µs>:<token>", and
// takes a malformed one for no wake-up.
func TestParseGrant(t *testing.T) {
	w, ok := Parse("x", "g1700000000000001,1500,1700000000000000:a:b")
	want := backend.HandOff{Fence: 1700000000000001, TTL: 1500 * time.Millisecond, StoreTime: time.UnixMicro(1700000000000000)}
	if !ok || w.ID != "x" || w.Token != "a:b" || w.Grant == nil || *w.Grant != want {
		t.Fatalf("Parse of a grant = %+v, %v (grant %+v), want token a:b and %+v", w, ok, w.Grant, want)
	}
	for _, p := range []string{"g1,2:T", "g1,2,3,4:T", "g0,2,3:T", "g1,+2,3:T", "g1,,3:T", "g1,2,x:T", "g1,99999999999999999,3:T"} {
		if w, ok := Parse("x", p); ok {
			t.Errorf("Parse(%q) = %+v, want no wake-up", p, w)
		}
	}
}
