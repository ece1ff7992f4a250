package keys

import "time"

// WireVersion is the version of the wire protocol this module speaks: the
// layout of the keys and the inbox messages, and the KEYS, ARGV and
// replies of the scripts. Processes of different wire versions must not
// share a prefix; the Redis adapters refuse to run a step under a prefix
// whose marker ([SuffixWire]) holds another version. Version 1 is the
// first versioned protocol; version 2 moved the fence into the lock key's
// value and the slot's fence key, and the release marks into the slot's
// release records; version 3 moved the waiters' deadlines into their
// records (no "dl" key). Until the module's v1.0.0 it may change
// between minor versions; every change that an older process would
// misread raises it.
const WireVersion = 3

// SuffixWire names the prefix's wire marker, right after the prefix:
// "<prefix>wire", a string holding the wire protocol version of the
// processes that use the prefix (decimal). It is protocol metadata, not
// the state of any id: no id's key has this name (an id's keys have '{'
// right after the prefix), and the per-id state checks leave it out. It
// has no hash tag, so on Redis Cluster its slot is that of its whole
// name: the same for every process of the prefix.
//
// A Backend checks it in one script before its first step: absent, it is
// set to WireVersion with a TTL of [WireTTL]; holding WireVersion, its TTL
// is set again; holding anything else, the step fails and nothing is
// written. The Backend checks again before its first step [WireRefresh]
// or more after its last successful check, so the marker never expires
// while some process of the prefix makes a step at least every
// WireTTL - WireRefresh (90 s), and no process runs a step unchecked
// while the marker could hold another version.
const SuffixWire = "wire"

// The marker's timing (see SuffixWire).
const (
	// WireTTL is how long the marker lives after a check that set it.
	WireTTL = 2 * time.Minute
	// WireRefresh is how old a Backend's last successful check may be
	// before its next step checks again. It is well below WireTTL: a step
	// that skips the check runs while the marker it set still lives.
	WireRefresh = 30 * time.Second
)

// Wire returns the name of the prefix's wire marker: "<prefix>wire".
func (k Keyspace) Wire() string { return k.prefix + SuffixWire }
