package engine

import (
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// Call is one script invocation, as a step builds it for the adapter to
// send.
type Call struct {
	Script scripts.Script
	Keys   []string
	Args   []string
	// Strings asks for the reply as an array of strings (Reply.Strs), for
	// scripts that reply with text (inspect); otherwise integers.
	Strings bool
	// Wait asks for Config.Wait's WAIT on the connection that runs the
	// call, in the same round trip (grants and extends, with replicas).
	Wait bool
}

// Reply is one call's reply, as the adapter's client read it and the
// Runner completed it, for the step to parse.
type Reply struct {
	// Ints is the reply when it is an array of integers (acquire,
	// acquire_many, leave, heartbeat); nil for any other reply.
	Ints []int64
	// Strs is the reply of a Call with Strings set.
	Strs []string
	// Err is the call's error reply, or the client's failure.
	Err error
	// Acks is, for a Call with Wait, the WAIT reply of the round trip that
	// ran it (set by the Runner).
	Acks int64
	// First is the failure of the first send of a call the Runner sent
	// again after it (resend-once), else nil.
	First error
}

// Refusal is why the server refused to run a call, in a reply (of kind
// backend.KindAnswer): the call did not run, and may be sent again.
type Refusal int

const (
	// NotRefused: the reply, if any, is the call's own.
	NotRefused Refusal = iota
	// NoScript is a NOSCRIPT reply: send the call as EVAL.
	NoScript
	// TryAgain is a refusal of Redis Cluster to run the call for now
	// (TRYAGAIN, CLUSTERDOWN, or a MOVED the client did not follow).
	TryAgain
	// Ask is an ASK redirect the client did not follow ("ASK <slot>
	// <addr>").
	Ask
)

// cluster reports whether r says that the cluster refused the call for now.
func (r Refusal) cluster() bool { return r == TryAgain || r == Ask }

// Engine is the lock protocol of one Backend without its I/O: it builds
// each step's call and parses its reply (the steps' methods come in
// pairs, XCall and XReply). It holds no client and is immutable: safe for
// concurrent use.
type Engine struct {
	cfg     Config
	consts  scripts.Consts // the scripts' constant arguments, formatted once
	publish scripts.Publish
	cluster bool   // the client talks to Redis Cluster: a script's keys share a slot
	perSlot bool   // one inbox per hash slot (see Inbox)
	inbox   string // the one inbox, when not perSlot
	address string // its address for the scripts (scripts.InboxAddress)
}

// New returns the Engine of cfg for a client that talks to Redis Cluster
// when cluster is set; otherwise its Config's Keys are cfg.Keys.OneServer().
func New(cfg Config, cluster bool) *Engine {
	if !cluster {
		cfg.Keys = cfg.Keys.OneServer()
	}
	e := &Engine{cfg: cfg, publish: scripts.Classic, cluster: cluster}
	if cfg.Sharded {
		e.publish = scripts.Sharded
	}
	e.consts = scripts.NewConsts(cfg.Limits.MaxWaiters, cfg.Limits.PurgeLimit, e.publish)
	// A script may send only to an inbox of its own slot on Redis Cluster,
	// except by PUBLISH, which every node forwards to every other one.
	e.perSlot = cluster && e.inboxKind() != scripts.InboxClassic
	if !e.perSlot {
		e.inbox = cfg.Keys.Inbox(cfg.Process, -1)
		e.address = scripts.InboxAddress(e.inboxKind(), e.inbox)
	}
	return e
}

// Config returns the Config e runs with.
func (e *Engine) Config() Config { return e.cfg }

// inboxKind returns how a wake-up reaches this Backend's inbox: a list key
// its tracking connection hears written (Config.Tracking), or a message on
// its inbox channel.
func (e *Engine) inboxKind() scripts.InboxKind {
	switch {
	case e.cfg.Tracking:
		return scripts.InboxKey
	case e.cfg.Sharded:
		return scripts.InboxSharded
	}
	return scripts.InboxClassic
}

// inboxAddress returns the inbox argument of the scripts for a waiter of
// id: where its wake-ups go (see Inbox).
func (e *Engine) inboxAddress(id string) string {
	if !e.perSlot {
		return e.address
	}
	return scripts.InboxAddress(e.inboxKind(), e.Inbox(id))
}

// Inbox returns the name of the inbox that this Backend's wake-ups for id
// come to: one per hash slot on Redis Cluster (SPUBLISH, or an inbox key),
// otherwise one for every id.
func (e *Engine) Inbox(id string) string {
	if !e.perSlot {
		return e.inbox
	}
	return e.cfg.Keys.Inbox(e.cfg.Process, keys.SlotOf(id))
}

// ConstArgs returns the scripts' constant arguments (see
// scripts.Consts.Strings) and the inbox argument of a Backend with one
// inbox (not one per hash slot, see Inbox), for an adapter that converts
// each argument, to convert these once.
func (e *Engine) ConstArgs() []string {
	return append(e.consts.Strings(), scripts.InboxAddress(e.inboxKind(), e.cfg.Keys.Inbox(e.cfg.Process, -1)))
}

// Prefix returns the key prefix in use.
func (e *Engine) Prefix() string { return e.cfg.Keys.Prefix() }

// HandsOff reports whether the core may take a grant by hand-off as it
// comes (backend.HandOffer): the scripts always hand off, but with a WAIT
// a waiter must learn of its grant from a step of its own, which waits for
// the replicas to have it (a retried grant).
func (e *Engine) HandsOff() bool { return e.cfg.Wait.Replicas == 0 }
