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
// has ms milliseconds left: Wake.HolderTTL). The token is everything after
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
	n, err := strconv.ParseUint(ms, 10, 63)
	if err != nil || ms[0] == '+' || n > uint64(maxHolderTTL/time.Millisecond) {
		return backend.Wake{ID: id, Token: payload}
	}
	return backend.Wake{ID: id, Token: token, HolderTTL: time.Duration(n) * time.Millisecond}
}

// maxHolderTTL bounds the holder's TTL a payload may carry (about 292
// years fit in a Duration; no lease is longer than this).
const maxHolderTTL = 100 * 365 * 24 * time.Hour
