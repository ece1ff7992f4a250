// Package postgres is a backend.Backend on PostgreSQL (pgx v5), written
// from the backend package's checklist alone; see README.md for how each
// item maps to a step. Each step is one PL/pgSQL function (schema.sql)
// under a transaction advisory lock on the id. Wake-ups are NOTIFY messages
// naming the head, heard by one listening connection per Backend.
//
// Fences are greatest(last fence + 1, the server's clock in microseconds):
// they strictly increase per id, also after an idle id's counter row was
// deleted, as long as the server's clock does not step back.
package postgres

import (
	"cmp"
	"context"
	_ "embed"
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

// Options configures a Backend. A nil *Options means every default; so does
// a zero (or negative) field.
type Options struct {
	// Schema is the PostgreSQL schema that holds the tables and functions,
	// and the name of the NOTIFY channel. It must match [a-z_][a-z0-9_]*
	// (at most 40 bytes). Default: "golock".
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
// backend.Batcher and backend.Resolver and is goroutine-safe.
type Backend struct {
	pool   *pgxpool.Pool
	o      Options
	closed atomic.Bool
	l      *listener
}

var (
	_ backend.Backend  = (*Backend)(nil)
	_ backend.Batcher  = (*Backend)(nil)
	_ backend.Resolver = (*Backend)(nil)
)

// New returns a Backend on pool, creating its schema if needed (in one
// transaction under an advisory lock, so concurrent New calls are safe) and
// starting its listening connection, a new connection with pool's
// configuration. Close stops it; pool stays the caller's.
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
		_, err := tx.Exec(ctx, strings.ReplaceAll(schemaSQL, "{{s}}", o.Schema))
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Backend{pool: pool, o: o, l: newListener(pool.Config().ConnConfig, o.Schema)}, nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

func us(d time.Duration) int64 { return d.Microseconds() }

// Resolution is one microsecond, the resolution of timestamptz.
func (b *Backend) Resolution() time.Duration { return time.Microsecond }

// sql returns the call of the step fn with n arguments.
func (b *Backend) sql(fn string, n int) string {
	params := make([]string, n)
	for i := range params {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	return "SELECT * FROM " + b.o.Schema + "." + fn + "(" + strings.Join(params, ",") + ")"
}

func (b *Backend) acquireArgs(r backend.AcquireRequest) []any {
	return []any{[]byte(r.ID), []byte(r.Token), us(r.TTL), r.Wait, us(r.WaiterTTL), b.o.MaxWaiters, b.o.PurgeLimit, us(b.o.CounterIdle)}
}

func scanGrant(row pgx.Row) (backend.Grant, error) {
	var g backend.Grant
	var fence, ttl, holderTTL, ticket int64
	var full bool
	if err := row.Scan(&g.Acquired, &fence, &ttl, &holderTTL, &g.Queued, &ticket, &g.Head, &full); err != nil || full {
		return g, cmp.Or(err, backend.ErrQueueFull)
	}
	g.Fence, g.Ticket = uint64(fence), uint64(ticket)
	g.TTL, g.HolderTTL = time.Duration(ttl)*time.Microsecond, time.Duration(holderTTL)*time.Microsecond
	return g, nil
}

// Acquire is the fair try-acquire with optional enqueue, in one step.
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.Grant, error) {
	res, err := b.AcquireBatch(ctx, []backend.AcquireRequest{req})
	if err != nil {
		return backend.Grant{}, err
	}
	return res[0].Grant, res[0].Err
}

// ok runs a step that reports whether the token held the lock.
func (b *Backend) ok(ctx context.Context, fn string, args ...any) error {
	var ok bool
	if err := b.each(ctx, fn, [][]any{args}, func(_ int, row pgx.Row) error { return row.Scan(&ok) }); err != nil || ok {
		return err
	}
	return backend.ErrNotHeld
}

// Release deletes the lock if token holds it (or answers nil to a resent
// release of the id's latest Release) and wakes the head of the queue;
// otherwise it returns backend.ErrNotHeld.
func (b *Backend) Release(ctx context.Context, id, token string) error {
	return b.ok(ctx, "release", []byte(id), []byte(token), b.o.PurgeLimit)
}

// Extend sets a live lease's expiry to now+ttl, keeping the fence;
// otherwise it returns backend.ErrNotHeld.
func (b *Backend) Extend(ctx context.Context, id, token string, ttl time.Duration) error {
	return b.ok(ctx, "extend", []byte(id), []byte(token), us(ttl), b.o.PurgeLimit)
}

// Leave removes token's queue entry and releases the lock if token holds
// it, waking the new head. It is idempotent.
func (b *Backend) Leave(ctx context.Context, id, token string) error {
	return b.LeaveBatch(ctx, []backend.Waiter{{ID: id, Token: token}})
}

// each runs the step fn once per argument list, all in one round trip,
// each in its own transaction: one that held the locks of two ids could
// deadlock with another. scan reads the i-th result.
func (b *Backend) each(ctx context.Context, fn string, args [][]any, scan func(i int, row pgx.Row) error) error {
	if b.closed.Load() {
		return backend.ErrClosed
	}
	var batch pgx.Batch
	for i, a := range args {
		if len(args) > 1 {
			batch.Queue("BEGIN")
		}
		batch.Queue(b.sql(fn, len(a)), a...).QueryRow(func(row pgx.Row) error { return scan(i, row) })
		if len(args) > 1 {
			batch.Queue("COMMIT")
		}
	}
	return b.pool.SendBatch(ctx, &batch).Close()
}

// AcquireBatch runs each request as its own Acquire step, in order, in one
// round trip; backend.ErrQueueFull goes in the request's Err.
func (b *Backend) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.BatchGrant, error) {
	args := make([][]any, len(reqs))
	for i, r := range reqs {
		args[i] = b.acquireArgs(r)
	}
	out := make([]backend.BatchGrant, len(reqs))
	err := b.each(ctx, "acquire", args, func(i int, row pgx.Row) error {
		g, err := scanGrant(row)
		out[i] = backend.BatchGrant{Grant: g, Err: err}
		if errors.Is(err, backend.ErrQueueFull) {
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
	var left bool
	return b.each(ctx, "leave", args, func(_ int, row pgx.Row) error { return row.Scan(&left) })
}

// Heartbeat refreshes the deadlines of the listed waiters that are still
// queued, one step per waiter, all in one round trip, and wakes the head of
// every listed id whose lock is free, once.
func (b *Backend) Heartbeat(ctx context.Context, waiters []backend.Waiter, waiterTTL time.Duration) ([]backend.HeartbeatResult, error) {
	args, woken := make([][]any, len(waiters)), map[string]bool{}
	for i, w := range waiters { // wake each id's head at most once
		args[i] = []any{[]byte(w.ID), []byte(w.Token), us(waiterTTL), b.o.PurgeLimit, !woken[w.ID]}
		woken[w.ID] = true
	}
	out := make([]backend.HeartbeatResult, len(waiters))
	err := b.each(ctx, "heartbeat", args, func(i int, row pgx.Row) error {
		return row.Scan(&out[i].Queued, &out[i].Ready)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
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
