package wakeup

import (
	"strconv"
	"strings"
	"time"

	"github.com/redislocker/lock/backend"
)

// Parse returns the wake-up of id that a payload carries, and whether it
// is one. The scripts send ":<token>" (the head re-checks now),
// "<ms>:<token>" (the token became the head of a held lock, whose holder
// has ms milliseconds left: Wake.HolderTTL) or
// "g<fence>,<ttl>,<us>:<token>" (a hand-off: the step granted the lock to
// the token with that fence, a lease TTL of ttl ms, at the server's clock
// us µs: Wake.Grant). The token is everything after the first colon,
// colons included. Anything else is no wake-up (ok is false).
func Parse(id, payload string) (w backend.Wake, ok bool) {
	ms, token, found := strings.Cut(payload, ":")
	switch {
	case !found:
		return backend.Wake{}, false
	case ms == "":
		return backend.Wake{ID: id, Token: token}, true
	case ms[0] == 'g':
		if h, ok := parseGrant(ms[1:]); ok {
			return backend.Wake{ID: id, Token: token, Grant: h}, true
		}
		return backend.Wake{}, false
	}
	n, err := strconv.ParseUint(ms, 10, 63)
	if err != nil || ms[0] == '+' || n > uint64(maxHolderTTL/time.Millisecond) {
		return backend.Wake{}, false
	}
	return backend.Wake{ID: id, Token: token, HolderTTL: time.Duration(n) * time.Millisecond}, true
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
