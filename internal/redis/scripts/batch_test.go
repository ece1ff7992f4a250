package scripts

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

// runAcquireMany sends reqs through AcquireMany, one call per group.
func runAcquireMany(t testing.TB, c *redis.Client, cs Consts, ks keys.Keyspace, reqs []backend.AcquireRequest, bySlot bool, limit int) []backend.BatchGrant {
	t.Helper()
	out := make([]backend.BatchGrant, len(reqs))
	for _, g := range GroupAcquires(reqs, bySlot, limit) {
		k, a := cs.AcquireMany(ks, g, testInbox(ks))
		vals, err := evalsha(context.Background(), c, AcquireMany, k, a).Int64Slice()
		if err != nil {
			t.Fatalf("acquire_many: %v", err)
		}
		if err := ScatterAcquireMany(out, g, vals); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// runAcquireEach sends reqs through acquire, one call each.
func runAcquireEach(t testing.TB, c *redis.Client, cs Consts, ks keys.Keyspace, reqs []backend.AcquireRequest) []backend.BatchGrant {
	t.Helper()
	out := make([]backend.BatchGrant, len(reqs))
	for i, r := range reqs {
		k, a := cs.Acquire(ks.For(r.ID), r, testInbox(ks))
		vals, err := evalsha(context.Background(), c, Acquire, k, a).Int64Slice()
		if err != nil {
			if e := MapError(err.Error()); e != nil {
				out[i].Err = e
				continue
			}
			t.Fatalf("acquire: %v", err)
		}
		g, err := ParseAcquire(vals)
		if err != nil {
			t.Fatal(err)
		}
		out[i].Grant = g
	}
	return out
}

// shape is what a grant says once the clock-made numbers (fences,
// tickets, TTLs) are reduced to what the semantics fix.
func shape(g backend.BatchGrant) string {
	return fmt.Sprintf("acquired=%v fence=%v queued=%v ticket=%v head=%v held=%v err=%v",
		g.Acquired, g.Fence > 0, g.Queued, g.Ticket > 0, g.Head, g.HolderTTL > 0, g.Err)
}

// TestAcquireManyMatchesAcquire runs the same requests (free ids, held
// ids, waiters, a full queue, a retry, a duplicate) through AcquireMany and
// through one acquire per request, on two keyspaces, and expects the same
// outcome for each, with fences and tickets increasing in request order.
func TestAcquireManyMatchesAcquire(t *testing.T) {
	c := client(t)
	cs := NewConsts(2, 100, Classic)
	var reqs []backend.AcquireRequest
	add := func(id, tok string, wait bool) {
		reqs = append(reqs, backend.AcquireRequest{ID: id, Token: tok, TTL: time.Minute, Wait: wait, WaiterTTL: time.Minute})
	}
	for i := range 20 {
		add(fmt.Sprint("free-", i), "A", i%2 == 0)
	}
	add("busy", "A", false)
	add("busy", "B", true)  // queued, head
	add("busy", "C", true)  // queued
	add("busy", "D", true)  // the queue is full (2 waiters)
	add("busy", "D", false) // a try: refused, not queued
	add("busy", "B", true)  // a retried enqueue: the same ticket
	add("busy", "A", false) // a retried grant: the same fence
	add("free-3", "Z", true)
	ksMany, ksEach := testKeys(t, c, "many:"), testKeys(t, c, "each:")
	many := runAcquireMany(t, c, cs, ksMany, reqs, false, 7) // several calls
	each := runAcquireEach(t, c, cs, ksEach, reqs)
	for i := range reqs {
		if shape(many[i]) != shape(each[i]) {
			t.Errorf("request %d %+v: AcquireMany gave %s, acquire gave %s", i, reqs[i], shape(many[i]), shape(each[i]))
		}
	}
	if !errors.Is(many[23].Err, backend.ErrQueueFull) {
		t.Errorf("the full queue gave %+v, want ErrQueueFull", many[23])
	}
	if many[25].Ticket != many[21].Ticket || many[26].Fence != many[20].Fence {
		t.Errorf("retries changed the ticket (%d, %d) or the fence (%d, %d)", many[21].Ticket, many[25].Ticket, many[20].Fence, many[26].Fence)
	}
	if many[22].Ticket <= many[21].Ticket {
		t.Errorf("tickets %d then %d: want increasing", many[21].Ticket, many[22].Ticket)
	}
}

// TestAcquireManyValidates sends bad input and expects LOCKBADARG with
// nothing written, also when only the last id's arguments are bad.
func TestAcquireManyValidates(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	ks := testKeys(t, c, "")
	good := []backend.AcquireRequest{
		{ID: "a", Token: "T", TTL: time.Second},
		{ID: "b", Token: "T", TTL: time.Second, Wait: true, WaiterTTL: time.Second},
	}
	g := GroupAcquires(good, false, 0)[0]
	k, a := NewConsts(10, 10, Classic).AcquireMany(ks, g, testInbox(ks))
	with := func(i int, v string) []string {
		out := append([]string(nil), a...)
		out[i] = v
		return out
	}
	cases := []struct {
		name string
		keys []string
		args []string
	}{
		{"max waiters 0", k, with(0, "0")},
		{"purge limit text", k, with(1, "x")},
		{"publish other command", k, with(2, "DEL")},
		{"last token empty", k, with(8, "")},
		{"last ttl 0", k, with(9, "0")},
		{"last wait 2", k, with(10, "2")},
		{"last waiter ttl 0", k, with(11, "0")},
		{"no inbox", k, with(3, "")},
		{"inbox of no kind", k, with(3, "Xname")},
		{"an extra argument", k, append(a, "X")},
		{"an argument missing", k, a[:len(a)-1]},
		{"a key missing", k[:len(k)-1], a},
		{"no id", nil, a[:4]},
	}
	for _, tc := range cases {
		err := evalsha(ctx, c, AcquireMany, tc.keys, tc.args).Err()
		if err == nil || ErrorCode(err.Error()) != CodeBadArg {
			t.Errorf("%s: %v, want LOCKBADARG", tc.name, err)
		}
	}
	if n := c.DBSize(ctx).Val(); n > 0 {
		var left []string
		iter := c.Scan(ctx, 0, ks.PrefixPattern(), 100).Iterator()
		for iter.Next(ctx) {
			left = append(left, iter.Val())
		}
		if len(left) > 0 {
			t.Fatalf("bad input wrote %v", left)
		}
	}
}

func TestGroupAcquires(t *testing.T) {
	var reqs []backend.AcquireRequest
	for i := range 1000 {
		reqs = append(reqs, backend.AcquireRequest{ID: fmt.Sprint("id-", i%600), Token: fmt.Sprint(i)})
	}
	for _, bySlot := range []bool{false, true} {
		seen := make([]bool, len(reqs))
		for _, g := range GroupAcquires(reqs, bySlot, 100) {
			if len(g.Reqs) == 0 || len(g.Reqs) > 100 || len(g.Reqs) != len(g.Pos) {
				t.Fatalf("bySlot=%v: a group of %d requests", bySlot, len(g.Reqs))
			}
			for j, r := range g.Reqs {
				i := g.Pos[j]
				if seen[i] || reqs[i] != r {
					t.Fatalf("bySlot=%v: request %d misplaced or twice", bySlot, i)
				}
				seen[i] = true
				if j > 0 && g.Pos[j-1] >= i {
					t.Fatalf("bySlot=%v: requests out of order in a group", bySlot)
				}
				if want := keys.SlotOf(r.ID); bySlot && g.Slot != want || !bySlot && g.Slot != -1 {
					t.Fatalf("bySlot=%v: id %q (slot %d) in a group of slot %d", bySlot, r.ID, want, g.Slot)
				}
			}
		}
		for i, ok := range seen {
			if !ok {
				t.Fatalf("bySlot=%v: request %d in no group", bySlot, i)
			}
		}
	}
	if n := len(GroupAcquires(reqs, false, 0)); n != (1000+MaxAcquireBatch-1)/MaxAcquireBatch {
		t.Fatalf("%d groups of the default size for 1000 requests", n)
	}
	if strings.Count(AcquireMany.Source, "local function acquire_step") != 1 {
		t.Fatal("acquire_many does not include acquire_step once")
	}
}

// TestAcquireManyBatchChecks covers the call-wide reads of acquire_many
// (one EXISTS of the queue keys, each fence key read once): in a call with
// fresh ids, an id whose slot's fence key is ahead of the clock still gets
// that fence + 1, and the key holds it after the call (written once, at
// its end); a free id with a live waiter is not granted to another token;
// the fresh ids' fence keys expire.
func TestAcquireManyBatchChecks(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	cs := NewConsts(10, 100, Classic)
	ks := testKeys(t, c, "")

	// The test's ids are of distinct slots, so that "ahead" is the only
	// grant of its slot in its call.
	slots := map[int]string{}
	for _, id := range []string{"ahead", "waited", "fresh-1", "fresh-2", "fresh-3", "fresh-4"} {
		if other, ok := slots[ks.For(id).Slot]; ok {
			t.Fatalf("ids %s and %s share a slot", other, id)
		}
		slots[ks.For(id).Slot] = id
	}
	ahead := uint64(time.Now().Add(10 * time.Minute).UnixMicro())
	c.Set(ctx, ks.For("ahead").Fence, fmt.Sprint(ahead), time.Hour)
	// "waited": free, with a live waiter W at the head.
	waited := &opsScripts{t: t, c: c, id: "waited", ks: ks, k: ks.For("waited"), inbox: ks.Inbox("t", -1)}
	w := waited.k
	waited.grantFence(Acquire, "X")
	ak, aa := waited.acquireCall(cs, backend.AcquireRequest{ID: "waited", Token: "W", TTL: time.Minute, Wait: true, WaiterTTL: time.Minute})
	if r, err := run(t, c, Acquire, ak, aa).Int64Slice(); err != nil || r[4] != 1 {
		t.Fatalf("W not queued: %v, %v", r, err)
	}
	c.Del(ctx, w.Lock)

	req := func(id string) backend.AcquireRequest {
		return backend.AcquireRequest{ID: id, Token: "Y", TTL: time.Minute}
	}
	for _, tc := range []struct {
		name string
		reqs []backend.AcquireRequest
	}{
		{"fence ahead", []backend.AcquireRequest{req("fresh-1"), req("ahead"), req("fresh-2")}},
		{"live waiter", []backend.AcquireRequest{req("fresh-3"), req("waited"), req("fresh-4")}},
	} {
		out := runAcquireMany(t, c, cs, ks, tc.reqs, false, 0)
		for i, r := range tc.reqs {
			g := out[i]
			switch r.ID {
			case "ahead":
				if !g.Acquired || g.Fence != ahead+1 {
					t.Errorf("%s: %s got %+v, want fence %d", tc.name, r.ID, g, ahead+1)
				}
				if f, _ := c.Get(ctx, ks.For(r.ID).Fence).Uint64(); f != ahead+1 {
					t.Errorf("%s: %s: fence key %d after the call, want %d", tc.name, r.ID, f, ahead+1)
				}
			case "waited":
				if g.Acquired {
					t.Errorf("%s: %s granted to Y past its waiter W: %+v", tc.name, r.ID, g)
				}
			default:
				if !g.Acquired || g.Fence == 0 {
					t.Errorf("%s: fresh id %s got %+v", tc.name, r.ID, g)
				}
				if ttl := c.PTTL(ctx, ks.For(r.ID).Fence).Val(); ttl <= 0 || ttl > keys.FenceIdle {
					t.Errorf("%s: fresh id %s: fence key PTTL %v, want within (0, %v]", tc.name, r.ID, ttl, keys.FenceIdle)
				}
				if f, _ := c.Get(ctx, ks.For(r.ID).Fence).Uint64(); f != g.Fence {
					t.Errorf("%s: fresh id %s: fence key %d, want its grant's fence %d", tc.name, r.ID, f, g.Fence)
				}
			}
		}
	}
}
