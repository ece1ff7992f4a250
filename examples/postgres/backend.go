// Package postgres is a backend.Backend on PostgreSQL (pgx v5), written
// from the backend package's checklist alone; see README.md for how each
// item maps to a step. Each step is one PL/pgSQL function (schema.sql)
// under a transaction advisory lock on the id. A step that frees the lock
// hands it off to the head of the queue (backend.HandOffer). Shared ids
// (backend.Sharer: semaphores, reader-writer locks) keep their capacity in
// the id's row and their leases in rows of their own. Wake-ups are
// NOTIFY messages on the channel of the waiter's own process, heard by one
// listening connection per Backend.
//
// Fences are greatest(last fence + 1, the server's clock in microseconds):
// they strictly increase per id, also after an idle id's counter row was
// deleted, as long as the server's clock does not step back.
package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redislocker/lock/backend"
)

//go:embed schema.sql
var schemaSQL string

// schemaVersion marks a schema made from this schemaSQL (the comment on
// the schema): New then runs no DDL.
var schemaVersion = func() string {
	sum := sha256.Sum256([]byte(schemaSQL))
	return "github.com/redislocker/lock schema " + hex.EncodeToString(sum[:8])
}()

// Options configures a Backend. A nil *Options means every default; so does
// a zero (or negative) field.
type Options struct {
	// Schema is the PostgreSQL schema that holds the tables and functions,
	// and the prefix of the Backends' NOTIFY channels. It must match
	// [a-z_][a-z0-9_]* (at most 40 bytes). Default: "golock".
	Schema string
	// MaxWaiters caps the queue of one id: an enqueue beyond it gets
	// backend.ErrQueueFull. Default: 10000.
	MaxWaiters int
	// PurgeLimit is the most dead waiters one step purges. Default: 100.
	PurgeLimit int
	// CounterIdle is how long an id stays free before its counter row may
	// be deleted (and a resent Release is forgotten). Default: one hour.
	CounterIdle time.Duration
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// Backend is one "process" on a database. It implements backend.Backend,
// backend.Batcher, backend.ExtendBatcher, backend.HandOffer,
// backend.Inspector, backend.Resolver and backend.Sharer and is
// goroutine-safe.
type Backend struct {
	pool   *pgxpool.Pool
	o      Options
	closed atomic.Bool
	l      *listener
}

var (
	_ backend.Backend       = (*Backend)(nil)
	_ backend.Batcher       = (*Backend)(nil)
	_ backend.ExtendBatcher = (*Backend)(nil)
	_ backend.HandOffer     = (*Backend)(nil)
	_ backend.Inspector     = (*Backend)(nil)
	_ backend.Resolver      = (*Backend)(nil)
	_ backend.Sharer        = (*Backend)(nil)
)

// New returns a Backend on pool, creating its schema if needed (in one
// transaction under an advisory lock, so concurrent New calls are safe) and
// starting its listening connection, a new connection with pool's
// configuration, on a channel of its own: the schema's name and a random
// suffix. Close stops it; pool stays the caller's.
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Backend, error) {
	o := Options{Schema: "golock", MaxWaiters: 10000, PurgeLimit: 100, CounterIdle: time.Hour}
	if opts != nil {
		o.Schema = cmp.Or(opts.Schema, o.Schema)
		o.MaxWaiters = orDefault(opts.MaxWaiters, o.MaxWaiters)
		o.PurgeLimit = orDefault(opts.PurgeLimit, o.PurgeLimit)
		o.CounterIdle = orDefault(opts.CounterIdle, o.CounterIdle)
	}
	if pool == nil {
		return nil, &backend.ArgumentError{Arg: "pool", Reason: "nil"}
	}
	if !schemaName.MatchString(o.Schema) {
		return nil, &backend.ArgumentError{Arg: "opts.Schema", Reason: "must match " + schemaName.String()}
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('github.com/redislocker/lock schema'))"); err != nil {
			return err
		}
		// A schema that is current is left alone: its DDL (CREATE INDEX IF
		// NOT EXISTS takes a SHARE lock on the table even when the index
		// exists) would otherwise meet the steps of running processes,
		// which lock the tables in another order, in a deadlock.
		var current *string
		if err := tx.QueryRow(ctx, "SELECT obj_description(to_regnamespace($1), 'pg_namespace')", o.Schema).Scan(&current); err != nil {
			return err
		}
		if current != nil && *current == schemaVersion {
			return nil
		}
		if _, err := tx.Exec(ctx, strings.ReplaceAll(schemaSQL, "{{s}}", o.Schema)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "COMMENT ON SCHEMA "+o.Schema+" IS '"+schemaVersion+"'")
		return err
	})
	if err != nil {
		return nil, err
	}
	// The channel is an identifier of at most 57 bytes (the limit is 63).
	var r [8]byte
	_, _ = rand.Read(r[:]) // never fails
	channel := o.Schema + "_" + hex.EncodeToString(r[:])
	return &Backend{pool: pool, o: o, l: newListener(pool.Config().ConnConfig, channel)}, nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

func us(d time.Duration) int64 { return d.Microseconds() }

func dur(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// Resolution is one microsecond, the resolution of timestamptz.
func (b *Backend) Resolution() time.Duration { return time.Microsecond }

// HandsOff is true: every step that leaves the lock free with a live head
// queued grants it to that head (backend.HandOffer).
func (b *Backend) HandsOff() bool { return true }

// Shares is true: Acquire takes requests with a Capacity of 2 or more
// (backend.Sharer).
func (b *Backend) Shares() bool { return true }

// sql returns the call of the step fn with n arguments.
func (b *Backend) sql(fn string, n int) string {
	params := make([]string, n)
	for i := range params {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	return "SELECT * FROM " + b.o.Schema + "." + fn + "(" + strings.Join(params, ",") + ")"
}

// checkPermits returns an *ArgumentError naming arg's Permits when r is a
// shared request (Capacity 2 or more) whose Permits are not 1 to Capacity.
func checkPermits(r backend.AcquireRequest, arg string) error {
	if r.Capacity >= 2 && (r.Permits < 1 || r.Permits > r.Capacity) {
		return &backend.ArgumentError{Arg: arg + ".Permits",
			Reason: "must be 1 to Capacity (" + strconv.Itoa(r.Capacity) + "), got " + strconv.Itoa(r.Permits)}
	}
	return nil
}

// acquireArgs returns the arguments of the step acquire for r: a shared
// request's capacity and permits last, NULL for a mutex.
func (b *Backend) acquireArgs(r backend.AcquireRequest) []any {
	var capacity, permits *int64
	if r.Capacity >= 2 {
		c, p := int64(r.Capacity), int64(r.Permits)
		capacity, permits = &c, &p
	}
	return []any{[]byte(r.ID), []byte(r.Token), us(r.TTL), r.Wait, us(r.WaiterTTL), b.o.MaxWaiters,
		b.o.PurgeLimit, us(b.o.CounterIdle), b.l.channel, capacity, permits}
}

func scanGrant(row pgx.Row) (backend.Grant, error) {
	var g backend.Grant
	var fence, ttl, holderTTL, ticket, now int64
	var full, capacity bool
	if err := row.Scan(&g.Acquired, &fence, &ttl, &holderTTL, &g.Queued, &ticket, &g.Head, &full, &now, &capacity); err != nil {
		return g, err
	}
	if full {
		return backend.Grant{}, backend.ErrQueueFull
	}
	if capacity {
		return backend.Grant{}, backend.ErrCapacity
	}
	g.Fence, g.Ticket = uint64(fence), uint64(ticket)
	g.TTL, g.HolderTTL = dur(ttl), dur(holderTTL)
	g.StoreTime = time.UnixMicro(now)
	return g, nil
}

// Acquire is the fair try-acquire with optional enqueue, in one step.
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	if err := checkPermits(req, "req"); err != nil {
		return backend.Grant{}, err
	}
	res, err := b.AcquireBatch(ctx, []backend.AcquireRequest{req})
	if err != nil {
		return backend.Grant{}, err
	}
	return res[0].Grant, res[0].Err
}

// Release deletes the lock if token holds it (or answers nil to a resent
// release of the id's latest Release) and hands it off to the head of the
// queue; otherwise it returns backend.ErrNotHeld.
func (b *Backend) Release(ctx context.Context, id, token string) error {
	var ok bool
	err := b.each(ctx, "release", [][]any{{[]byte(id), []byte(token), b.o.PurgeLimit}},
		func(_ int, row pgx.Row) error { return row.Scan(&ok) })
	if err != nil || ok {
		return err
	}
	return backend.ErrNotHeld
}

// Extend sets a live lease's expiry to now+ttl, keeping the fence;
// otherwise it returns backend.ErrNotHeld.
func (b *Backend) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	res, err := b.ExtendBatch(ctx, []backend.ExtendRequest{{ID: id, Token: token, TTL: ttl}})
	if err != nil {
		return err
	}
	return res[0]
}

// ExtendBatch runs each request as its own Extend step, in order, in one
// round trip: nil when extended, backend.ErrNotHeld when the token does not
// hold the lock (nothing changed).
func (b *Backend) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]error, error) {
	args := make([][]any, len(reqs))
	for i, r := range reqs {
		args[i] = []any{[]byte(r.ID), []byte(r.Token), us(r.TTL), b.o.PurgeLimit}
	}
	out := make([]error, len(reqs))
	err := b.each(ctx, "extend", args, func(i int, row pgx.Row) error {
		var ok bool
		if err := row.Scan(&ok); err != nil || ok {
			return err
		}
		out[i] = backend.ErrNotHeld
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Leave removes token's queue entry and releases the lock if token holds
// it, handing it off to the new head. It is idempotent.
func (b *Backend) Leave(ctx context.Context, id, token string) error {
	return b.LeaveBatch(ctx, []backend.Waiter{{ID: id, Token: token}})
}

// each runs the step fn once per argument list, all in one round trip,
// each in its own transaction: one that held the locks of two ids could
// deadlock with another. scan reads the i-th result (nil: none).
func (b *Backend) each(ctx context.Context, fn string, args [][]any, scan func(i int, row pgx.Row) error) error {
	if b.closed.Load() {
		return backend.ErrClosed
	}
	var batch pgx.Batch
	for i, a := range args {
		if len(args) > 1 {
			batch.Queue("BEGIN")
		}
		q := batch.Queue(b.sql(fn, len(a)), a...)
		if scan != nil {
			q.QueryRow(func(row pgx.Row) error { return scan(i, row) })
		}
		if len(args) > 1 {
			batch.Queue("COMMIT")
		}
	}
	return b.pool.SendBatch(ctx, &batch).Close()
}

// AcquireBatch runs each request as its own Acquire step, in order, in one
// round trip; backend.ErrQueueFull and backend.ErrCapacity go in the
// request's Err.
func (b *Backend) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	args := make([][]any, len(reqs))
	for i, r := range reqs {
		if err := checkPermits(r, "reqs["+strconv.Itoa(i)+"]"); err != nil {
			return nil, err
		}
		args[i] = b.acquireArgs(r)
	}
	out := make([]backend.BatchGrant, len(reqs))
	err := b.each(ctx, "acquire", args, func(i int, row pgx.Row) error {
		g, err := scanGrant(row)
		out[i] = backend.BatchGrant{Grant: g, Err: err}
		if errors.Is(err, backend.ErrQueueFull) || errors.Is(err, backend.ErrCapacity) {
			return nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LeaveBatch runs Leave for every waiter, each its own step, in one round
// trip.
func (b *Backend) LeaveBatch(ctx context.Context, waiters []backend.Waiter) error {
	args := make([][]any, len(waiters))
	for i, w := range waiters {
		args[i] = []any{[]byte(w.ID), []byte(w.Token), b.o.PurgeLimit}
	}
	return b.each(ctx, "leave", args, nil)
}

// Heartbeat refreshes the deadlines of the listed waiters that are still
// queued, one step per waiter, all in one round trip. A step that finds
// the lock free hands it off, so Ready is never set.
func (b *Backend) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	args := make([][]any, len(waiters))
	for i, w := range waiters {
		args[i] = []any{[]byte(w.ID), []byte(w.Token), us(waiterTTL), b.o.PurgeLimit}
	}
	out := make([]backend.HeartbeatResult, len(waiters))
	err := b.each(ctx, "heartbeat", args, func(i int, row pgx.Row) error { return row.Scan(&out[i].Queued) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Inspect reports id's live lease (on a shared id: its live leases, in
// fence order, and its capacity) and its first live waiters, at most
// min(maxWaiters, backend.MaxInspectWaiters) of them (backend.Inspector).
// It is one read-only statement: it takes no lock and writes nothing, so
// an expired lease or a dead waiter that no step removed yet is not shown.
func (b *Backend) Inspect(ctx context.Context, id string, maxWaiters int) (backend.Inspection, error) {
	in := backend.Inspection{ID: id}
	if b.closed.Load() {
		return in, backend.ErrClosed
	}
	var fence, ttl, capacity *int64
	var holder []byte
	var tickets, since, deadlines, permits, hFences, hTTLs, hPermits []int64
	var tokens, hTokens [][]byte
	err := b.pool.QueryRow(ctx, b.sql("inspect", 2), []byte(id), max(0, min(maxWaiters, backend.MaxInspectWaiters))).
		Scan(&fence, &ttl, &holder, &in.QueueLen, &tickets, &tokens, &since, &deadlines, &permits,
			&capacity, &hFences, &hTTLs, &hTokens, &hPermits)
	if err != nil {
		return in, err
	}
	if fence != nil {
		in.Held, in.Fence, in.TTL, in.Holder = true, uint64(*fence), dur(*ttl), backend.Fingerprint(string(holder))
	}
	if capacity != nil {
		in.Capacity = int(*capacity)
		for i := range hFences {
			h := backend.HolderInfo{Fence: uint64(hFences[i]), TTL: dur(hTTLs[i]),
				Holder: backend.Fingerprint(string(hTokens[i])), Permits: int(hPermits[i])}
			in.Holders = append(in.Holders, h)
			in.Held, in.Fence, in.TTL, in.Holder = true, h.Fence, h.TTL, h.Holder
		}
	}
	for i := range tickets {
		in.Waiters = append(in.Waiters, backend.WaiterInfo{Ticket: uint64(tickets[i]), Token: backend.Fingerprint(string(tokens[i])),
			QueuedFor: dur(since[i]), Deadline: dur(deadlines[i]), Permits: int(permits[i])})
	}
	return in, nil
}

// Subscribe registers fn for the wake-ups of id and returns once the
// listening connection is listening (or ctx ends). After the connection
// is re-established, fn gets backend.Wake{ID: id, All: true}.
func (b *Backend) Subscribe(ctx context.Context, id string, fn func(backend.Wake)) (cancel func(), err error) {
	if b.closed.Load() {
		return nil, backend.ErrClosed
	}
	if fn == nil {
		return nil, &backend.ArgumentError{Arg: "fn", Reason: "nil"}
	}
	return b.l.subscribe(ctx, id, fn)
}

// Close stops the listening connection and drops the subscriptions; later
// calls return backend.ErrClosed. It does not close the pool.
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return backend.ErrClosed
	}
	b.l.close()
	return nil
}
