package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// With a Wait, grants, extends and batches of grants ask for the WAIT; a
// grant or an extend that too few replicas acknowledged is
// ErrNotReplicated, and a queued request is not affected. Without one no
// call asks for it and no reply is short.
func TestStepsShortOfReplicas(t *testing.T) {
	granted := []int64{1, 5, 1000, 0, 0, 0, 0}
	queued := []int64{0, 0, 0, 500, 1, 7, 1}
	req := backend.AcquireRequest{ID: "x", Token: "T", TTL: time.Second}
	cfg := testConfig(t)
	e := New(cfg, false)
	if e.AcquireCall(req).Wait || e.ExtendCall(backend.ExtendRequest{ID: "x", Token: "T", TTL: time.Second}).Wait {
		t.Fatal("a call asks for a WAIT without a Wait")
	}
	if g, err := e.AcquireReply(Reply{Ints: granted}); err != nil || !g.Acquired {
		t.Fatalf("a grant without a Wait: %+v, %v", g, err)
	}
	cfg.Wait = Wait{Replicas: 2, Timeout: 100 * time.Millisecond}
	e = New(cfg, false)
	if !e.AcquireCall(req).Wait || !e.ExtendCall(backend.ExtendRequest{ID: "x", Token: "T", TTL: time.Second}).Wait ||
		e.ReleaseCall("x", "T").Wait || e.LeaveCall("x", "T").Wait {
		t.Fatal("with a Wait, acquire and extend must ask for the WAIT, release and leave not")
	}
	if _, err := e.AcquireReply(Reply{Ints: granted, Acks: 1}); !errors.Is(err, backend.ErrNotReplicated) {
		t.Fatalf("a grant 1 of 2 replicas have: %v, want ErrNotReplicated", err)
	}
	if g, err := e.AcquireReply(Reply{Ints: granted, Acks: 2}); err != nil || !g.Acquired {
		t.Fatalf("a grant 2 of 2 replicas have: %+v, %v", g, err)
	}
	if g, err := e.AcquireReply(Reply{Ints: queued}); err != nil || !g.Queued {
		t.Fatalf("a queued request, no replica: %+v, %v; want it queued", g, err)
	}
	if err := e.ExtendReply(Reply{Acks: 1}); !errors.Is(err, backend.ErrNotReplicated) {
		t.Fatalf("an extend 1 of 2 replicas have: %v, want ErrNotReplicated", err)
	}
	batch := e.AcquireBatchCalls([]backend.AcquireRequest{req, {ID: "y", Token: "U", TTL: time.Second, Wait: true, WaiterTTL: time.Second}})
	if len(batch.Calls) != 1 || !batch.Calls[0].Wait {
		t.Fatalf("batch calls %+v, want one that asks for the WAIT", batch.Calls)
	}
	out, err := e.AcquireBatchReply(batch, []Reply{{Ints: append(append([]int64{0}, granted...), append([]int64{0}, queued...)...), Acks: 1}})
	if err != nil || !errors.Is(out[0].Err, backend.ErrNotReplicated) || out[1].Err != nil || !out[1].Queued {
		t.Fatalf("batch 1 of 2 replicas have: %+v, %v; want the grant ErrNotReplicated, the waiter queued", out, err)
	}
}

// waitClient is a Sender and Replicas that runs each call through
// EvalWait with acks replicas, and records the calls sent either way.
type waitClient struct {
	fakeClient
	acks   int64
	waited []string // scripts sent with a WAIT
	plain  []string // scripts sent without
}

func (w *waitClient) Eval(ctx context.Context, c Call, via Via) Reply {
	if c.Script.Name != scripts.Wire.Name {
		w.plain = append(w.plain, c.Script.Name)
	}
	return Reply{}
}

func (w *waitClient) Master(context.Context, string) (string, error) { return "", nil }
func (w *waitClient) Reload(context.Context)                         {}
func (w *waitClient) EvalWait(_ context.Context, _ string, _ bool, calls []Call, _ Via, n int, _ time.Duration) ([]Reply, int64) {
	out := make([]Reply, len(calls))
	for i, c := range calls {
		w.waited = append(w.waited, c.Script.Name)
		out[i].Ints = []int64{1, 5, 1000, 0, 0, 0, 0}
	}
	return out, w.acks
}

// The Runner sends a call that asks for the WAIT through Replicas and
// puts the WAIT's reply in the Reply's Acks; Unconfirmed releases the
// token without a WAIT.
func TestRunnerWait(t *testing.T) {
	cfg := testConfig(t)
	cfg.Wait = Wait{Replicas: 2, Timeout: 100 * time.Millisecond}
	e := New(cfg, false)
	w := &waitClient{acks: 1}
	run := NewRunner(e, w, w, false)
	req := backend.AcquireRequest{ID: "x", Token: "T", TTL: time.Second}
	r, err := run.Send(context.Background(), e.AcquireCall(req))
	if err != nil || r.Acks != 1 {
		t.Fatalf("Send = %+v, %v; want the WAIT's 1 in Acks", r, err)
	}
	if _, err := e.AcquireReply(r); !errors.Is(err, backend.ErrNotReplicated) {
		t.Fatalf("AcquireReply = %v, want ErrNotReplicated", err)
	}
	run.Unconfirmed(context.Background(), req.ID, req.Token)
	if len(w.waited) != 1 || w.waited[0] != scripts.Acquire.Name || len(w.plain) != 1 || w.plain[0] != scripts.Release.Name {
		t.Fatalf("sent %v with a WAIT and %v without; want acquire, then release", w.waited, w.plain)
	}
}
