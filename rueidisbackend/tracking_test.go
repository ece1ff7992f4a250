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
	"github.com/redislocker/lock/internal/adaptertest"
	"github.com/redislocker/lock/internal/faultproxy"
	"github.com/redislocker/lock/internal/redistest"
)

// quiet is the window in which a test counts wake-ups that must not come:
// measuring, not waiting for an event.
const quiet = 200 * time.Millisecond

// TestInvalidationWakesOnlyThatID: in Tracking mode, a change of id X's
// lock key by another process (release, extend, expiry) wakes the
// subscribers of X with Wake{ID: X} (no token, not All), and nobody else.
func TestInvalidationWakesOnlyThatID(t *testing.T) {
	e := newEnv(t)
	p, _ := e.backend(Tracking, nil)
	w, _ := e.backend(Tracking, nil)
	wx, wy, wz := adaptertest.NewWakes(), adaptertest.NewWakes(), adaptertest.NewWakes()
	for id, fn := range map[string]func(backend.Wake){"x": wx.Fn, "y": wy.Fn, "z": wz.Fn} {
		cancel, err := w.Subscribe(ctx, id, fn)
		if err != nil {
			t.Fatal(err)
		}
		defer cancel()
	}
	mustAcquire(t, p, req("x", "P", false))
	mustAcquire(t, p, req("y", "P", false))
	short := req("z", "P", false)
	short.TTL = 300 * time.Millisecond
	mustAcquire(t, p, short)
	// W's waiting steps track the three lock keys.
	for _, id := range []string{"x", "y", "z"} {
		if g := mustAcquire(t, w, req(id, "W", true)); g.Acquired || !g.Queued {
			t.Fatalf("W on %s = %+v, want queued", id, g)
		}
	}

	if err := p.Release(ctx, "x", "P"); err != nil {
		t.Fatal(err)
	}
	if x := wx.Next(t); x != (backend.Wake{ID: "x"}) {
		t.Fatalf("release of x woke %+v, want {ID: x}", x)
	}
	wy.None(t, quiet)
	if err := p.Extend(ctx, "y", "P", time.Minute); err != nil {
		t.Fatal(err)
	}
	if x := wy.Next(t); x != (backend.Wake{ID: "y"}) {
		t.Fatalf("extend of y woke %+v, want {ID: y}", x)
	}
	// z expires: no script runs, the server's expiry invalidates the key.
	if x := wz.Next(t); x != (backend.Wake{ID: "z"}) {
		t.Fatalf("expiry of z woke %+v, want {ID: z}", x)
	}
	if got := append(wx.Drain(), wy.Drain()...); len(got) != 0 {
		t.Fatalf("other ids were woken: %+v", got)
	}
}

// TestOwnWritesKeepTracking: NOLOOP keeps a tracking connection from
// hearing its own writes, and Redis stops tracking a key for the
// connection that writes it. The backend covers both: its own grant and
// extend wake nobody here and keep the key tracked (the scripts read it
// again after writing), so the expiry of its own lease still wakes its own
// waiters; its own release and leave wake them itself.
func TestOwnWritesKeepTracking(t *testing.T) {
	e := newEnv(t)
	w, c := e.backend(Tracking, nil)
	x := adaptertest.NewWakes()
	cancel, err := w.Subscribe(ctx, "x", x.Fn)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	r := req("x", "H", false)
	r.TTL = 400 * time.Millisecond
	if g := mustAcquire(t, w, r); !g.Acquired {
		t.Fatalf("grant = %+v", g)
	}
	x.None(t, quiet/2)
	if err := w.Extend(ctx, "x", "H", 400*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	x.None(t, quiet/2)
	c.Take()
	// The lease ends on its own: the invalidation of the expiry reaches the
	// connection that granted and extended it.
	if got := x.Next(t); got != (backend.Wake{ID: "x"}) {
		t.Fatalf("expiry of its own lease woke %+v, want {ID: x}", got)
	}
	if n, _, names := c.Take(); n != 0 {
		t.Fatalf("the backend sent %d commands (%s) between its extend and the wake-up, want none", n, names)
	}

	// Its own release: woken by the backend.
	mustAcquire(t, w, req("x", "H2", false))
	x.Drain()
	if err := w.Release(ctx, "x", "H2"); err != nil {
		t.Fatal(err)
	}
	if got := x.Next(t); got != (backend.Wake{ID: "x"}) {
		t.Fatalf("its own release woke %+v, want {ID: x}", got)
	}
	// A release that finds the lock not held changes nothing and wakes nobody.
	if err := w.Release(ctx, "x", "H3"); err != backend.ErrNotHeld {
		t.Fatalf("second release = %v, want ErrNotHeld", err)
	}
	x.None(t, quiet/2)

	// Its own leave that removes an entry: every local waiter re-checks.
	mustAcquire(t, w, req("x", "H3", false))
	mustAcquire(t, w, req("x", "Q", true))
	x.Drain()
	if err := w.Leave(ctx, "x", "Q"); err != nil {
		t.Fatal(err)
	}
	if got := x.Next(t); got != (backend.Wake{ID: "x", All: true}) {
		t.Fatalf("its own leave woke %+v, want {ID: x, All: true}", got)
	}
	// A leave with nothing to remove wakes nobody.
	if err := w.Leave(ctx, "x", "Q"); err != nil {
		t.Fatal(err)
	}
	x.None(t, quiet/2)
	_ = w.Release(ctx, "x", "H3")
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
			adaptertest.Eventually(t, "a step succeeds after the reconnect", func() bool {
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
	e := newEnvAt(t, redistest.Start(t).Addr)
	w, _ := e.backend(Tracking, nil)
	x := adaptertest.NewWakes()
	cancel, err := w.Subscribe(ctx, "x", x.Fn)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	mustAcquire(t, w, req("x", "W", true)) // any read tracks something
	e.do("FLUSHALL")
	if got := x.Next(t); got != (backend.Wake{ID: "x", All: true}) {
		t.Fatalf("FLUSHALL woke %+v, want {ID: x, All: true}", got)
	}
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
			x := adaptertest.NewWakes()
			cancel, err := w.Subscribe(ctx, "x", x.Fn)
			if err != nil {
				t.Fatal(err)
			}
			defer cancel()
			mustAcquire(t, p, req("x", "P", false))
			mustAcquire(t, w, req("x", "W", true))
			proxy.Refuse(true)
			proxy.CutAll()
			if err := p.Release(ctx, "x", "P"); err != nil { // nobody hears it
				t.Fatal(err)
			}
			x.None(t, 3*quiet) // the outage: no wake-up while nothing would succeed
			proxy.Refuse(false)
			if got := x.Next(t); got != (backend.Wake{ID: "x", All: true}) {
				t.Fatalf("after the outage x got %+v, want {ID: x, All: true}", got)
			}
			var g backend.Grant
			adaptertest.Eventually(t, "a step succeeds after the outage", func() bool {
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
