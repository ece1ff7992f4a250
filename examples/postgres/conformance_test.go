package postgres

import (
	"context"
	"fmt"
	"testing"

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

var (
	_ conformance.Expirer      = (*harness)(nil)
	_ conformance.StateChecker = (*harness)(nil)
)

// newSchema returns a harness on a new schema, dropped at the end of t.
func newSchema(t *testing.T, name string, opts Options) *harness {
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

// ExpireNow ends id's lease now, as its TTL running out would: no wake-up.
func (h *harness) ExpireNow(t *testing.T, id string) {
	_, err := h.admin.Exec(context.Background(),
		"UPDATE "+h.opts.Schema+".ids SET expiry = clock_timestamp() WHERE id = $1 AND token IS NOT NULL", []byte(id))
	if err != nil {
		t.Fatal(err)
	}
}

// StateLeft lists id's live lease and every queue row of id. The ids row
// stays (it holds the documented counters) and is not reported; an expired
// lease in it is free to every step, as an expired Redis key is gone.
func (h *harness) StateLeft(t *testing.T, id string) []string {
	rows, err := h.admin.Query(context.Background(), fmt.Sprintf(`
		SELECT 'lease of ' || encode(token, 'escape') FROM %[1]s.ids
			WHERE id = $1 AND token IS NOT NULL AND expiry > clock_timestamp()
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
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return &harness{opts: Options{Schema: "locktest_conformance"}, admin: newPool(t)}
	})
}
