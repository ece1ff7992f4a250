package rueidisbackend

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/testenv/adaptertest"
	"github.com/redislocker/lock/internal/testenv/faultproxy"
	"github.com/redislocker/lock/internal/testenv/redisserver"
	"github.com/redislocker/lock/internal/testenv/testkit"
)

// quiet is the window in which a test counts wake-ups that must not come:
// measuring, not waiting for an event.
const quiet = 200 * time.Millisecond

// TestInboxWakesOnlyTheHeadsProcess: in Tracking mode a release wakes the
// head through its process's inbox key, naming it, and no other process;
// the grant then tells the next head, in its own process, the holder's
// TTL. A holder's extend, which no inbox hears, wakes nobody.
func TestInboxWakesOnlyTheHeadsProcess(t *testing.T) {
	e := newEnv(t)
	p, _ := e.backend(Tracking, nil)
	w1, _ := e.backend(Tracking, nil)
	w2, _ := e.backend(Tracking, nil)
	x1, x2 := adaptertest.NewWakes(), adaptertest.NewWakes()
	for _, s := range []struct {
		b  *adapter
		fn func(backend.Wake)
	}{{w1, x1.Fn}, {w2, x2.Fn}} {
		cancel, err := s.b.Subscribe(ctx, "x", s.fn)
		if err != nil {
			t.Fatal(err)
		}
		defer cancel()
	}
	mustAcquire(t, p, req("x", "P", false))
	if g := mustAcquire(t, w1, req("x", "W1", true)); !g.Queued || !g.Head {
		t.Fatalf("W1 = %+v, want the queued head", g)
	}
	if g := mustAcquire(t, w2, req("x", "W2", true)); !g.Queued || g.Head {
		t.Fatalf("W2 = %+v, want queued behind W1", g)
	}
	if err := p.Extend(ctx, "x", "P", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx, "x", "P"); err != nil {
		t.Fatal(err)
	}
	if got := x1.Next(t); !adaptertest.IsGrant(got, "x", "W1") {
		t.Fatalf("the release woke W1's process with %+v, want W1's grant", got)
	}
	if g := mustAcquire(t, w1, req("x", "W1", true)); !g.Acquired {
		t.Fatalf("W1 = %+v, want granted", g)
	}
	if got := x2.Next(t); got.ID != "x" || got.Token != "W2" || got.HolderTTL <= 0 {
		t.Fatalf("W1's grant woke W2's process with %+v, want {x W2} with the holder's TTL", got)
	}
	if n1, n2 := w1.inbox.Received(), w2.inbox.Received(); n1 != 1 || n2 != 1 {
		t.Fatalf("inbox messages received: W1's process %d, W2's %d; want one each (the extend wakes nobody)", n1, n2)
	}
	if err := w2.Leave(ctx, "x", "W2"); err != nil {
		t.Fatal(err)
	}
}

// TestOwnProcessWakes: a step of a process that wakes a waiter of the
// same process reaches it through its own inbox key too: Redis does not
// apply NOLOOP to a script's writes in broadcasting mode (checked here,
// as a later Redis could).
func TestOwnProcessWakes(t *testing.T) {
	e := newEnv(t)
	w, _ := e.backend(Tracking, nil)
	x := adaptertest.Subscribed(t, w, "x")
	mustAcquire(t, w, req("x", "H", false))
	adaptertest.HandOff(t, x, w, w, "x", "H", "Q")
	if err := w.Leave(ctx, "x", "Q"); err != nil {
		t.Fatal(err)
	}
}

// clientName returns a client name unique to this test run.
func clientName(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "rueidisbackend-test-" + hex.EncodeToString(b[:])
}

// killClients kills every connection named name and returns how many.
func (e *env) killClients(name string) int {
	e.t.Helper()
	list, err := e.do("CLIENT", "LIST").ToString()
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	sc := bufio.NewScanner(strings.NewReader(list))
	for sc.Scan() {
		var id string
		named := false
		for _, f := range strings.Fields(sc.Text()) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
			if f == "name="+name {
				named = true
			}
		}
		if named && id != "" {
			e.do("CLIENT", "KILL", "ID", id)
			n++
		}
	}
	return n
}

// TestReconnectWakesAll: when the connection that carries the wake-ups
// breaks, every subscribed id gets Wake{ID, All: true} (Tracking: rueidis
// reports the lost connection as "invalidate everything"; PubSub: the
// re-subscription on the new connection), and wake-ups work again on the
// new connection.
func TestReconnectWakesAll(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			p, _ := e.backend(mode, nil)
			name := clientName(t)
			w, _ := e.backend(mode, &Options{ClientOption: e.namedOption(name)})
			x, y := adaptertest.NewWakes(), adaptertest.NewWakes()
			for id, fn := range map[string]func(backend.Wake){"x": x.Fn, "y": y.Fn} {
				cancel, err := w.Subscribe(ctx, id, fn)
				if err != nil {
					t.Fatal(err)
				}
				defer cancel()
			}
			mustAcquire(t, p, req("x", "P", false))
			mustAcquire(t, w, req("x", "W", true))
			if n := e.killClients(name); n == 0 {
				t.Fatal("no connection of the backend to kill")
			}
			for id, ws := range map[string]*adaptertest.Wakes{"x": x, "y": y} {
				if got := ws.Next(t); got != (backend.Wake{ID: id, All: true}) {
					t.Fatalf("after the connection broke, %s got %+v, want {ID: %s, All: true}", id, got, id)
				}
			}
			// The waiter re-checks (as the core does after Wake.All), on
			// the new connection; a release then wakes it again. rueidis
			// does not resend a write on a broken connection, so the first
			// step on each connection that broke while idle (PubSub mode's
			// command connections, which nothing reads while idle) fails.
			var g backend.Grant
			testkit.Eventually(t, adaptertest.Deadline, "a step succeeds after the reconnect", func() bool {
				var err error
				g, err = w.Acquire(ctx, req("x", "W", true))
				if err != nil {
					t.Logf("a step after the kill: %v", err)
				}
				return err == nil
			})
			if g.Acquired || !g.Queued {
				t.Fatalf("re-check = %+v", g)
			}
			x.Drain()
			if err := p.Release(ctx, "x", "P"); err != nil {
				t.Fatal(err)
			}
			got := x.Next(t)
			if got.ID != "x" || got.All || (mode == PubSub && got.Token != "W") {
				t.Fatalf("release after the reconnect woke %+v", got)
			}
			_ = w.Leave(ctx, "x", "W")
		})
	}
}

// namedOption returns the env's ClientOption with a client name, so that
// a test can find the backend's connections in CLIENT LIST.
func (e *env) namedOption(name string) rueidis.ClientOption {
	co := e.clientOption()
	co.ClientName = name
	return co
}

// TestFlushAllWakesAll: FLUSHALL makes Redis invalidate every tracked key
// at once (a nil invalidation): every subscribed id is woken with All.
func TestFlushAllWakesAll(t *testing.T) {
	e := newEnvAt(t, redisserver.StartT(t, redisserver.Options{}).Addr)
	w, _ := e.backend(Tracking, nil)
	x := adaptertest.Subscribed(t, w, "x")
	mustAcquire(t, w, req("x", "W", true)) // any read tracks something
	e.do("FLUSHALL")
	x.Expect(t, "FLUSHALL", backend.Wake{ID: "x", All: true})
}

// TestRecoversAfterOutage: the backend's connections are cut and new ones
// refused for a while; once the server is reachable again every subscribed
// id gets Wake{ID, All: true} (not before: a re-check during the outage
// would only fail), and wake-ups work again.
func TestRecoversAfterOutage(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			p, _ := e.backend(mode, nil)
			proxy := faultproxy.Start(t, e.addr)
			co := e.clientOption()
			co.InitAddress = []string{proxy.Addr()}
			w, _ := e.backend(mode, &Options{ClientOption: co})
			x := adaptertest.Subscribed(t, w, "x")
			mustAcquire(t, p, req("x", "P", false))
			mustAcquire(t, w, req("x", "W", true))
			proxy.Refuse(true)
			proxy.CutAll()
			if err := p.Release(ctx, "x", "P"); err != nil { // nobody hears it
				t.Fatal(err)
			}
			x.None(t, 3*quiet) // the outage: no wake-up while nothing would succeed
			proxy.Refuse(false)
			got := x.Next(t)
			if mode == Tracking && adaptertest.IsGrant(got, "x", "W") {
				// The release's grant waited in the inbox key: the
				// recovery drains it before it wakes everyone.
				got = x.Next(t)
			}
			if got != (backend.Wake{ID: "x", All: true}) {
				t.Fatalf("after the outage x got %+v, want {ID: x, All: true}", got)
			}
			var g backend.Grant
			testkit.Eventually(t, adaptertest.Deadline, "a step succeeds after the outage", func() bool {
				var err error
				g, err = w.Acquire(ctx, req("x", "W", true))
				return err == nil
			})
			if !g.Acquired {
				t.Fatalf("re-check after the outage = %+v, want granted", g)
			}
			_ = w.Release(ctx, "x", "W")
		})
	}
}

// TestStepResentAfterCut: a connection cut while idle is often noticed by
// the next command on it only; the backend resends a step once (rueidis
// never resends a write), so the caller does not see the error.
func TestStepResentAfterCut(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			proxy := faultproxy.Start(t, e.addr)
			co := e.clientOption()
			co.InitAddress = []string{proxy.Addr()}
			co.PipelineMultiplex = -1 // one command connection (New keeps it for Tracking anyway)
			w, c := e.backend(mode, &Options{ClientOption: co})
			mustAcquire(t, w, req("r", "W", false))
			if proxy.CutAll() == 0 {
				t.Fatal("nothing to cut")
			}
			c.Take()
			if err := w.Extend(ctx, "r", "W", time.Minute); err != nil {
				t.Fatalf("Extend after a cut = %v, want it resent on a new connection", err)
			}
			_, _, names := c.Take()
			t.Logf("sent: %s", names)
			if mode == PubSub && names != "extend extend" {
				// Nothing reads an idle command connection in PubSub mode:
				// the first EVALSHA finds the cut.
				t.Fatalf("sent %q, want the extend twice (the first on the cut connection)", names)
			}
			// Release too: the first one never reached the server, so the
			// resent one releases and reports success.
			proxy.CutAll()
			if err := w.Release(ctx, "r", "W"); err != nil {
				t.Fatalf("Release after a cut = %v, want it resent on a new connection", err)
			}
			if _, _, names := c.Take(); mode == PubSub && names != "release release" {
				t.Fatalf("sent %q, want the release twice", names)
			}
			if n, _ := e.raw.Do(ctx, e.raw.B().Exists().Key(w.keyNames("r").Lock).Build()).AsInt64(); n != 0 {
				t.Fatal("the lock is still held")
			}
		})
	}
}
