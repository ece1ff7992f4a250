package redisstep

import (
	"fmt"
	"time"

	"github.com/redislocker/lock/internal/keys"
	"github.com/redislocker/lock/internal/scripts"
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
}

// Validate checks o, fills in the defaults and returns the Config. name
// starts its error texts, e.g. "redisbackend".
func Validate(name string, o Options) (Config, error) {
	ks, err := keys.New(o.Prefix)
	if err != nil {
		return Config{}, fmt.Errorf("%s: Options.Prefix: %w", name, err)
	}
	c := Config{name: name, ks: ks, maxWaiters: o.MaxWaiters, purgeLimit: o.PurgeLimit, publish: scripts.Classic}
	switch {
	case c.maxWaiters == 0:
		c.maxWaiters = DefaultMaxWaiters
	case c.maxWaiters < 0:
		return Config{}, fmt.Errorf("%s: Options.MaxWaiters %d is negative", name, c.maxWaiters)
	}
	switch {
	case c.purgeLimit == 0:
		c.purgeLimit = DefaultPurgeLimit
	case c.purgeLimit < 0 || c.purgeLimit > scripts.MaxPurgeLimit:
		return Config{}, fmt.Errorf("%s: Options.PurgeLimit %d is not in 1..%d", name, c.purgeLimit, scripts.MaxPurgeLimit)
	}
	if o.ShardedPubSub {
		c.publish = scripts.Sharded
	}
	switch {
	case o.WaitReplicas < 0:
		return Config{}, fmt.Errorf("%s: Options.WaitReplicas %d is negative", name, o.WaitReplicas)
	case o.WaitTimeout < 0:
		return Config{}, fmt.Errorf("%s: Options.WaitTimeout %v is negative", name, o.WaitTimeout)
	case o.WaitReplicas > 0:
		c.waitReplicas, c.waitTimeout = o.WaitReplicas, o.WaitTimeout
		if c.waitTimeout == 0 {
			c.waitTimeout = DefaultWaitTimeout
		}
		if c.waitTimeout < time.Millisecond {
			return Config{}, fmt.Errorf("%s: Options.WaitTimeout %v is below WAIT's resolution of 1ms", name, c.waitTimeout)
		}
	}
	c.consts = scripts.NewConsts(c.maxWaiters, c.purgeLimit, c.publish, false)
	return c, nil
}

// WithTracking returns c for a client-side-caching connection whose
// waiters learn of a lease's end by the invalidation of the lock key
// (rueidis in tracking mode). Its grants and extends then read the lock
// key again after writing it, one server command more each (see
// scripts.NewConsts).
//
// Its AcquireBatch runs the acquire script once per request, not
// acquire_many. For a tracking client, Redis (7.0) remembers every key a
// script declares on each read command the script runs. A call on n ids
// so costs about n^2 inserts into the server's tracking table. A call on
// 64 ids took 4 to 9 ms of the server instead of 0.7 to 1.2 ms on a
// pub/sub connection. AcquireMany of 10,000 free ids took 2.5 s; in
// chunks of 4, 8 and 16 ids 0.64, 0.58 and 1.1 s; with acquire_many of
// one id 0.35 to 0.39 s; with acquire per id 0.29 to 0.33 s.
func (c Config) WithTracking() Config {
	c.tracking = true
	c.consts = scripts.NewConsts(c.maxWaiters, c.purgeLimit, c.publish, true)
	return c
}

// Tracking reports whether c is for a tracking connection (WithTracking).
func (c Config) Tracking() bool { return c.tracking }

// ConstArgs returns the scripts' constant arguments for c (see
// scripts.Consts.Strings).
func (c Config) ConstArgs() []string { return c.consts.Strings() }

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
