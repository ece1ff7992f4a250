package redisbackend

import (
	"fmt"
	"testing"

	"github.com/redislocker/lock/backend"
)

// TestDistinctIDsLeaveOnlyExpiringKeys (H2): 2,000 distinct ids, each
// locked once through the Backend (one AcquireBatch, one Release each),
// leave no key of their own; what stays are keys of their hash slots (the
// fence keys, at most an hour, and the release records, at most
// keys.ReleaseKeep; keysOf checks their TTLs), so the server is back to
// nothing for these ids an hour after their last grant. (The scripts' own
// test waits for the keys to go, with the bound cut short.)
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
	for key, pttl := range e.keysOf(escapeForTest(e.prefix)) {
		t.Errorf("key %q (PTTL %v) of an id left after its release", key, pttl)
	}
}
