// Package scripts holds the Lua scripts of the Redis backends, one set
// shared by both Redis adapters (go-redis and rueidis), and the layout of
// their KEYS, ARGV and replies: per script, one file holds the script, the
// builder of its KEYS and ARGV and the parser of its reply.
//
// Each script is the file lua/<name>.lua prefixed by lua/lib.lua (shared
// helpers), the parts of each before a "-- [slow path]" line first (the
// fast paths of acquire and release return before the other helpers are
// made); [Script.Source] is the full text that is sent to the server and
// [Script.SHA1] its digest for EVALSHA. Data reaches a script only through
// KEYS and ARGV, never through its source, and every script validates its
// ARGV, answering bad input with a LOCKBADARG error reply.
//
// The keys of one id (see package keys) share one hash tag, so every script
// works on Redis Cluster. The scripts need Redis 5 or newer (they call TIME
// before writing, which needs effects replication).
//
// # Scripts
//
//   - acquire: with no queue key, SET NX PX with the relative TTL is the
//     whole try (the uncontended case); otherwise purge expired waiters,
//     then grant if the lock is free and nobody is queued ahead of the
//     requester. A grant's fence is the server's TIME in µs, raised past
//     the last fence of the id's hash slot (kept in the slot's fence key,
//     see package keys), and kept in the lock key's value,
//     "<fence>:<token>"; a retried grant is a no-op that reports the lease. Otherwise, with
//     wait, enqueue with a new ticket (or keep the ticket) and set the
//     waiter's deadline by the server's TIME.
//   - acquire_many: acquire's step for many ids in one call (one hash
//     slot on Redis Cluster), at most [MaxAcquireBatch] of them, with one
//     TIME for the whole call, one EXISTS of all the queue keys, and each
//     fence key read once and written once: when no queue exists, a free
//     id is one SET NX PX.
//   - release: compare-and-delete, add the release's mark to the slot's
//     release record of the period (so a resent release is answered as
//     done), purge, hand off to the head.
//   - extend: compare-and-PEXPIRE; never re-creates an expired lock.
//   - leave: remove the token's entry, release the lock if the token holds
//     it, purge, and hand off to the head when the lock is free.
//   - heartbeat: purge, refresh the deadlines of the listed waiters of one
//     id that are still queued, report queued/ready, hand off to the head
//     when the lock is free.
//   - wire: the check of the prefix's wire protocol version, once before
//     a Backend's first step and again at most every keys.WireRefresh.
//
// Direct hand-off (backend.HandOffer): every script that finds the lock
// free with a live head queued grants it to the head in the same script,
// and only the head is woken, at the inbox its waiter record names (every
// acquire names one, see [InboxAddress]). docs/protocol.md in the
// repository describes the grant, the wake-up payloads and where they go.
// Every step call takes the Backend's [Publish] command, which the scripts
// check: they reject SPUBLISH on a server older than 7.0 (LOCKBADARG)
// before they write anything.
//
// [Lib] holds the same scripts as one Redis 7 function library, each
// script a function of it ([Script.Function]) for FCALL: see newLibrary
// for how it is built from the same files.
//
// The wire check ([Wire]) is not a step of an id: it reads and sets the
// prefix's marker of the wire protocol version (see keys.SuffixWire).
package scripts

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/redislocker/lock/backend"
)

//go:embed lua/*.lua
var files embed.FS

// Script is one Lua script: its name, full source and SHA1 for EVALSHA,
// and its function in [Lib] for FCALL.
type Script struct {
	Name     string // e.g. "acquire"
	Source   string // lib.lua followed by <name>.lua
	SHA1     string // lowercase hex SHA1 of Source
	Function string // the script's function in Lib, e.g. "lock_0123456789ab_acquire"

	parts []string // the shared files between lib.lua and <name>.lua
}

// All returns every script a Backend sends, e.g. to SCRIPT LOAD them up
// front.
func All() []Script {
	return []Script{Acquire, AcquireShared, Release, Extend, Leave, Heartbeat, AcquireMany, Wire}
}

// load returns the script lua/<name>.lua, prefixed by lib.lua and by the
// shared parts lua/<part>.lua, in that order; see slowMark for how a file
// is split.
func load(name string, parts ...string) Script {
	var fast, slow []string
	for _, f := range append(append([]string{"lib"}, parts...), name) {
		b, err := files.ReadFile("lua/" + f + ".lua")
		if err != nil {
			panic(err)
		}
		head, tail := splitSlow(string(b))
		if head != "" {
			fast = append(fast, head)
		}
		slow = append(slow, tail)
	}
	sc := newScript(name, strings.Join(append(fast, slow...), "\n"))
	sc.parts = parts
	return sc
}

// slowMark is the line that splits a Lua file in two: the parts of every
// file of a script (lib.lua, the shared parts, the script's own) before
// their mark come first, in that order, then the parts after it. A file
// without the mark is all after it. A script's fast path before its mark
// thus returns before the helpers past lib.lua's mark are made: each local
// function is a closure created anew on every call, and creating them
// cost the uncontended acquire + release about 5% of the server's CPU.
const slowMark = "-- [slow path]"

// splitSlow returns src before and after its slowMark line; all of src is
// after it when it has none.
func splitSlow(src string) (head, tail string) {
	if i := strings.Index(src, "\n"+slowMark+"\n"); i >= 0 {
		return src[:i+1], src[i+1:]
	}
	return "", src
}

func newScript(name, src string) Script {
	sum := sha1.Sum([]byte(src))
	return Script{Name: name, Source: src, SHA1: hex.EncodeToString(sum[:])}
}

// Error reply codes. A script's error reply is "<code> <message>"; Redis
// may put "ERR " before it.
const (
	CodeNotHeld   = "LOCKNOTHELD"   // release, extend: the token does not hold the lock
	CodeQueueFull = "LOCKQUEUEFULL" // acquire: the id has max waiters
	CodeCapacity  = "LOCKCAPACITY"  // acquire: the id is in use with another capacity
	CodeBadArg    = "LOCKBADARG"    // any: an ARGV entry is invalid
	CodeWire      = "LOCKWIRE"      // wire: the marker holds another version, which follows the code
)

// ErrorCode returns the code of a script's error reply message, or "" when
// the message is not one of the scripts' own.
func ErrorCode(msg string) string {
	msg = strings.TrimPrefix(msg, "ERR ")
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case CodeNotHeld, CodeQueueFull, CodeCapacity, CodeBadArg, CodeWire:
		return code
	}
	return ""
}

// MapError maps an error reply message to backend.ErrNotHeld,
// backend.ErrQueueFull or backend.ErrCapacity; it returns nil for any
// other message.
func MapError(msg string) error {
	switch ErrorCode(msg) {
	case CodeNotHeld:
		return backend.ErrNotHeld
	case CodeQueueFull:
		return backend.ErrQueueFull
	case CodeCapacity:
		return backend.ErrCapacity
	}
	return nil
}

// Limits of the scripts' arguments.
const (
	MaxPurgeLimit     = 100000 // largest purge limit a script accepts
	MaxHeartbeatBatch = 10000  // most tokens in one heartbeat call
	MaxTokenLength    = 128    // longest token a script accepts (backend.MaxTokenLength)
	QueueTTLFactor    = 3      // queue keys live this many waiter TTLs after an enqueue or heartbeat that sets their TTL, and at least two thirds of that after every one
)

// Publish is a Backend's pub/sub command, which every step passes to the
// scripts: they check it against the server. A wake-up goes by the kind of
// its inbox ([InboxKind]), which follows the same setting.
type Publish string

// The pub/sub commands.
const (
	// Classic is PUBLISH: every subscriber of the channel hears it, on any
	// node; on Redis Cluster every node forwards it to every other node.
	Classic Publish = "PUBLISH"
	// Sharded is SPUBLISH (Redis 7.0 or newer): only the subscribers
	// (SSUBSCRIBE) on the node that serves the channel's slot hear it,
	// and no other node is told. An inbox channel of this kind has the
	// hash tag of a slot, so it is the node that ran the script.
	Sharded Publish = "SPUBLISH"
)

// Millis returns d in whole milliseconds, rounded up, so that the store
// never holds a lease shorter than the core asked for.
func Millis(d time.Duration) string {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	return strconv.FormatInt(int64(ms), 10)
}
