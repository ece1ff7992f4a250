package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/redis/scripts"
)

// batchClient answers acquire_many and acquire calls as the scripts would
// for free ids: a token "T<i>" is granted with fence i, a token "F<i>"
// finds its queue full. It records the calls of each round trip but the
// wire check, which passes.
type batchClient struct {
	trips [][]Call
}

func (b *batchClient) Eval(ctx context.Context, c Call, via Via) Reply {
	if c.Script.Name == scripts.Wire.Name {
		return Reply{} // the wire check passes; not a trip of the steps
	}
	return b.EvalAll(ctx, []Call{c}, via)[0]
}

func (b *batchClient) EvalAll(_ context.Context, calls []Call, _ Via) []Reply {
	b.trips = append(b.trips, calls)
	out := make([]Reply, len(calls))
	for i, c := range calls {
		if c.Script.Name == scripts.Acquire.Name {
			tok := c.Args[0]
			n, _ := strconv.Atoi(tok[1:])
			if tok[0] == 'F' {
				out[i].Err = errors.New(scripts.CodeQueueFull + " the queue is full")
			} else {
				out[i].Ints = []int64{1, int64(n), 1000, 0, 0, 0, 0}
			}
			continue
		}
		if c.Script.Name != scripts.AcquireMany.Name {
			out[i].Err = fmt.Errorf("unexpected script %s", c.Script.Name)
			continue
		}
		for a := 4; a+4 <= len(c.Args); a += 4 { // after 3 constants and the inbox
			tok := c.Args[a]
			n, _ := strconv.Atoi(tok[1:])
			if tok[0] == 'F' {
				out[i].Ints = append(out[i].Ints, 1, 0, 0, 0, 0, 0, 0, 0)
			} else {
				out[i].Ints = append(out[i].Ints, 0, 1, int64(n), 1000, 0, 0, 0, 0)
			}
		}
	}
	return out
}

func (b *batchClient) Classify(err error) (backend.Kind, Refusal) {
	if err == nil {
		return backend.KindAnswer, NotRefused
	}
	return backend.KindAnswer, NotRefused
}

// AcquireBatch sends one acquire_many call per chunk of at most
// scripts.MaxAcquireBatch requests on one server (a tracking connection
// too), and one per hash slot on a cluster, all in one round trip; the results come back in request order, with ErrQueueFull
// per request.
func TestAcquireBatchGroups(t *testing.T) {
	const n = 2*scripts.MaxAcquireBatch + 2
	reqs := make([]backend.AcquireRequest, n)
	for i := range reqs {
		tok := "T" + strconv.Itoa(i+1)
		if i%7 == 3 {
			tok = "F" + strconv.Itoa(i+1)
		}
		reqs[i] = backend.AcquireRequest{ID: fmt.Sprint("id-", i%5), Token: tok, TTL: time.Second}
	}
	slots := map[int]int{} // slot -> requests
	for _, r := range reqs {
		slots[keys.SlotOf(r.ID)]++
	}
	bySlot := 0
	for _, c := range slots {
		bySlot += (c + scripts.MaxAcquireBatch - 1) / scripts.MaxAcquireBatch
	}
	for _, tc := range []struct {
		cluster, tracking bool
		calls             int
	}{
		{false, false, 3}, // 64 + 64 + 2
		{true, false, bySlot},
		{false, true, 3}, // a tracking connection (inbox keys only) batches alike
	} {
		cluster := tc.cluster
		t.Run(fmt.Sprintf("cluster=%v,tracking=%v", tc.cluster, tc.tracking), func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Tracking = tc.tracking
			c := &batchClient{}
			s := newTestBackend(cfg, c, cluster, false)
			out, err := s.AcquireBatch(context.Background(), reqs)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.trips) != 1 || len(c.trips[0]) != tc.calls {
				t.Fatalf("%d round trips, the first of %d calls; want 1 of %d", len(c.trips), len(c.trips[0]), tc.calls)
			}
			want := scripts.AcquireMany.Name
			for _, call := range c.trips[0] {
				if call.Script.Name != want {
					t.Fatalf("a call of %s, want %s", call.Script.Name, want)
				}
				if len(call.Keys) > 5*scripts.MaxAcquireBatch {
					t.Fatalf("a call of %d keys: more than %d ids", len(call.Keys), scripts.MaxAcquireBatch)
				}
				if !cluster {
					continue
				}
				for _, k := range call.Keys {
					if keys.Slot(k) != keys.Slot(call.Keys[0]) {
						t.Fatalf("one call spans slots on a cluster: %v", call.Keys)
					}
				}
			}
			for i, r := range reqs {
				g := out[i]
				if r.Token[0] == 'F' {
					if !errors.Is(g.Err, backend.ErrQueueFull) {
						t.Fatalf("request %d (%s): %+v; want ErrQueueFull", i, r.Token, g)
					}
					continue
				}
				if g.Err != nil || !g.Acquired || g.Fence != uint64(i+1) {
					t.Fatalf("request %d (%s): %+v; want its own grant, fence %d", i, r.Token, g, i+1)
				}
			}
		})
	}
}

// A batch that mixes mutex and shared requests: the mutex requests go in
// acquire_many calls, each shared one in an acquire_shared call after
// them, and every call's requests keep their positions in the batch.
func TestAcquireBatchMixesShared(t *testing.T) {
	reqs := []backend.AcquireRequest{
		{ID: "m0", Token: "T", TTL: time.Second},
		{ID: "s1", Token: "T", TTL: time.Second, Capacity: 3, Permits: 1},
		{ID: "m2", Token: "T", TTL: time.Second},
		{ID: "s3", Token: "T", TTL: time.Second, Capacity: 3, Permits: 3},
		{ID: "m4", Token: "T", TTL: time.Second},
	}
	e := New(testConfig(t), false)
	b := e.AcquireBatchCalls(reqs)
	if len(b.Calls) != 3 || b.Calls[0].Script.Name != "acquire_many" ||
		b.Calls[1].Script.Name != "acquire_shared" || b.Calls[2].Script.Name != "acquire_shared" {
		t.Fatalf("calls %d; want acquire_many, then acquire_shared twice", len(b.Calls))
	}
	if got := fmt.Sprint(b.groups[0].Pos); got != "[0 2 4]" {
		t.Errorf("the mutex requests' positions %s, want [0 2 4]", got)
	}
	if got := fmt.Sprint(b.shared); got != "[1 3]" {
		t.Errorf("the shared requests' positions %s, want [1 3]", got)
	}
	for i, c := range b.Calls[1:] {
		if want := reqs[b.shared[i]].ID; !strings.Contains(c.Keys[0], want) {
			t.Errorf("acquire_shared call %d has keys %v, want %s's", i, c.Keys, want)
		}
	}
}
