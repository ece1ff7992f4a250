package redisbackend

import (
	"fmt"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

// TestDistinctIDsLeaveOnlyExpiringKeys (H2): 2,000 distinct ids, each
// locked once through the Backend (one AcquireBatch, one Release each),
// leave one key per id, the fence key, with a TTL of at most an hour; no
// key is left without a TTL, so the server is back to nothing for these
// ids an hour after their last grant. (The scripts' own test waits for the
// keys to go, with the bound cut short.)
func TestDistinctIDsLeaveOnlyExpiringKeys(t *testing.T) {
	e, b := newEnvBackend(t)
	const n = 2000
	reqs := make([]backend.AcquireRequest, n)
	for i := range reqs {
		reqs[i] = req(fmt.Sprint("order-", i), "A", false)
	}
	grants, err := b.AcquireBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range grants {
		if g.Err != nil || !g.Acquired {
			t.Fatalf("%s: %+v", reqs[i].ID, g)
		}
		if err := b.Release(ctx, reqs[i].ID, "A"); err != nil {
			t.Fatal(err)
		}
	}
	ks, _ := keys.New(e.prefix)
	left := e.keysOf(escapeForTest(e.prefix))
	if len(left) != n {
		t.Errorf("%d keys left by %d ids locked once, want one each (the fence key)", len(left), n)
	}
	for key, pttl := range left {
		_, suffix, err := ks.Parse(key)
		if err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		if suffix != keys.SuffixCounters || pttl <= 0 || pttl > time.Hour {
			t.Fatalf("key %q (PTTL %v) left after a release; want only fence keys, each with a TTL of at most an hour", key, pttl)
		}
	}
}
