package wakefns

import (
	"strconv"
	"strings"
	"time"

	"github.com/redislocker/lock/backend"
)

// Parse returns the wake-up of id that a message's payload carries. The
// scripts publish ":<token>" (the head re-checks now) or
// "<ms>:<token>" (the token became the head of a held lock, whose holder
// has ms milliseconds left: Wake.HolderTTL) or "g<fence>,<ttl>,<us>:<token>"
// (a hand-off: the step granted the lock to the token with that fence,
// a lease TTL of ttl ms, at the server's clock us µs: Wake.Grant). The token is everything after
// the first colon, colons included. A payload with no colon, or with
// anything but digits before it, is a bare token, as an older version
// published.
func Parse(id, payload string) backend.Wake {
	ms, token, ok := strings.Cut(payload, ":")
	if !ok {
		return backend.Wake{ID: id, Token: payload}
	}
	if ms == "" {
		return backend.Wake{ID: id, Token: token}
	}
	if ms[0] == 'g' {
		if h, ok := parseGrant(ms[1:]); ok {
			return backend.Wake{ID: id, Token: token, Grant: h}
		}
		return backend.Wake{ID: id, Token: payload}
	}
	n, err := strconv.ParseUint(ms, 10, 63)
	if err != nil || ms[0] == '+' || n > uint64(maxHolderTTL/time.Millisecond) {
		return backend.Wake{ID: id, Token: payload}
	}
	return backend.Wake{ID: id, Token: token, HolderTTL: time.Duration(n) * time.Millisecond}
}

// maxHolderTTL bounds the holder's TTL a payload may carry (about 292
// years fit in a Duration; no lease is longer than this).
const maxHolderTTL = 100 * 365 * 24 * time.Hour

// parseGrant parses a hand-off's "<fence>,<ttl ms>,<server µs>".
func parseGrant(s string) (*backend.HandOff, bool) {
	f, rest, ok1 := strings.Cut(s, ",")
	t, us, ok2 := strings.Cut(rest, ",")
	if !ok1 || !ok2 {
		return nil, false
	}
	var n [3]uint64
	for i, v := range []string{f, t, us} {
		x, err := strconv.ParseUint(v, 10, 63)
		if err != nil || v[0] == '+' || x == 0 {
			return nil, false
		}
		n[i] = x
	}
	if n[1] > uint64(maxHolderTTL/time.Millisecond) || n[2] > 1<<62/1000 {
		return nil, false
	}
	return &backend.HandOff{Fence: n[0], TTL: time.Duration(n[1]) * time.Millisecond,
		StoreTime: time.UnixMicro(int64(n[2]))}, true
}
