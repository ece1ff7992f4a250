package scripts

import (
	"time"

	"github.com/redislocker/lock/internal/redis/keys"
)

// Extend is the extend script: compare-and-PEXPIRE (see lua/extend.lua).
var Extend = load("extend", "shared")

// Extend returns the KEYS and ARGV of extend.
func (c Consts) Extend(k keys.ID, token string, ttl time.Duration) (keys, args []string) {
	return []string{k.Lock}, []string{token, Millis(ttl)}
}
