package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/keys"
	"github.com/redislocker/lock/internal/scripts"
)

// tool runs the commands against one Redis deployment.
type tool struct {
	ctx     context.Context
	client  redis.UniversalClient
	ks      keys.Keyspace
	timeout time.Duration
	publish scripts.Publish
}

// newTool returns the tool for the deployment at addrs, on a client of its
// own (the caller closes it), each call bounded by timeout; sharded wakes
// with SPUBLISH.
func newTool(ctx context.Context, addrs []string, ks keys.Keyspace, timeout time.Duration, sharded bool) *tool {
	client := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: addrs, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		MaxRetries: 1, DialerRetries: 2, ContextTimeoutEnabled: true,
	})
	t := &tool{ctx: ctx, client: client, ks: ks, timeout: timeout, publish: scripts.Classic}
	if sharded {
		t.publish = scripts.Sharded
	}
	return t
}

// eval runs s with EVALSHA, and EVAL when the server does not know it,
// bounded by the timeout.
func (t *tool) eval(s scripts.Script, k, a []string) *redis.Cmd {
	ctx, cancel := context.WithTimeout(t.ctx, t.timeout)
	defer cancel()
	args := make([]any, len(a))
	for i, v := range a {
		args[i] = v
	}
	cmd := t.client.EvalSha(ctx, s.SHA1, k, args...)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = t.client.Eval(ctx, s.Source, k, args...)
	}
	return cmd
}

func (t *tool) inspect(id string, maxWaiters int) (backend.Inspection, error) {
	k, a := scripts.InspectCall(t.ks.For(id), maxWaiters)
	r, err := t.eval(scripts.Inspect, k, a).StringSlice()
	if err != nil {
		return backend.Inspection{ID: id}, err
	}
	return scripts.ParseInspect(id, r)
}

// errRefused is a forced release that the script refused.
var errRefused = errors.New("not released")

func (t *tool) forceRelease(id string, fence uint64) error {
	k, a := scripts.ForceReleaseCall(t.ks.For(id), fence, 100, t.publish)
	err := t.eval(scripts.ForceRelease, k, a).Err()
	if err == nil {
		return nil
	}
	msg := strings.TrimPrefix(err.Error(), "ERR ")
	if code := scripts.ErrorCode(msg); code == scripts.CodeNotHeld {
		return fmt.Errorf("%w: %s", errRefused, strings.TrimPrefix(msg, code+" "))
	}
	return err
}

// watch prints id's state every interval, count times (0: until ctx ends),
// and a line for each change of holder.
func (t *tool) watch(id string, interval time.Duration, count int, out io.Writer) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var w watcher
	for n := 1; ; n++ {
		in, err := t.inspect(id, 1)
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
	if in.Held {
		fmt.Fprintf(&b, "held fence=%d ttl=%v holder=%s", in.Fence, round(in.TTL), in.Holder)
	} else {
		b.WriteString("free")
	}
	fmt.Fprintf(&b, " waiters=%d", in.QueueLen)
	if len(in.Waiters) > 0 {
		fmt.Fprintf(&b, " head=%s", in.Waiters[0].Token)
	}
	return b.String()
}

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func printInspection(out io.Writer, in backend.Inspection) {
	fmt.Fprintf(out, "id:      %s\n", in.ID)
	if in.Held {
		fmt.Fprintf(out, "held:    yes\nfence:   %d\nttl:     %v\nholder:  %s\n", in.Fence, round(in.TTL), in.Holder)
	} else {
		fmt.Fprintf(out, "held:    no\n")
	}
	fmt.Fprintf(out, "waiters: %d\n", in.QueueLen)
	if len(in.Waiters) == 0 {
		return
	}
	fmt.Fprintf(out, "  %-4s %-10s %-8s %s\n", "#", "ticket", "token", "deadline")
	for i, w := range in.Waiters {
		fmt.Fprintf(out, "  %-4d %-10d %-8s %v\n", i+1, w.Ticket, w.Token, round(w.Deadline))
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
}

type waiterJSON struct {
	Ticket     uint64 `json:"ticket"`
	Token      string `json:"token"`
	DeadlineMs int64  `json:"deadline_ms"`
}

func toJSON(in backend.Inspection) inspectionJSON {
	j := inspectionJSON{ID: in.ID, Held: in.Held, Fence: in.Fence, TTLMs: in.TTL.Milliseconds(), Holder: in.Holder,
		QueueLen: in.QueueLen, Waiters: []waiterJSON{}}
	for _, w := range in.Waiters {
		j.Waiters = append(j.Waiters, waiterJSON{Ticket: w.Ticket, Token: w.Token, DeadlineMs: w.Deadline.Milliseconds()})
	}
	return j
}
