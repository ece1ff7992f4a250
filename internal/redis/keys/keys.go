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
// each hash slot has a fence key, the last fence granted to any id of the
// slot, and release records (see [Keyspace.Fence] and [Keyspace.Released]):
//
//	<prefix>fence:{<slot tag>}
//	<prefix>rel:<period>:{<slot tag>}
//
// and the prefix has one marker of the wire protocol its processes speak
// (see [SuffixWire]):
//
//	<prefix>wire
//
// None of them ever looks like an id's key: '{' does not follow the prefix. The
// suffixes below say what each key holds; docs/protocol.md in the
// repository describes the whole protocol (keys, TTLs, wake-up payloads,
// fences, the wire version) on one page.
package keys

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultPrefix is the key prefix used when none is configured.
const DefaultPrefix = "lock:"

// The suffixes of an id's keys.
const (
	// SuffixLock names the lock key: a string holding the lease's fence
	// and owner token, "<fence>:<token>", with the lease's expiry as its
	// TTL.
	SuffixLock = "lock"
	// SuffixQueue names the queue: a sorted set of waiter tokens scored by
	// ticket (the server's clock in µs, raised past the queue's last
	// ticket). TTL: at least 2 waiter TTLs after the last enqueue or
	// heartbeat; gone once empty.
	SuffixQueue = "q"
	// SuffixWaiters names the waiter records: a hash of waiter token ->
	// "<deadline>:<lease TTL in ms>:<inbox>": the waiter's deadline
	// (milliseconds of the server's clock; dead from then on), the lease
	// TTL it asked for, and where its wake-ups go: its process's inbox, its
	// kind first ("P" PUBLISH, "S" SPUBLISH, "K" RPUSH to a key). A token
	// has a record exactly while it is queued. TTL: as the queue's.
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
	// one: the keyspace of one server ([Keyspace.OneServer]), where the
	// keys of hash slots are one set for the whole prefix, and fence its
	// fence key.
	one   bool
	fence string
}

// OneServer returns k for a server that is not Redis Cluster: a step's keys
// need not share a slot there, so the prefix has one fence key and one
// release record per period, "<prefix>fence:{}" and "<prefix>rel:<period>:{}"
// (an empty hash tag), shared by all its ids: what stays after a release
// is the release's mark, and only while its record lives. On Redis
// Cluster ([New]'s keyspace) they are one per hash slot.
func (k Keyspace) OneServer() Keyspace {
	k.one = true
	k.fence = k.prefix + "fence:{}"
	return k
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

// ID holds the names of the keys a step of one id uses. All of them hash
// to the same slot: the id's keys carry its hash tag, and Fence the tag of
// that slot.
type ID struct {
	Lock    string // string: "<fence>:<owner token>", TTL = the lease
	Queue   string // zset: waiter token -> ticket
	Waiters string // hash: waiter token -> "<deadline ms>:<lease TTL in ms>:<inbox>" (see ParseWaiter)
	Fence   string // string: the slot's last fence (see Keyspace.Fence)
	Slot    int    // the hash slot of every key above
}

// For returns the key names of id. The names of the id's own keys share
// one allocation: every step builds them.
func (k Keyspace) For(id string) ID {
	enc := Encode(id)
	suffixes := [...]string{SuffixLock, SuffixQueue, SuffixWaiters}
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
	slot := Slot(name(0))
	return ID{Lock: name(0), Queue: name(1), Waiters: name(2), Fence: k.Fence(slot), Slot: slot}
}

// ParseLock splits a lock key's value into the lease's token and fence; ok
// is false for a value of another shape.
func ParseLock(v string) (token string, fence uint64, ok bool) {
	f, token, found := strings.Cut(v, ":")
	if !found {
		return "", 0, false
	}
	fence, err := strconv.ParseUint(f, 10, 64)
	if err != nil {
		return "", 0, false
	}
	return token, fence, true
}

// Waiter is a waiter record, the value of a token's field in the
// waiter records (ID.Waiters).
type Waiter struct {
	Deadline int64  // ms of the server's clock; the waiter is dead from then on
	TTL      int64  // the lease TTL it asked for, in ms
	Inbox    string // where its wake-ups go: kind byte, then name
	Permits  int    // on a shared id, the permits it asks for; 0 on a mutex
}

// String returns w as the scripts write it: "<deadline>:<ttl>:<inbox>",
// or "<deadline>:<ttl>/<permits>:<inbox>" on a shared id.
func (w Waiter) String() string {
	p := ""
	if w.Permits > 0 {
		p = "/" + strconv.Itoa(w.Permits)
	}
	return strconv.FormatInt(w.Deadline, 10) + ":" + strconv.FormatInt(w.TTL, 10) + p + ":" + w.Inbox
}

// ParseWaiter parses a waiter record; ok is false for a value of another
// shape (which the scripts count as a dead waiter).
func ParseWaiter(v string) (w Waiter, ok bool) {
	d, rest, found := strings.Cut(v, ":")
	if !found {
		return w, false
	}
	t, inbox, found := strings.Cut(rest, ":")
	if !found {
		return w, false
	}
	deadline, err := strconv.ParseInt(d, 10, 64)
	if err != nil || deadline < 0 {
		return w, false
	}
	permits := 0
	if ttlPart, p, shared := strings.Cut(t, "/"); shared {
		if permits, err = strconv.Atoi(p); err != nil || permits < 1 {
			return w, false
		}
		t = ttlPart
	}
	ttl, err := strconv.ParseInt(t, 10, 64)
	if err != nil || ttl < 1 {
		return w, false
	}
	return Waiter{Deadline: deadline, TTL: ttl, Inbox: inbox, Permits: permits}, true
}

// Fence returns the fence key of a hash slot: "<prefix>fence:{<SlotTag(slot)>}"
// ("<prefix>fence:{}" in a OneServer keyspace),
// a string holding the last fence granted to any id of the slot (fences
// strictly increase per slot, and so per id). Every grant sets it, with a
// TTL of an hour ([FenceIdle]).
func (k Keyspace) Fence(slot int) string {
	if k.one {
		return k.fence
	}
	return k.prefix + "fence:{" + SlotTag(slot) + "}"
}

// slotTag is the hash tag of a slot's keys: SlotTag(slot), or "" (one set
// for the prefix) in a OneServer keyspace.
func (k Keyspace) slotTag(slot int) string {
	if k.one {
		return ""
	}
	return SlotTag(slot)
}

// FenceIdle is how long a slot's fence key lives after the slot's last
// grant (FENCE_IDLE in the scripts).
const FenceIdle = time.Hour

// Released returns the release record of a hash slot for one period of
// the releasing process's clock ([Period]): "<prefix>rel:<period>:{<SlotTag(slot)>}",
// a set of the marks ([ReleaseMark]) of the releases in the slot during that
// period, which lives [ReleaseKeep] after its last write. A resent release
// looks for its mark in the record of its period and of the one before.
func (k Keyspace) Released(slot int, period int64) string {
	tag := k.slotTag(slot)
	var buf [128]byte
	b := append(buf[:0], k.prefix...)
	b = append(b, "rel:"...)
	b = strconv.AppendInt(b, period, 10)
	b = append(b, ":{"...)
	b = append(b, tag...)
	b = append(b, '}')
	return string(b)
}

// SlotKey reports whether key is a key of a hash slot built by k ([Keyspace.Fence]
// or [Keyspace.Released]), and the longest TTL it can have: [FenceIdle] or
// [ReleaseKeep].
func (k Keyspace) SlotKey(key string) (maxTTL time.Duration, ok bool) {
	rest, ok := strings.CutPrefix(key, k.prefix)
	switch {
	case !ok:
		return 0, false
	case strings.HasPrefix(rest, "fence:{"):
		return FenceIdle, true
	case strings.HasPrefix(rest, "rel:"):
		return ReleaseKeep, true
	}
	return 0, false
}

// ReleasePeriod is the length of the periods of [Period]: a release resent
// within ReleasePeriod of the first (by the same process) finds its record.
const ReleasePeriod = 30 * time.Second

// ReleaseKeep is how long a release record lives after its last write
// (RELEASE_KEEP in the scripts): two periods, so that a record written in
// one period is still there during the next.
const ReleaseKeep = 2 * ReleasePeriod

// ReleaseMark returns what a release of token on id records: the first 12
// bytes of the SHA-256 of the id's and the token's lengths and bytes (the
// slot's records hold the releases of all its ids; 96 bits keep two
// releases apart with certainty for any practical count, in 12 bytes).
func ReleaseMark(id, token string) string {
	var buf [512]byte
	b := binary.BigEndian.AppendUint64(buf[:0], uint64(len(id)))
	b = binary.BigEndian.AppendUint64(b, uint64(len(token)))
	b = append(b, id...)
	b = append(b, token...)
	sum := sha256.Sum256(b)
	return string(sum[:12])
}

// Period returns the period of t: whole ReleasePeriods since 1970.
func Period(t time.Time) int64 { return t.UnixMilli() / ReleasePeriod.Milliseconds() }

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
