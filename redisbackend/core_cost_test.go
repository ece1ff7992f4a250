package redisbackend

import (
	"testing"
	"time"

	"github.com/redislocker/lock"
)

// TestCoreCommandCounts counts, through the lock package over this
// backend, what a user's calls cost in client commands (the pub/sub
// connection apart): uncontended Acquire + Release = 2, and a contended
// acquisition in steady state (the process already waits on the id, so it
// is subscribed) = its enqueue + the holder's release + its grant = 3.
func TestCoreCommandCounts(t *testing.T) {
	e := newEnv(t)
	ba, ca := e.backend(nil)
	bb, cb := e.backend(nil)
	la, err := lock.New(ba, &lock.Options{WaiterTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := lock.New(bb, &lock.Options{WaiterTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	ttl := 30 * time.Second
	// Load the scripts and open the connections.
	if r, err := la.Acquire(ctx, "warm", ttl); err != nil || !r.Acquired {
		t.Fatal(r, err)
	} else {
		_ = r.Lease.Release(ctx)
	}
	_ = bb.Release(ctx, "warm", "nobody")
	ca.take()
	cb.take()

	r, err := la.Acquire(ctx, "u", ttl)
	if err != nil || !r.Acquired || r.WasInUse {
		t.Fatalf("uncontended Acquire = %+v, %v", r, err)
	}
	if err := r.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	expectCost(t, ca, "lock: uncontended Acquire + Release", 2, 2)

	// A holds; B1 (process B) queues, so B is subscribed to the id.
	held, err := la.Acquire(ctx, "c", ttl)
	if err != nil || !held.Acquired {
		t.Fatal(held, err)
	}
	type res struct {
		r   lock.Result
		err error
	}
	b1, b2 := make(chan res, 1), make(chan res, 1)
	go func() { r, err := lb.Acquire(ctx, "c", ttl); b1 <- res{r, err} }()
	queue := bb.keyNames("c").Queue
	eventually(t, "B1 queues", func() bool { return e.raw.ZCard(ctx, queue).Val() == 1 })
	ca.take()
	cb.take()
	// B2, in the same process: no fast-path try, one enqueue.
	go func() { r, err := lb.Acquire(ctx, "c", ttl); b2 <- res{r, err} }()
	eventually(t, "B2 queues", func() bool { return e.raw.ZCard(ctx, queue).Val() == 2 })
	expectCost(t, cb, "B2's enqueue while its process already waits on the id", 1, 1)
	// A releases: B1 is woken and granted; B1 releases: B2 is granted.
	if err := held.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got1 := <-b1
	if got1.err != nil || !got1.r.Acquired || !got1.r.WasInUse {
		t.Fatalf("B1 = %+v, %v", got1.r, got1.err)
	}
	expectCost(t, ca, "A's release", 1, 1)
	expectCost(t, cb, "B1's grant", 1, 1)
	if err := got1.r.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got2 := <-b2
	if got2.err != nil || !got2.r.Acquired {
		t.Fatalf("B2 = %+v, %v", got2.r, got2.err)
	}
	// B1's release (the holder's) + B2's grant; with B2's enqueue above,
	// B2's acquisition cost 3 commands.
	expectCost(t, cb, "B1's release + B2's grant", 2, 2)
	_ = got2.r.Lease.Release(ctx)
}
