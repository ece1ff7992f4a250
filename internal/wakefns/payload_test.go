package wakefns

import (
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
)

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
