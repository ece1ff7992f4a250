package scripts

import (
	"strconv"
	"strings"
	"time"

	"github.com/redislocker/lock/internal/redis/keys"
)

// Wire is the check of the prefix's wire protocol version (see
// lua/wire.lua and keys.SuffixWire).
var Wire = load("wire")

// WireCall returns the KEYS and ARGV of Wire for the keyspace ks: the
// marker must hold version, and lives ttl after the check.
func WireCall(ks keys.Keyspace, version int, ttl time.Duration) (keys, args []string) {
	return []string{ks.Wire()}, []string{strconv.Itoa(version), Millis(ttl)}
}

// WireFound returns what the marker holds, from the message of Wire's
// error reply, and whether the message is that reply.
func WireFound(msg string) (found string, ok bool) {
	msg = strings.TrimPrefix(msg, "ERR ")
	return strings.CutPrefix(msg, CodeWire+" ")
}
