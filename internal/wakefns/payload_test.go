package wakefns

import (
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

// The payloads are the scripts' wake-up messages: on an id's channel
// (Parse) and on a process's inbox (ParseInbox).

// Parse reads both payloads of the scripts, keeps colons inside tokens,
// and takes anything else for a bare token.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		payload string
		want    backend.Wake
	}{
		{":T", backend.Wake{ID: "x", Token: "T"}},
		{"1500:T", backend.Wake{ID: "x", Token: "T", HolderTTL: 1500 * time.Millisecond}},
		{"1:a:b", backend.Wake{ID: "x", Token: "a:b", HolderTTL: time.Millisecond}},
		{"::", backend.Wake{ID: "x", Token: ":"}},
		{"T", backend.Wake{ID: "x", Token: "T"}},                                           // an older version's bare token
		{"ab:c", backend.Wake{ID: "x", Token: "ab:c"}},                                     // a bare token with a colon
		{"+5:c", backend.Wake{ID: "x", Token: "+5:c"}},                                     // not only digits
		{"-5:c", backend.Wake{ID: "x", Token: "-5:c"}},                                     // not only digits
		{"99999999999999999999:c", backend.Wake{ID: "x", Token: "99999999999999999999:c"}}, // too long a TTL
	} {
		if got := Parse("x", c.payload); got != c.want {
			t.Errorf("Parse(%q) = %+v, want %+v", c.payload, got, c.want)
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
		{"2:ab", backend.Wake{ID: "ab"}, true},                       // an empty payload: a bare empty token
		{"4:abc:T", backend.Wake{}, true},                            // n covers the payload's colon: "abc:" is no encoding
		{"9:abc", backend.Wake{}, false},                             // too long
		{"0:abc", backend.Wake{}, false},
		{"+3:abc:T", backend.Wake{}, false},
		{"x:abc", backend.Wake{}, false},
		{"abc", backend.Wake{}, false},
		{"2:a{:T", backend.Wake{}, false}, // not an encoding
	} {
		got, ok := ParseInbox(c.msg)
		if c.msg == "4:abc:T" {
			// "abc:" decodes as an id with a colon: a valid message for that id.
			if !ok || got.ID != "abc:" || got.Token != "T" {
				t.Errorf("ParseInbox(%q) = %+v, %v; want id %q, token T", c.msg, got, ok, "abc:")
			}
			continue
		}
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("ParseInbox(%q) = %+v, %v; want %+v, %v", c.msg, got, ok, c.want, c.ok)
		}
	}
}

// Parse reads a hand-off's grant, "g<fence>,<ttl ms>,<µs>:<token>", and
// takes a malformed one for a bare token (which names no waiter).
func TestParseGrant(t *testing.T) {
	w := Parse("x", "g1700000000000001,1500,1700000000000000:a:b")
	want := backend.HandOff{Fence: 1700000000000001, TTL: 1500 * time.Millisecond, StoreTime: time.UnixMicro(1700000000000000)}
	if w.ID != "x" || w.Token != "a:b" || w.Grant == nil || *w.Grant != want {
		t.Fatalf("Parse of a grant = %+v (grant %+v), want token a:b and %+v", w, w.Grant, want)
	}
	for _, p := range []string{"g1,2:T", "g1,2,3,4:T", "g0,2,3:T", "g1,+2,3:T", "g1,,3:T", "g1,2,x:T", "g1,99999999999999999,3:T"} {
		if w := Parse("x", p); w.Grant != nil || w.Token != p {
			t.Errorf("Parse(%q) = %+v, want the bare token %q and no grant", p, w, p)
		}
	}
}
