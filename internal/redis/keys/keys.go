// Package keys maps lock ids to Redis key names.
//
// Every key of one id carries the same hash tag, so that one Lua script can
// touch all of them, also on Redis Cluster:
//
//	<prefix>{<enc(id)>}:<suffix>
//
// enc is an escape encoding: '%', '{' and '}' become "%25", "%7B" and "%7D";
// every other byte is kept as it is. The empty id, which the core never
// passes, is encoded as a lone "%", which no other id produces. enc is
// injective ([Decode] inverts it) and never produces '{' or '}', and a prefix
// may contain neither, so the hash tag Redis computes for a key (the bytes
// between the first '{' and the next '}') is always exactly enc(id): no id
// can move its keys to another slot or change the layout of the key.
//
// Besides the keys of ids, each Backend (process) has an inbox, where the
// wake-ups of its waiters go (see [SuffixInbox]):
//
//	<prefix>inbox:<process>:[{<slot tag>}]
//
// and the prefix has one marker of the wire protocol its processes speak
// (see [SuffixWire]):
//
//	<prefix>wire
//
// Neither ever looks like an id's key: '{' does not follow the prefix. The
// suffixes below say what each key holds; docs/protocol.md in the
// repository describes the whole protocol (keys, TTLs, wake-up payloads,
// fences, the wire version) on one page.
package keys

import (
	"errors"
	"fmt"
	"strings"
)

// DefaultPrefix is the key prefix used when none is configured.
const DefaultPrefix = "lock:"

// The suffixes of an id's keys.
const (
	// SuffixLock names the lock key: a string holding the owner token,
	// with the lease's expiry as its TTL.
	SuffixLock = "lock"
	// SuffixQueue names the queue: a sorted set of waiter tokens scored by
	// ticket (the server's clock in µs, raised past the queue's last
	// ticket). TTL: at least 3 waiter TTLs after the last enqueue or
	// heartbeat; gone once empty.
	SuffixQueue = "q"
	// SuffixDeadlines names the waiter deadlines: a sorted set of waiter
	// tokens scored by deadline (milliseconds of the server's clock). TTL:
	// as the queue's.
	SuffixDeadlines = "dl"
	// SuffixCounters names the fence key: a hash with the fields "fence"
	// (the id's last fence) and "rel" (the token of its last release,
	// which answers a resent release). TTL: set to an hour by a grant about
	// once per half hour of grants, and by a longer lease's grant or
	// extend; it outlives the id's last grant by 30 to 60 minutes, and
	// every lease.
	SuffixCounters = "n"
	// SuffixWaiters names the waiter records: a hash of waiter token ->
	// "<lease TTL in ms>:<inbox>", the lease TTL a queued waiter asked for
	// and where its wake-ups go: its process's inbox, its kind first ("P"
	// PUBLISH, "S" SPUBLISH, "K" RPUSH to a key). A token has a record
	// exactly while it is queued. TTL: as the queue's.
	SuffixWaiters = "w"
)

// ErrBadPrefix is returned by [ValidatePrefix] and [New] for a prefix that
// contains '{' or '}'.
var ErrBadPrefix = errors.New("keys: prefix must not contain '{' or '}'")

// ValidatePrefix reports whether p can be used as a key prefix: it must not
// contain '{' or '}', which would change the hash tag of every key.
func ValidatePrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return fmt.Errorf("%w: %q", ErrBadPrefix, p)
	}
	return nil
}

// Encode returns the injective, brace-free encoding of id that is used as
// the hash tag of id's keys.
func Encode(id string) string {
	if id == "" {
		return "%"
	}
	n := 0
	for i := 0; i < len(id); i++ {
		switch id[i] {
		case '%', '{', '}':
			n++
		}
	}
	if n == 0 {
		return id
	}
	var b strings.Builder
	b.Grow(len(id) + 2*n)
	for i := 0; i < len(id); i++ {
		switch c := id[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// ErrBadEncoding is returned by [Decode] for a string that Encode does not
// produce.
var ErrBadEncoding = errors.New("keys: not an encoded id")

// Decode inverts [Encode]. It accepts exactly the strings Encode produces,
// so that Encode(Decode(s)) == s whenever Decode(s) succeeds.
func Decode(s string) (string, error) {
	if s == "%" {
		return "", nil
	}
	if s == "" {
		return "", fmt.Errorf("%w: empty", ErrBadEncoding)
	}
	if !strings.ContainsAny(s, "%{}") {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '{', '}':
			return "", fmt.Errorf("%w: %q contains a brace", ErrBadEncoding, s)
		case '%':
			if i+3 > len(s) {
				return "", fmt.Errorf("%w: %q has a truncated escape", ErrBadEncoding, s)
			}
			switch s[i+1 : i+3] {
			case "25":
				b.WriteByte('%')
			case "7B":
				b.WriteByte('{')
			case "7D":
				b.WriteByte('}')
			default:
				return "", fmt.Errorf("%w: %q has an unknown escape", ErrBadEncoding, s)
			}
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// Keyspace builds the key names of ids under one prefix.
type Keyspace struct {
	prefix string
}

// New returns the Keyspace for prefix; "" means [DefaultPrefix]. A prefix
// with '{' or '}' is rejected with ErrBadPrefix.
func New(prefix string) (Keyspace, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := ValidatePrefix(prefix); err != nil {
		return Keyspace{}, err
	}
	return Keyspace{prefix: prefix}, nil
}

// Prefix returns the keyspace's prefix.
func (k Keyspace) Prefix() string { return k.prefix }

// ID holds the names of one id's keys. All of them carry the same hash
// tag.
type ID struct {
	Lock      string // string: owner token, TTL = the lease
	Queue     string // zset: waiter token -> ticket
	Deadlines string // zset: waiter token -> deadline in ms of the server's clock
	Counters  string // hash: "fence", "rel"; TTL: see SuffixCounters
	Waiters   string // hash: waiter token -> "<lease TTL in ms>:<inbox>"
}

// For returns the key names of id. The five names share one allocation:
// every step builds them.
func (k Keyspace) For(id string) ID {
	enc := Encode(id)
	suffixes := [...]string{SuffixLock, SuffixQueue, SuffixDeadlines, SuffixCounters, SuffixWaiters}
	n := 0
	for _, s := range suffixes {
		n += len(k.prefix) + len(enc) + 3 + len(s)
	}
	var b strings.Builder
	b.Grow(n)
	var end [len(suffixes)]int
	for i, s := range suffixes {
		b.WriteString(k.prefix)
		b.WriteByte('{')
		b.WriteString(enc)
		b.WriteString("}:")
		b.WriteString(s)
		end[i] = b.Len()
	}
	all := b.String()
	name := func(i int) string {
		start := 0
		if i > 0 {
			start = end[i-1]
		}
		return all[start:end[i]]
	}
	return ID{Lock: name(0), Queue: name(1), Deadlines: name(2), Counters: name(3), Waiters: name(4)}
}

// Base returns the part that every key of id starts with:
// "<prefix>{<enc(id)>}:".
func (k Keyspace) Base(id string) string {
	enc := Encode(id)
	var b strings.Builder
	b.Grow(len(k.prefix) + len(enc) + 3)
	b.WriteString(k.prefix)
	b.WriteByte('{')
	b.WriteString(enc)
	b.WriteString("}:")
	return b.String()
}

// Key returns the key of id with the given suffix.
func (k Keyspace) Key(id, suffix string) string {
	return k.Base(id) + suffix
}

// Pattern returns a SCAN MATCH pattern for every key of id.
func (k Keyspace) Pattern(id string) string {
	return escapeGlob(k.Base(id)) + "*"
}

// PrefixPattern returns a SCAN MATCH pattern for every key of the keyspace.
func (k Keyspace) PrefixPattern() string {
	return escapeGlob(k.prefix) + "*"
}

// escapeGlob escapes the characters that are special in a Redis glob.
func escapeGlob(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ErrNotInKeyspace is returned by [Keyspace.Parse] for a key that this
// keyspace did not build.
var ErrNotInKeyspace = errors.New("keys: key not in keyspace")

// Parse splits a key built by k into its id and suffix.
func (k Keyspace) Parse(key string) (id, suffix string, err error) {
	rest, ok := strings.CutPrefix(key, k.prefix)
	if !ok || !strings.HasPrefix(rest, "{") {
		return "", "", fmt.Errorf("%w: %q", ErrNotInKeyspace, key)
	}
	end := strings.IndexByte(rest, '}')
	if end < 0 || !strings.HasPrefix(rest[end:], "}:") {
		return "", "", fmt.Errorf("%w: %q", ErrNotInKeyspace, key)
	}
	id, err = Decode(rest[1:end])
	if err != nil {
		return "", "", err
	}
	return id, rest[end+2:], nil
}

// NumSlots is the number of hash slots of Redis Cluster.
const NumSlots = 16384

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the bytes between the first '{' and the next '}', when that is
// non-empty; otherwise the whole key) modulo 16384, as CLUSTER KEYSLOT
// computes it. Every key of one id has the same slot.
func Slot(key string) int {
	if start := strings.IndexByte(key, '{'); start >= 0 {
		if end := strings.IndexByte(key[start+1:], '}'); end > 0 {
			key = key[start+1 : start+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ crc16tab[byte(crc>>8)^key[i]]
	}
	return int(crc) % NumSlots
}

// SlotOf returns the hash slot of every key of id.
func SlotOf(id string) int { return Slot("{" + Encode(id) + "}") }

// crc16tab is the table of CRC16-CCITT (XMODEM: polynomial 0x1021, initial
// value 0), the checksum of Redis Cluster's key hashing.
var crc16tab = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
