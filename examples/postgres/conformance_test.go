package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/conformance"
)

// harness makes backends, each with its own pool (a separate "process"),
// on one schema of the test database.
type harness struct {
	opts  Options
	admin *pgxpool.Pool
}

// Every optional harness capability but ClockAdvancer (the server's clock
// runs at real speed), so that no property is skipped.
var (
	_ conformance.Expirer          = (*harness)(nil)
	_ conformance.StateChecker     = (*harness)(nil)
	_ conformance.Forgetter        = (*harness)(nil)
	_ conformance.NotifierDropper  = (*harness)(nil)
	_ conformance.SubscribeDelayer = (*harness)(nil)
	_ conformance.Limiter          = (*harness)(nil)
)

// newSchema returns a harness on a new schema, dropped at the end of t.
func newSchema(t testing.TB, name string, opts Options) *harness {
	t.Helper()
	admin := newPool(t)
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
			t.Errorf("dropping the test schema %s: %v", name, err)
		}
	})
	opts.Schema = name
	return &harness{opts: opts, admin: admin}
}

func (h *harness) NewBackend(t *testing.T) backend.Backend {
	return h.newBackend(t)
}

func (h *harness) newBackend(t *testing.T) *Backend {
	t.Helper()
	b, err := New(context.Background(), newPool(t), &h.opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ExpireNow ends id's lease (every live lease of a shared id) now, as its
// TTL running out would: no wake-up.
func (h *harness) ExpireNow(t *testing.T, id string) {
	_, err := h.admin.Exec(context.Background(), fmt.Sprintf(`
		WITH s AS (UPDATE %[1]s.holders SET expiry = clock_timestamp() WHERE id = $1 AND expiry > clock_timestamp())
		UPDATE %[1]s.ids SET expiry = clock_timestamp() WHERE id = $1 AND token IS NOT NULL`, h.opts.Schema), []byte(id))
	if err != nil {
		t.Fatal(err)
	}
}

// ForgetIdle deletes what the sweep deletes once id has been idle for
// CounterIdle: its counter row (when its fence is behind the clock, as the
// sweep requires), its waiter rows and its shared leases' rows.
func (h *harness) ForgetIdle(t *testing.T, id string) {
	_, err := h.admin.Exec(context.Background(), fmt.Sprintf(`
		WITH w AS (DELETE FROM %[1]s.waiters WHERE id = $1), s AS (DELETE FROM %[1]s.holders WHERE id = $1)
		DELETE FROM %[1]s.ids WHERE id = $1 AND fence < %[1]s.us(clock_timestamp() - 'epoch')`, h.opts.Schema), []byte(id))
	if err != nil {
		t.Fatal(err)
	}
}

// ours returns b as a Backend of this harness.
func ours(t *testing.T, b backend.Backend) *Backend {
	pb, ok := b.(*Backend)
	if !ok {
		t.Fatalf("%T is not a backend of this harness", b)
	}
	return pb
}

// DropNotifier ends b's listening connection from the server's side.
func (h *harness) DropNotifier(t *testing.T, b backend.Backend) {
	pb := ours(t, b)
	var ok bool
	err := h.admin.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", int32(pb.l.pid.Load())).Scan(&ok)
	if err != nil || !ok {
		t.Fatalf("DropNotifier: terminating the listening connection (pid %d): %v, %v", pb.l.pid.Load(), ok, err)
	}
}

// DelaySubscribe makes b's later subscriptions register only d after
// Subscribe starts them, as a slow store would confirm them (d == 0 ends
// it): a Subscribe that returned before would lose the wake-ups between.
func (h *harness) DelaySubscribe(t *testing.T, b backend.Backend, d time.Duration) {
	ours(t, b).l.delay.Store(int64(d))
}

// StateLeft lists id's live lease (or live shared leases) and every queue
// row of id, live or dead.
// The ids row stays (it holds the documented counters) and is not reported;
// an expired lease in it is free to every step, as an expired Redis key is
// gone.
func (h *harness) StateLeft(t *testing.T, id string) []string {
	rows, err := h.admin.Query(context.Background(), fmt.Sprintf(`
		SELECT 'lease of ' || encode(token, 'escape') FROM %[1]s.ids
			WHERE id = $1 AND token IS NOT NULL AND expiry > clock_timestamp()
		UNION ALL
		SELECT 'lease of ' || encode(token, 'escape') FROM %[1]s.holders
			WHERE id = $1 AND expiry > clock_timestamp()
		UNION ALL
		SELECT 'waiter ' || encode(token, 'escape') || ' (ticket ' || ticket || ')' FROM %[1]s.waiters
			WHERE id = $1`, h.opts.Schema), []byte(id))
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		left = append(left, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return left
}

func TestConformance(t *testing.T) {
	needDB(t)
	newSchema(t, "locktest_conformance", Options{}) // created once, dropped at the end
	// Small limits, so that the suite can fill a queue and overrun a purge.
	opts := Options{Schema: "locktest_conformance", MaxWaiters: 64, PurgeLimit: 8}
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return &harness{opts: opts, admin: newPool(t)}
	})
}

// Limits tells the suite the queue cap and purge limit it may fill, and
// claims full conformance: a property the suite would skip fails.
func (h *harness) Limits() conformance.Limits {
	return conformance.Limits{MaxWaiters: h.opts.MaxWaiters, PurgeLimit: h.opts.PurgeLimit, Strict: true}
}
