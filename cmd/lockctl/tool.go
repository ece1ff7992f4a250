package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/redisbackend"
)

// forceReleaser is the forced release of the Redis adapters (a method of
// each, not of backend.Backend). lockctl finds it on the backend by a type
// assertion, as io.Copy finds io.WriterTo.
type forceReleaser interface {
	ForceRelease(ctx context.Context, id string, fence uint64) error
}

// tool runs the commands against one Redis deployment through the Redis
// adapter.
type tool struct {
	ctx     context.Context
	client  redis.UniversalClient
	b       backend.Backend
	ks      keys.Keyspace
	where   string
	timeout time.Duration
}

// openTool connects to the deployment of su, on a client of its own, and
// PINGs it: an unreachable server, a refused login or a failed TLS
// handshake is reported here, in one clear error. Close the tool.
func openTool(ctx context.Context, su setup) (*tool, error) {
	client := su.conn.client()
	b, err := redisbackend.New(client, &redisbackend.Options{Prefix: su.ks.Prefix(), ShardedPubSub: su.sharded})
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	ks := su.ks
	if _, cluster := client.(*redis.ClusterClient); !cluster {
		ks = ks.OneServer() // as the Backend names the keys on one server
	}
	t := &tool{ctx: ctx, client: client, b: b, ks: ks, where: su.conn.where(), timeout: su.conn.callTimeout}
	pctx, cancel := t.callCtx()
	err = client.Ping(pctx).Err()
	cancel()
	if err != nil {
		t.close()
		return nil, t.reachError(err)
	}
	return t, nil
}

// close closes the backend and the client.
func (t *tool) close() {
	_ = t.b.Close()
	_ = t.client.Close()
}

// callCtx bounds one Redis call by the timeout.
func (t *tool) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.ctx, t.timeout)
}

// reachError is the error of a failed PING, said plainly.
func (t *tool) reachError(err error) error {
	var ne net.Error
	msg := err.Error()
	switch {
	case t.ctx.Err() != nil:
		return fmt.Errorf("interrupted while connecting to Redis at %s", t.where)
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return fmt.Errorf("no answer from Redis at %s within %v (-timeout, -dial-timeout): %v", t.where, t.timeout, err)
	case strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "WRONGPASS"):
		return fmt.Errorf("login refused by Redis at %s (check -user, and -password, $%s or the URL): %v", t.where, passwordEnv, err)
	}
	return fmt.Errorf("cannot reach Redis at %s: %v", t.where, err)
}

// inspect runs the backend's Inspect.
func (t *tool) inspect(id string, maxWaiters int) (backend.Inspection, error) {
	in, ok := t.b.(backend.Inspector)
	if !ok {
		return backend.Inspection{ID: id}, fmt.Errorf("the backend %T cannot inspect", t.b)
	}
	ctx, cancel := t.callCtx()
	defer cancel()
	return in.Inspect(ctx, id, maxWaiters)
}

// exists reports whether any key of id's lock state exists: the lock, the
// queue, the waiters' deadlines and records, or the fence key of its hash
// slot (on one server, of the prefix), which outlives the last grant in the
// slot by an hour.
func (t *tool) exists(id string) (bool, error) {
	k := t.ks.For(id)
	ctx, cancel := t.callCtx()
	defer cancel()
	n, err := t.client.Exists(ctx, k.Lock, k.Queue, k.Waiters, k.Fence).Result()
	return n > 0, err
}

// noState is an id with no lock state at all under the prefix.
func (t *tool) noState(id string) string {
	return fmt.Sprintf("no lock state for id %q under prefix %q (wrong -prefix?)", id, t.ks.Prefix())
}

// mustExist returns an error when in, not held and with no waiters, is of
// an id with no lock state at all under the prefix: nothing there to
// inspect, most likely a wrong -prefix.
func (t *tool) mustExist(in *backend.Inspection) error {
	if in.Held || in.QueueLen > 0 {
		return nil
	}
	ok, err := t.exists(in.ID)
	switch {
	case err != nil:
		return fmt.Errorf("inspect %q: %w", in.ID, err)
	case !ok:
		return errors.New(t.noState(in.ID))
	}
	return nil
}

// forceRelease runs the backend's forced release. A refusal matches
// backend.ErrNotHeld; for an id with no lock state at all, it says so.
func (t *tool) forceRelease(id string, fence uint64) error {
	fr, ok := t.b.(forceReleaser)
	if !ok {
		return fmt.Errorf("the backend %T has no forced release", t.b)
	}
	ctx, cancel := t.callCtx()
	err := fr.ForceRelease(ctx, id, fence)
	cancel()
	if !errors.Is(err, backend.ErrNotHeld) {
		return err
	}
	if ok, xerr := t.exists(id); xerr == nil && !ok {
		return fmt.Errorf("%w; %s", err, t.noState(id))
	}
	return err
}

// watch prints id's state every interval, count times (0: until ctx ends),
// and a line for each change of holder. When the first refresh finds no
// lock state at all for id, it says so on errOut, and goes on.
func (t *tool) watch(id string, interval time.Duration, count int, out, errOut io.Writer) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var w watcher
	for n := 1; ; n++ {
		in, err := t.inspect(id, 1)
		if err == nil && n == 1 && !in.Held && in.QueueLen == 0 {
			var ok bool
			if ok, err = t.exists(id); err == nil && !ok {
				fmt.Fprintf(errOut, "lockctl: note: %s; watching anyway\n", t.noState(id))
			}
		}
		if err != nil {
			if t.ctx.Err() != nil {
				return nil // interrupted
			}
			return fmt.Errorf("watch %q: %w", id, err)
		}
		now := time.Now().Format("15:04:05.000")
		for _, line := range w.changes(&in) {
			fmt.Fprintf(out, "%s %s\n", now, line)
		}
		fmt.Fprintf(out, "%s %s\n", now, summary(&in))
		if count > 0 && n >= count {
			return nil
		}
		select {
		case <-t.ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// watcher remembers what watch saw, to report changes of holder.
type watcher struct {
	seen       bool                // an inspection came before
	held       bool                // the last inspection was held
	lastHolder *backend.Inspection // the last inspection that was held
}

// changes returns the lines for what changed since the last inspection: a
// release, and a hand-off to a new holder (also when a refresh saw the id
// free in between, as a release and a grant often fall between two).
func (w *watcher) changes(in *backend.Inspection) []string {
	var out []string
	switch {
	case !w.seen:
	case w.held && !in.Held:
		out = append(out, fmt.Sprintf("released: fence %d, holder %s", w.lastHolder.Fence, w.lastHolder.Holder))
	case in.Held && w.lastHolder != nil && w.lastHolder.Fence != in.Fence:
		out = append(out, fmt.Sprintf("hand-off: fence %d -> %d, holder %s -> %s",
			w.lastHolder.Fence, in.Fence, w.lastHolder.Holder, in.Holder))
	case in.Held && w.lastHolder == nil:
		out = append(out, fmt.Sprintf("granted: fence %d, holder %s", in.Fence, in.Holder))
	}
	w.seen, w.held = true, in.Held
	if in.Held {
		w.lastHolder = in
	}
	return out
}

// summary is one line of watch.
func summary(in *backend.Inspection) string {
	var b strings.Builder
	switch {
	case in.Capacity > 0:
		fmt.Fprintf(&b, "shared leases=%d permits=%d/%d", len(in.Holders), permits(in.Holders), in.Capacity)
	case in.Held:
		fmt.Fprintf(&b, "held fence=%d ttl=%v holder=%s", in.Fence, round(in.TTL), in.Holder)
	default:
		b.WriteString("free")
	}
	fmt.Fprintf(&b, " waiters=%d", in.QueueLen)
	if len(in.Waiters) > 0 {
		fmt.Fprintf(&b, " head=%s", in.Waiters[0].Token)
	}
	return b.String()
}

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// permits returns the permits the holders of a shared id hold.
func permits(hs []backend.HolderInfo) int {
	n := 0
	for _, h := range hs {
		n += h.Permits
	}
	return n
}

func printInspection(out io.Writer, in backend.Inspection) {
	fmt.Fprintf(out, "id:      %s\n", in.ID)
	if in.Capacity > 0 {
		fmt.Fprintf(out, "shared:  capacity %d, %d held by %d leases\n", in.Capacity, permits(in.Holders), len(in.Holders))
		fmt.Fprintf(out, "  %-20s %-8s %-7s %s\n", "fence", "token", "permits", "ttl")
		for _, h := range in.Holders {
			fmt.Fprintf(out, "  %-20d %-8s %-7d %v\n", h.Fence, h.Holder, h.Permits, round(h.TTL))
		}
	} else if in.Held {
		fmt.Fprintf(out, "held:    yes\nfence:   %d\nttl:     %v\nholder:  %s\n", in.Fence, round(in.TTL), in.Holder)
	} else {
		fmt.Fprintf(out, "held:    no\n")
	}
	fmt.Fprintf(out, "waiters: %d\n", in.QueueLen)
	if len(in.Waiters) == 0 {
		return
	}
	fmt.Fprintf(out, "  %-4s %-10s %-8s %-10s %s\n", "#", "ticket", "token", "deadline", "permits")
	for i, w := range in.Waiters {
		p := "-"
		if w.Permits > 0 {
			p = strconv.Itoa(w.Permits)
		}
		fmt.Fprintf(out, "  %-4d %-10d %-8s %-10v %s\n", i+1, w.Ticket, w.Token, round(w.Deadline), p)
	}
	if in.QueueLen > len(in.Waiters) {
		fmt.Fprintf(out, "  ... and %d more\n", in.QueueLen-len(in.Waiters))
	}
}

// inspectionJSON is the -json form of an inspection; durations in
// milliseconds.
type inspectionJSON struct {
	ID       string       `json:"id"`
	Held     bool         `json:"held"`
	Fence    uint64       `json:"fence,omitempty"`
	TTLMs    int64        `json:"ttl_ms,omitempty"`
	Holder   string       `json:"holder,omitempty"`
	QueueLen int          `json:"queue_len"`
	Waiters  []waiterJSON `json:"waiters"`
	// Capacity and Holders: a shared id's (semaphore, reader-writer lock).
	Capacity int          `json:"capacity,omitempty"`
	Holders  []holderJSON `json:"holders,omitempty"`
}

type waiterJSON struct {
	Ticket     uint64 `json:"ticket"`
	Token      string `json:"token"`
	DeadlineMs int64  `json:"deadline_ms"`
	Permits    int    `json:"permits,omitempty"`
}

type holderJSON struct {
	Fence   uint64 `json:"fence"`
	Token   string `json:"token"`
	TTLMs   int64  `json:"ttl_ms"`
	Permits int    `json:"permits"`
}

func toJSON(in backend.Inspection) inspectionJSON {
	j := inspectionJSON{ID: in.ID, Held: in.Held, Fence: in.Fence, TTLMs: in.TTL.Milliseconds(), Holder: in.Holder,
		QueueLen: in.QueueLen, Waiters: []waiterJSON{}, Capacity: in.Capacity}
	for _, w := range in.Waiters {
		j.Waiters = append(j.Waiters, waiterJSON{Ticket: w.Ticket, Token: w.Token, DeadlineMs: w.Deadline.Milliseconds(), Permits: w.Permits})
	}
	for _, h := range in.Holders {
		j.Holders = append(j.Holders, holderJSON{Fence: h.Fence, Token: h.Holder, TTLMs: h.TTL.Milliseconds(), Permits: h.Permits})
	}
	return j
}
