package adaptertest

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
	"github.com/redislocker/lock/internal/redis/keys"
)

// Wire checks the wire protocol check of a Backend (keys.SuffixWire):
//
//   - under a prefix whose marker holds another version, the Backend's
//     first step fails, unsent, with the error that names both versions
//     and the prefix, and writes nothing: the marker is the only key under
//     the prefix, as it was, and so is every later step's;
//   - once the marker is gone (the other processes stopped), the next
//     step sets it to keys.WireVersion with a TTL of keys.WireTTL;
//   - a second Backend of the same version shares the prefix: a hand-off
//     between the two works, and neither checks again within
//     keys.WireRefresh.
func Wire(t *testing.T, a Adapter) {
	marker := a.Keys.Wire()
	other := strconv.Itoa(keys.WireVersion + 1)
	const set = "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1"
	a.Int(t, "EVAL", set, "1", marker, other, "60000")
	under := func() int64 { // the keys under the prefix
		return a.Int(t, "EVAL", "return #redis.call('KEYS', ARGV[1])", "0", a.Keys.PrefixPattern())
	}
	holds := func() int64 {
		return a.Int(t, "EVAL", "return tonumber(redis.call('GET', KEYS[1])) or -1", "1", marker)
	}

	b, l := a.Backend(t)
	l.TakeTrips() // what New sent (rueidis checks that the server can serve Tracking)
	want := "wire protocol version " + other + ` found under prefix "` + a.Keys.Prefix() +
		`", this process speaks ` + strconv.Itoa(keys.WireVersion) + ": upgrade every process of the prefix together or use another prefix"
	for i, step := range []func() error{
		func() error { _, err := b.Acquire(ctx, Req("w", "A", true)); return err },
		func() error { return b.Release(ctx, "w", "A") },
	} {
		err := step()
		if err == nil || !strings.Contains(err.Error(), want) || !fallback.Unsent(err) {
			t.Fatalf("step %d under a marker of version %s = %v (kind %v); want an unsent error saying %q",
				i, other, err, backend.KindOf(err), want)
		}
		if n, v := under(), holds(); n != 1 || strconv.FormatInt(v, 10) != other {
			t.Fatalf("after a refused step: %d keys under the prefix, the marker holds %d; want the marker alone, holding %s", n, v, other)
		}
	}
	// A wire check per step (EVAL after a NOSCRIPT): nothing else.
	checks := l.Count("wire")
	trips := l.TakeTrips()
	for _, trip := range trips {
		if len(trip) != 1 || trip[0] != "wire" && trip[0] != "eval:wire" {
			t.Fatalf("the refused steps sent %v, want wire checks only", trips)
		}
	}
	if checks != 2 {
		t.Fatalf("the refused steps sent %v, want a wire check each", trips)
	}

	// The processes of the other version stopped; their marker expired.
	a.Int(t, "DEL", marker)
	g := MustAcquire(t, b, Req("w", "A", false))
	if !g.Acquired {
		t.Fatalf("the first step once the marker is gone: %+v, want a grant", g)
	}
	if v := holds(); v != keys.WireVersion {
		t.Fatalf("the marker holds %d after a check, want %d", v, keys.WireVersion)
	}
	if ttl := time.Duration(a.Int(t, "PTTL", marker)) * time.Millisecond; ttl <= 0 || ttl > keys.WireTTL {
		t.Fatalf("the marker's PTTL %v, want within (0, %v]", ttl, keys.WireTTL)
	}

	// A second Backend of this version shares the prefix.
	b2, l2 := a.Backend(t)
	HandOff(t, Subscribed(t, b2, "w"), b, b2, "w", "A", "B")
	if err := b2.Release(ctx, "w", "B"); err != nil {
		t.Fatal(err)
	}
	if n1, n2 := l.Count("wire"), l2.Count("wire"); n1 != 1 || n2 != 1 {
		t.Fatalf("wire checks: %d by the first Backend, %d by the second; want one each (the first step of each)", n1, n2)
	}
	if v := holds(); v != keys.WireVersion {
		t.Fatalf("the marker holds %d with two Backends of version %d", v, keys.WireVersion)
	}
}
