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
