package engine

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// Defaults of the options both adapters share.
const (
	DefaultMaxWaiters  = 10000
	DefaultPurgeLimit  = 100
	DefaultWaitTimeout = 100 * time.Millisecond
)

// Options are the options both adapters share; each adapter documents them
// on its own Options type.
type Options struct {
	Prefix                 string
	MaxWaiters, PurgeLimit int
	ShardedPubSub          bool
	WaitReplicas           int
	WaitTimeout            time.Duration
}

// Config is validated Options with their defaults filled in.
type Config struct {
	name         string // the adapter, for error texts
	ks           keys.Keyspace
	maxWaiters   int
	purgeLimit   int
	publish      scripts.Publish
	waitReplicas int
	waitTimeout  time.Duration
	tracking     bool
	consts       scripts.Consts // the scripts' constant arguments, formatted once
	process      string         // names this Backend's inboxes: random, unique per Backend
}

// Validate checks o, fills in the defaults and returns the Config. name
// starts its error texts, e.g. "redisbackend".
func Validate(name string, o Options) (Config, error) {
	ks, err := keys.New(o.Prefix)
	if err != nil {
		return Config{}, argErr("opts.Prefix", err.Error())
	}
	c := Config{name: name, ks: ks, maxWaiters: o.MaxWaiters, purgeLimit: o.PurgeLimit, publish: scripts.Classic}
	switch {
	case c.maxWaiters == 0:
		c.maxWaiters = DefaultMaxWaiters
	case c.maxWaiters < 0:
		return Config{}, argErr("opts.MaxWaiters", fmt.Sprintf("must not be negative, got %d", c.maxWaiters))
	}
	switch {
	case c.purgeLimit == 0:
		c.purgeLimit = DefaultPurgeLimit
	case c.purgeLimit < 0 || c.purgeLimit > scripts.MaxPurgeLimit:
		return Config{}, argErr("opts.PurgeLimit", fmt.Sprintf("must be in 1..%d (0 for the default), got %d", scripts.MaxPurgeLimit, c.purgeLimit))
	}
	if o.ShardedPubSub {
		c.publish = scripts.Sharded
	}
	switch {
	case o.WaitReplicas < 0:
		return Config{}, argErr("opts.WaitReplicas", fmt.Sprintf("must not be negative, got %d", o.WaitReplicas))
	case o.WaitTimeout < 0:
		return Config{}, argErr("opts.WaitTimeout", fmt.Sprintf("must not be negative, got %v", o.WaitTimeout))
	case o.WaitReplicas > 0:
		c.waitReplicas, c.waitTimeout = o.WaitReplicas, o.WaitTimeout
		if c.waitTimeout == 0 {
			c.waitTimeout = DefaultWaitTimeout
		}
		if c.waitTimeout < time.Millisecond {
			return Config{}, argErr("opts.WaitTimeout", fmt.Sprintf("%v is below WAIT's resolution of 1ms", c.waitTimeout))
		}
	}
	c.consts = scripts.NewConsts(c.maxWaiters, c.purgeLimit, c.publish)
	c.process = newProcess()
	return c, nil
}

// argErr is the *backend.ArgumentError of a bad option.
func argErr(arg, reason string) error { return &backend.ArgumentError{Arg: arg, Reason: reason} }

// newProcess returns a random name for one Backend's inboxes: 64 bits
// from crypto/rand, in hex.
func newProcess() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand's contract since Go 1.24)
	return hex.EncodeToString(b[:])
}

// Process returns the name of the Backend's inboxes (see keys.Inbox).
func (c Config) Process() string { return c.process }

// InboxKind returns how a wake-up reaches this Backend's inbox: Classic
// or Sharded (a message on its inbox channel), or InboxKey (a list key
// that its tracking connection hears written, WithTracking).
func (c Config) InboxKind() scripts.InboxKind {
	switch {
	case c.tracking:
		return scripts.InboxKey
	case c.publish == scripts.Sharded:
		return scripts.InboxSharded
	}
	return scripts.InboxClassic
}

// WithTracking returns c for a client-side-caching connection that hears
// its wake-ups as writes to its inbox keys (rueidis in tracking mode; see
// InboxKind). The scripts' reads track nothing on such a connection (it
// tracks in broadcasting mode, the inbox keys only), so its steps are
// those of any other connection.
func (c Config) WithTracking() Config {
	c.tracking = true
	return c
}

// ConstArgs returns the scripts' constant arguments for c (see
// scripts.Consts.Strings), and the inbox argument of a Backend with one
// inbox (not one per hash slot, see Steps.Inbox).
func (c Config) ConstArgs() []string {
	return append(c.consts.Strings(), scripts.InboxAddress(c.InboxKind(), c.ks.Inbox(c.process, -1)))
}

// Keyspace returns the key names in use.
func (c Config) Keyspace() keys.Keyspace { return c.ks }

// Sharded reports whether wake-ups go by SPUBLISH.
func (c Config) Sharded() bool { return c.publish == scripts.Sharded }

// WaitReplicas returns Options.WaitReplicas; 0 means no WAIT.
func (c Config) WaitReplicas() int { return c.waitReplicas }

// WaitTimeout returns Options.WaitTimeout with its default, when
// WaitReplicas is above zero.
func (c Config) WaitTimeout() time.Duration { return c.waitTimeout }

// MaxWaiters returns Options.MaxWaiters with its default.
func (c Config) MaxWaiters() int { return c.maxWaiters }

// PurgeLimit returns Options.PurgeLimit with its default.
func (c Config) PurgeLimit() int { return c.purgeLimit }
