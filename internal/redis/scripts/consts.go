package scripts

import "strconv"

// Consts builds the KEYS and ARGV of every script for one Backend, with
// the Backend's constant arguments (max waiters, purge limit, pub/sub
// command) formatted once instead of on every call.
type Consts struct {
	maxWaiters string
	purgeLimit string
	pub        string
}

// NewConsts returns the Consts of a Backend.
func NewConsts(maxWaiters, purgeLimit int, pub Publish) Consts {
	return Consts{
		maxWaiters: strconv.Itoa(maxWaiters),
		purgeLimit: strconv.Itoa(purgeLimit),
		pub:        string(pub),
	}
}

// Strings returns the constant arguments c puts in the scripts' ARGV, for
// an adapter that converts each argument, to convert these once.
func (c Consts) Strings() []string {
	return []string{c.maxWaiters, c.purgeLimit, c.pub}
}

// InboxKind is how the scripts send a wake-up to a waiter's inbox (see
// keys.Inbox): the first byte of the inbox address a waiter gives when it
// queues ([InboxAddress]).
type InboxKind byte

// The inbox kinds.
const (
	// InboxClassic: PUBLISH on the inbox channel.
	InboxClassic InboxKind = 'P'
	// InboxSharded: SPUBLISH on the inbox channel, which shares the id's
	// hash slot on Redis Cluster.
	InboxSharded InboxKind = 'S'
	// InboxKey: RPUSH to the inbox key (and PEXPIRE it), which shares the
	// id's hash slot on Redis Cluster; its process hears the write by
	// client-side caching.
	InboxKey InboxKind = 'K'
)

// InboxAddress returns the inbox argument of a waiter: kind, then the
// inbox's name.
func InboxAddress(kind InboxKind, name string) string {
	return string(rune(kind)) + name
}
