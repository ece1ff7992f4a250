package rueidisbackend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/engine"
	"github.com/redislocker/lock/internal/redis/keys"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/redisserver"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// TestNewOptions: defaults, validation, and the ClientOption that New
// builds its client from.
func TestNewOptions(t *testing.T) {
	e := newEnv(t)
	var built rueidis.ClientOption
	var userMu sync.Mutex
	var userKeys []string
	co := e.clientOption()
	co.OnInvalidations = func(msgs []rueidis.RedisMessage) {
		userMu.Lock()
		defer userMu.Unlock()
		for _, m := range msgs {
			k, _ := m.ToString()
			userKeys = append(userKeys, k)
		}
	}
	co.ClientTrackingOptions = []string{"OPTIN"}
	co.PipelineMultiplex = 3
	co.DisableAutoPipelining = true
	d, err := concrete(New(&Options{ClientOption: e.clientOption()}))
	if err != nil {
		t.Fatal(err)
	}
	if d.mode != Tracking || d.Prefix() != keys.DefaultPrefix || d.cfg.Limits.MaxWaiters != engine.DefaultMaxWaiters || d.cfg.Limits.PurgeLimit != engine.DefaultPurgeLimit {
		t.Fatalf("defaults: mode %v prefix %q maxWaiters %d purgeLimit %d", d.mode, d.Prefix(), d.cfg.Limits.MaxWaiters, d.cfg.Limits.PurgeLimit)
	}
	d.Close()
	b, err := concrete(New(&Options{ClientOption: co, Prefix: e.prefix, ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
		built = o
		return rueidis.NewClient(o)
	}}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !slices.Equal(built.ClientTrackingOptions, trackingOptions(b.cfg.Keys.InboxBase(b.cfg.Process))) || built.PipelineMultiplex != -1 ||
		built.DisableAutoPipelining || built.AlwaysRESP2 || built.DisableCache || built.BlockingPipeline < 1<<30 {
		t.Fatalf("the tracking client's option was not set up: tracking %v multiplex %d autopipelining off %v resp2 %v nocache %v blocking pipeline %d",
			built.ClientTrackingOptions, built.PipelineMultiplex, built.DisableAutoPipelining, built.AlwaysRESP2, built.DisableCache, built.BlockingPipeline)
	}
	if b.Resolution() != time.Millisecond {
		t.Fatalf("Resolution = %v", b.Resolution())
	}
	// The caller's OnInvalidations is still called, before the Backend
	// acts on them: with the invalidations of the Backend's inbox keys, the
	// only keys its client tracks.
	other, _ := e.backend(Tracking, nil) // same prefix
	mustAcquire(t, other, req("inv", "A", false))
	w := adaptertest.Subscribed(t, b, "inv")
	adaptertest.HandOff(t, w, other, b, "inv", "A", "B")
	userMu.Lock()
	seen := slices.Clone(userKeys)
	userMu.Unlock()
	if !slices.Contains(seen, b.Inbox("inv")) {
		t.Fatalf("the caller's OnInvalidations saw %q, want the inbox key %q", seen, b.Inbox("inv"))
	}
	for _, k := range seen {
		if !strings.HasPrefix(k, b.cfg.Keys.InboxBase(b.cfg.Process)) {
			t.Fatalf("the client was told of %q: it tracks a key that is not its inbox", k)
		}
	}
	_ = b.Leave(ctx, "inv", "B")

	for _, bad := range []Options{
		{ClientOption: e.clientOption(), Prefix: "a{b"},
		{ClientOption: e.clientOption(), MaxWaiters: -1},
		{ClientOption: e.clientOption(), PurgeLimit: -1},
		{ClientOption: e.clientOption(), PurgeLimit: 100001},
		{ClientOption: rueidis.ClientOption{InitAddress: []string{e.addr}, ReplicaOnly: true}},
		{}, // no address
	} {
		b, err := New(&bad)
		if err == nil {
			b.Close()
		}
		if !adaptertest.IsArgumentError(err, "opts.") {
			t.Errorf("New(%+v) = %v; want an *ArgumentError naming the field", bad, err)
		}
	}
	if _, err := New(nil); !adaptertest.IsArgumentError(err, "opts") {
		t.Errorf("New(nil) = %v; want an *ArgumentError naming opts", err)
	}
	if _, err := NewWithClient(nil, nil); !adaptertest.IsArgumentError(err, "client") {
		t.Errorf("NewWithClient(nil) = %v; want an *ArgumentError naming the client", err)
	}
	if _, err := NewWithClient(e.raw, &Options{ClientOption: e.clientOption()}); !adaptertest.IsArgumentError(err, "opts.") {
		t.Errorf("NewWithClient with a ClientOption = %v; want an *ArgumentError naming the field", err)
	}
	nb, err := concrete(NewWithClient(e.raw, nil))
	if err != nil || nb.mode != PubSub {
		t.Fatalf("NewWithClient = %v, %v", nb, err)
	}
	if err := nb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.raw.Do(ctx, e.raw.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("Close closed the caller's client: %v", err)
	}
}

// TestNewFallsBackToPubSub: when rueidis cannot build a tracking client
// (ErrNoCache: Redis < 6 or no RESP3), New builds one with DisableCache
// and uses pub/sub.
func TestNewFallsBackToPubSub(t *testing.T) {
	e := newEnv(t)
	var calls []bool
	b, err := concrete(New(&Options{ClientOption: e.clientOption(), Prefix: e.prefix, ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
		calls = append(calls, o.DisableCache)
		if !o.DisableCache {
			return nil, fmt.Errorf("HELLO: unknown command: %w", rueidis.ErrNoCache) // as a Redis 5 answers
		}
		return rueidis.NewClient(o)
	}}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.mode != PubSub || !slices.Equal(calls, []bool{false, true}) {
		t.Fatalf("mode %v after builds with DisableCache %v, want pubsub after [false true]", b.mode, calls)
	}
	w := adaptertest.Subscribed(t, b, "f")
	p, _ := e.backend(PubSub, nil)
	mustAcquire(t, p, req("f", "P", false))
	mustAcquire(t, b, req("f", "B", true))
	if err := p.Release(ctx, "f", "P"); err != nil {
		t.Fatal(err)
	}
	if got := w.Next(t); !adaptertest.IsGrant(got, "f", "B") {
		t.Fatalf("wake = %+v", got)
	}
	_ = b.Leave(ctx, "f", "B")

	// Any other build error is returned.
	boom := errors.New("boom")
	if _, err := New(&Options{ClientOption: e.clientOption(), ClientBuilder: func(rueidis.ClientOption) (rueidis.Client, error) { return nil, boom }}); !errors.Is(err, boom) {
		t.Fatalf("New with a failing builder = %v, want boom", err)
	}
}

// TestPubSubSubscriptions: one SUBSCRIBE per Backend (its inbox channel),
// however many ids and subscribers, confirmed before the first Subscribe
// returns; a message names the id and the
// head and reaches only that id's subscribers while they are subscribed;
// the inbox is kept after the last cancel and left on Close.
func TestPubSubSubscriptions(t *testing.T) {
	e := newEnv(t)
	b, c := e.backend(PubSub, nil)
	ch := b.Inbox("s")
	if ch != b.Inbox("t") {
		t.Fatalf("inboxes of s and t on one server: %q, %q; want one", ch, b.Inbox("t"))
	}
	numsub := func(ch string) int64 {
		v, err := e.raw.Do(ctx, e.raw.B().PubsubNumsub().Channel(ch).Build()).ToArray()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := v[1].AsInt64()
		return n
	}
	w1, c1 := adaptertest.Subscribe(t, b, "s")
	if numsub(ch) != 1 {
		t.Fatal("Subscribe returned before the server had the subscription")
	}
	w2, c2 := adaptertest.Subscribe(t, b, "s")
	w3, c3 := adaptertest.Subscribe(t, b, "t")
	if subs := c.takeSubs(); !slices.Equal(subs, []string{"subscribe"}) {
		t.Fatalf("three Subscribes of two ids sent %v, want one SUBSCRIBE (the inbox's)", subs)
	}
	e.do("PUBLISH", ch, adaptertest.InboxMsg("s", ":T"))
	if x, y := w1.Next(t), w2.Next(t); x != (backend.Wake{ID: "s", Token: "T"}) || y != x {
		t.Fatalf("wakes %+v %+v", x, y)
	}
	w3.None(t, quiet/2)
	c1()
	c1() // idempotent
	e.do("PUBLISH", ch, adaptertest.InboxMsg("s", ":U"))
	if y := w2.Next(t); y.Token != "U" {
		t.Fatalf("wake %+v", y)
	}
	w1.None(t, quiet/2)
	c2()
	c3()
	// The inbox stays subscribed: Subscribing again costs no round trip.
	c4, err := b.Subscribe(ctx, "s", w1.Fn)
	if err != nil {
		t.Fatal(err)
	}
	defer c4()
	if subs := c.takeSubs(); len(subs) != 0 || numsub(ch) != 1 {
		t.Fatalf("after the last cancel and a new Subscribe: sent %v, %d subscribers of the inbox; want nothing sent, 1", subs, numsub(ch))
	}
	e.do("PUBLISH", ch, adaptertest.InboxMsg("s", "250:V"))
	if x := w1.Next(t); x.ID != "s" || x.Token != "V" || x.HolderTTL <= 0 {
		t.Fatalf("wake %+v, want {s V} with the holder's TTL", x)
	}

	// A cancelled ctx ends a Subscribe that has not been confirmed yet.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Subscribe(cctx, "other", w1.Fn); !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe with a cancelled ctx = %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, adaptertest.Deadline, "Close leaves the inbox", func() bool { return numsub(ch) == 0 })
}

// TestPubSubServerDown: Subscribe does not hang when the server is gone: it
// returns the connection's error.
func TestPubSubServerDown(t *testing.T) {
	srv := redisserver.StartT(t, redisserver.Options{})
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	b, err := concrete(NewWithClient(client, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	srv.Close()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := b.Subscribe(sctx, "down", func(backend.Wake) {}); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Subscribe with the server down = %v, want the connection's error before the deadline", err)
	}
}

// TestClose: Close ends the Backend's goroutines (and, from New, its
// client's), is reported once, and every later call returns ErrClosed.
func TestClose(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			e := newEnv(t)
			b, _ := e.backend(mode, nil)
			cancel, err := b.Subscribe(ctx, "c", func(backend.Wake) {})
			if err != nil {
				t.Fatal(err)
			}
			mustAcquire(t, b, req("c", "A", false))
			if err := b.Release(ctx, "c", "A"); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := b.Close(); !errors.Is(err, backend.ErrClosed) {
				t.Fatalf("second Close = %v", err)
			}
			if _, err := b.Acquire(ctx, req("c", "A", false)); !errors.Is(err, backend.ErrClosed) {
				t.Fatalf("Acquire after Close = %v", err)
			}
			if _, err := b.Subscribe(ctx, "c", func(backend.Wake) {}); !errors.Is(err, backend.ErrClosed) {
				t.Fatalf("Subscribe after Close = %v", err)
			}
			if err := b.Release(ctx, "c", "A"); !errors.Is(err, backend.ErrClosed) {
				t.Fatalf("Release after Close = %v", err)
			}
			e.raw.Close() // the env's own client, so that only the Backend's goroutines are checked
		})
	}
}
