package wakeup

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/keys"
)

// fakeDialer opens fakeConns. With routes set it is a Router too
// (routerDialer).
type fakeDialer struct {
	mu      sync.Mutex
	manual  bool              // confirmations are the test's (confirm); else each Subscribe confirms at once
	failing map[string]error  // Open of a node fails with it
	routes  map[string]string // channel -> node
	conns   []*fakeConn       // every connection opened
	opens   []time.Time       // when Open was called
	lookups int
}

type routerDialer struct{ *fakeDialer }

func (d routerDialer) Node(_ context.Context, channel string, _ bool) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lookups++
	n, ok := d.routes[channel]
	if !ok {
		return "", errors.New("no route")
	}
	return n, nil
}

func (d *fakeDialer) Open(_ context.Context, node string, events func(Event)) (Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.opens = append(d.opens, time.Now())
	if err := d.failing[node]; err != nil {
		return nil, err
	}
	c := &fakeConn{d: d, node: node, events: events, broken: make(chan error, 1), closed: make(chan struct{})}
	d.conns = append(d.conns, c)
	return c, nil
}

// live returns the connections not closed, by node.
func (d *fakeDialer) live() map[string]*fakeConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]*fakeConn)
	for _, c := range d.conns {
		select {
		case <-c.closed:
		default:
			out[c.node] = c
		}
	}
	return out
}

type fakeConn struct {
	d      *fakeDialer
	node   string
	events func(Event)
	broken chan error
	closed chan struct{}
	once   sync.Once

	mu     sync.Mutex
	subs   []string // every channel sent a SUBSCRIBE, in order
	unsubs []string
}

func (c *fakeConn) Subscribe(_ context.Context, channels []string) error {
	c.mu.Lock()
	c.subs = append(c.subs, channels...)
	c.mu.Unlock()
	c.d.mu.Lock()
	manual := c.d.manual
	c.d.mu.Unlock()
	if !manual {
		for _, ch := range channels {
			c.events(Event{Kind: Confirmed, Channel: ch})
		}
	}
	return nil
}

func (c *fakeConn) Unsubscribe(_ context.Context, channels []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unsubs = append(c.unsubs, channels...)
	return nil
}

func (c *fakeConn) Serve(ctx context.Context) error {
	select {
	case err := <-c.broken:
		return err
	case <-c.closed:
		return errors.New("closed")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *fakeConn) Close() { c.once.Do(func() { close(c.closed) }) }

func (c *fakeConn) sent() (subs, unsubs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.subs), slices.Clone(c.unsubs)
}

// wakes collects what a subscriber got.
type wakes struct {
	mu sync.Mutex
	ws []backend.Wake
}

func (w *wakes) fn(x backend.Wake) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ws = append(w.ws, x)
}

func (w *wakes) take() []backend.Wake {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.ws
	w.ws = nil
	return out
}

// msgA is an inbox message of id with token tok.
const msgA = "1:a:T1" // id "a" encodes as "a"

func subscribe(t *testing.T, s *Supervisor, id, ch string) (*wakes, func()) {
	t.Helper()
	w := &wakes{}
	cancel, err := s.Subscribe(t.Context(), id, ch, w.fn)
	if err != nil {
		t.Fatalf("Subscribe(%s): %v", ch, err)
	}
	return w, cancel
}

func sorted(s []string) []string { slices.Sort(s); return s }

// TestSupervisorDelivers: Subscribe returns once confirmed; a message of
// the channel reaches its subscribers, one of a channel the Supervisor
// does not have is dropped; the connection is shared; the last cancel
// unsubscribes.
func TestSupervisorDelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &fakeDialer{}
		s := NewSupervisor(d, SupervisorOptions{})
		defer s.Close()
		w1, c1 := subscribe(t, s, "a", "ch1")
		w2, c2 := subscribe(t, s, "a", "ch2")
		conns := d.live()
		c := conns[""]
		if len(conns) != 1 || c == nil {
			t.Fatalf("connections %v, want one", conns)
		}
		if w, ok := ParseInbox(msgA); !ok || w.ID != "a" || w.Token != "T1" {
			t.Fatalf("the test's message parses as %+v, %v", w, ok)
		}
		c.events(Event{Kind: Message, Channel: "ch1", Payload: msgA})
		c.events(Event{Kind: Message, Channel: "gone", Payload: msgA})
		if got := w1.take(); len(got) != 1 || got[0].Token != "T1" {
			t.Fatalf("ch1's subscriber got %+v", got)
		}
		if got := w2.take(); len(got) != 0 {
			t.Fatalf("ch2's subscriber got %+v", got)
		}
		c1()
		c1() // idempotent
		synctest.Wait()
		if _, unsubs := c.sent(); !slices.Equal(unsubs, []string{"ch1"}) {
			t.Fatalf("unsubscribed %v after the last cancel of ch1", unsubs)
		}
		c.events(Event{Kind: Message, Channel: "ch1", Payload: msgA})
		if got := w1.take(); len(got) != 0 {
			t.Fatalf("a cancelled subscriber got %+v", got)
		}
		c2()
		synctest.Wait()
		if len(d.live()) != 0 {
			t.Fatal("the connection outlived its last channel")
		}
	})
}

// TestSupervisorReconnectWakesAll: after a connection breaks, the
// Supervisor connects again, subscribes the live set (not a channel given
// up meanwhile) and wakes every subscriber with its entry's All; messages
// flow on the new connection.
func TestSupervisorReconnectWakesAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &fakeDialer{}
		s := NewSupervisor(d, SupervisorOptions{})
		defer s.Close()
		wa, _ := subscribe(t, s, "a", "ch1")
		wb, _ := subscribe(t, s, "b", "ch2")
		wc, cc := subscribe(t, s, "c", "ch3")
		cc()
		synctest.Wait()
		old := d.live()[""]
		old.broken <- errors.New("connection reset")
		time.Sleep(MinDelay)
		synctest.Wait()
		c := d.live()[""]
		if c == nil || c == old {
			t.Fatal("no new connection after the break")
		}
		if subs, _ := c.sent(); !slices.Equal(sorted(subs), []string{"ch1", "ch2"}) {
			t.Fatalf("resubscribed %v, want the live set [ch1 ch2]", subs)
		}
		if got := wa.take(); !slices.Equal(got, []backend.Wake{{ID: "a", All: true}}) {
			t.Fatalf("ch1's subscriber got %+v after the reconnect", got)
		}
		if got := wb.take(); !slices.Equal(got, []backend.Wake{{ID: "b", All: true}}) {
			t.Fatalf("ch2's subscriber got %+v after the reconnect", got)
		}
		if got := wc.take(); len(got) != 0 {
			t.Fatalf("a cancelled subscriber got %+v", got)
		}
		old.events(Event{Kind: Message, Channel: "ch1", Payload: msgA})
		if got := wa.take(); len(got) != 0 {
			t.Fatalf("a message of the old connection was delivered: %+v", got)
		}
		c.events(Event{Kind: Message, Channel: "ch1", Payload: msgA})
		if got := wa.take(); len(got) != 1 || got[0].Token != "T1" {
			t.Fatalf("after the reconnect ch1's subscriber got %+v", got)
		}
		// A client that subscribes again by itself (a second confirmation
		// on the same connection) wakes all too.
		c.events(Event{Kind: Confirmed, Channel: "ch2"})
		if got := wb.take(); !slices.Equal(got, []backend.Wake{{ID: "b", All: true}}) {
			t.Fatalf("ch2's subscriber got %+v after a second confirmation", got)
		}
	})
}

// TestSupervisorBackoff: a node that cannot be connected is tried again
// after MinDelay, then twice as long each time, up to MaxDelay; after a
// connection that worked for a while, the delay starts over.
func TestSupervisorBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := errors.New("connection refused")
		d := &fakeDialer{failing: map[string]error{"": down}}
		s := NewSupervisor(d, SupervisorOptions{})
		defer s.Close()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		w := &wakes{}
		go func() {
			if _, err := s.Subscribe(ctx, "a", "ch", w.fn); err != nil {
				t.Errorf("Subscribe: %v", err) // it waits for the server
			}
		}()
		time.Sleep(8 * time.Second)
		synctest.Wait()
		d.mu.Lock()
		opens := slices.Clone(d.opens)
		delete(d.failing, "")
		d.mu.Unlock()
		want := MinDelay
		if len(opens) < 8 {
			t.Fatalf("%d attempts in 8s", len(opens))
		}
		for i := 1; i < len(opens); i++ {
			if got := opens[i].Sub(opens[i-1]); got != want {
				t.Fatalf("attempt %d came %v after the one before, want %v", i, got, want)
			}
			want = NextDelay(want)
		}
		if want != MaxDelay {
			t.Fatalf("the delay grew to %v, want MaxDelay", want)
		}
		time.Sleep(MaxDelay)
		synctest.Wait()
		c := d.live()[""]
		if c == nil {
			t.Fatal("not connected once the server answers")
		}
		time.Sleep(3 * MaxDelay) // a connection that works for a while
		d.mu.Lock()
		n := len(d.opens)
		d.mu.Unlock()
		brk := time.Now()
		c.broken <- errors.New("reset")
		time.Sleep(MinDelay)
		synctest.Wait()
		d.mu.Lock()
		again := slices.Clone(d.opens[n:])
		d.mu.Unlock()
		if len(again) != 1 || again[0].Sub(brk) != MinDelay {
			t.Fatalf("opens after the break of a connection that worked: %v after %v, want one after MinDelay", again, brk)
		}
	})
}

// TestSupervisorBackoffAfterBreak: a connection that breaks at once is
// opened again after a growing delay.
func TestSupervisorBackoffAfterBreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &fakeDialer{}
		s := NewSupervisor(d, SupervisorOptions{})
		defer s.Close()
		subscribe(t, s, "a", "ch")
		for _, want := range []time.Duration{MinDelay, 2 * MinDelay, 4 * MinDelay, 8 * MinDelay} {
			c := d.live()[""]
			c.broken <- errors.New("reset")
			time.Sleep(want - time.Millisecond)
			synctest.Wait()
			if d.live()[""] != nil {
				t.Fatalf("connected again before %v", want)
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if n := d.live()[""]; n == nil || n == c {
				t.Fatalf("not connected again after %v", want)
			}
		}
	})
}

// TestSupervisorFanOut: with a Router, each channel is subscribed on its
// node's connection, one per node; a channel the node drops (its slot
// moved) or redirects is subscribed again where the routing says now,
// with its subscribers woken; a node with no channel left is closed.
func TestSupervisorFanOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &fakeDialer{routes: map[string]string{"x": "n1", "y": "n1", "z": "n2"}}
		s := NewSupervisor(routerDialer{d}, SupervisorOptions{})
		defer s.Close()
		wx, _ := subscribe(t, s, "x", "x")
		subscribe(t, s, "y", "y")
		_, cz := subscribe(t, s, "z", "z")
		conns := d.live()
		if len(conns) != 2 {
			t.Fatalf("%d connections, want one per node", len(conns))
		}
		if subs, _ := conns["n1"].sent(); !slices.Equal(sorted(subs), []string{"x", "y"}) {
			t.Fatalf("n1 subscribed %v", subs)
		}
		if subs, _ := conns["n2"].sent(); !slices.Equal(subs, []string{"z"}) {
			t.Fatalf("n2 subscribed %v", subs)
		}
		// x's slot moves to n2: n1 drops it.
		d.mu.Lock()
		d.routes["x"] = "n2"
		d.mu.Unlock()
		conns["n1"].events(Event{Kind: Dropped, Channel: "x"})
		synctest.Wait()
		if subs, _ := conns["n2"].sent(); !slices.Equal(subs, []string{"z", "x"}) {
			t.Fatalf("n2 subscribed %v after x moved, want [z x]", subs)
		}
		if got := wx.take(); !slices.Equal(got, []backend.Wake{{ID: "x", All: true}}) {
			t.Fatalf("x's subscriber got %+v after the move", got)
		}
		conns["n2"].events(Event{Kind: Message, Channel: "x", Payload: "1:x:T"})
		conns["n1"].events(Event{Kind: Message, Channel: "x", Payload: "1:x:old"})
		if got := wx.take(); len(got) != 1 || got[0].Token != "T" {
			t.Fatalf("x's subscriber got %+v, want the message on n2 only", got)
		}
		// A SUBSCRIBE redirected (MOVED) is routed again after MinDelay.
		d.mu.Lock()
		d.manual = true
		d.routes["w"] = "n2" // out of date: n1 serves it
		d.mu.Unlock()
		done := make(chan error, 1)
		ww := &wakes{}
		go func() {
			_, err := s.Subscribe(t.Context(), "w", "w", ww.fn)
			done <- err
		}()
		synctest.Wait()
		d.mu.Lock()
		d.routes["w"] = "n1"
		d.mu.Unlock()
		conns["n2"].events(Event{Kind: Moved, Slot: keys.Slot("w")})
		time.Sleep(MinDelay)
		synctest.Wait()
		if subs, _ := conns["n1"].sent(); !slices.Contains(subs, "w") {
			t.Fatalf("n1 subscribed %v after the redirect, want w too", subs)
		}
		conns["n1"].events(Event{Kind: Confirmed, Channel: "w"})
		if err := <-done; err != nil {
			t.Fatalf("Subscribe of w: %v", err)
		}
		// n2 keeps x; once z and x go, n2 is closed.
		cz()
		synctest.Wait()
		if _, unsubs := conns["n2"].sent(); !slices.Equal(unsubs, []string{"z"}) {
			t.Fatalf("n2 unsubscribed %v", unsubs)
		}
		if d.live()["n2"] == nil {
			t.Fatal("n2 closed while x is subscribed there")
		}
	})
}

// TestSupervisorRecheckAfterFailure: a node that fails is asked again for
// each of its channels before it connects again; a channel another node
// serves now moves there.
func TestSupervisorRecheckAfterFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &fakeDialer{routes: map[string]string{"x": "n1"}}
		s := NewSupervisor(routerDialer{d}, SupervisorOptions{})
		defer s.Close()
		wx, _ := subscribe(t, s, "x", "x")
		n1 := d.live()["n1"]
		d.mu.Lock()
		d.routes["x"] = "n2" // a failover
		d.failing = map[string]error{"n1": errors.New("down")}
		d.mu.Unlock()
		n1.broken <- errors.New("reset")
		time.Sleep(MinDelay)
		synctest.Wait()
		conns := d.live()
		if conns["n1"] != nil || conns["n2"] == nil {
			t.Fatalf("connections after the failover: %v", conns)
		}
		if got := wx.take(); !slices.Equal(got, []backend.Wake{{ID: "x", All: true}}) {
			t.Fatalf("x's subscriber got %+v", got)
		}
	})
}

// TestSupervisorConfirmation: Subscribe waits for the confirmation; its
// ctx or Close ends the wait; a refusal is its error; a channel given up
// before its confirmation is unsubscribed once confirmed.
func TestSupervisorConfirmation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &fakeDialer{manual: true}
		s := NewSupervisor(d, SupervisorOptions{})
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			_, err := s.Subscribe(ctx, "a", "given-up", func(backend.Wake) {})
			errc <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Subscribe with its ctx ended = %v", err)
		}
		c := d.live()[""]
		synctest.Wait()
		if _, unsubs := c.sent(); len(unsubs) != 0 {
			t.Fatalf("unsubscribed %v before the confirmation", unsubs)
		}
		c.events(Event{Kind: Confirmed, Channel: "given-up"})
		synctest.Wait()
		if _, unsubs := c.sent(); !slices.Equal(unsubs, []string{"given-up"}) {
			t.Fatalf("unsubscribed %v after the confirmation", unsubs)
		}

		go func() {
			_, err := s.Subscribe(t.Context(), "a", "refused", func(backend.Wake) {})
			errc <- err
		}()
		synctest.Wait()
		c = d.live()[""] // the last channel left: a new connection
		noperm := errors.New("NOPERM")
		c.events(Event{Kind: Refused, Err: noperm})
		if err := <-errc; !errors.Is(err, noperm) {
			t.Fatalf("Subscribe refused = %v", err)
		}

		go func() {
			_, err := s.Subscribe(t.Context(), "a", "pending", func(backend.Wake) {})
			errc <- err
		}()
		synctest.Wait()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, backend.ErrClosed) {
			t.Fatalf("Subscribe pending at Close = %v", err)
		}
		if err := s.Close(); !errors.Is(err, backend.ErrClosed) {
			t.Fatalf("second Close = %v", err)
		}
		if _, err := s.Subscribe(t.Context(), "a", "late", func(backend.Wake) {}); !errors.Is(err, backend.ErrClosed) {
			t.Fatalf("Subscribe after Close = %v", err)
		}
	})
}

// TestSupervisorFailUnconfirmed: with FailUnconfirmed, a node that cannot
// be connected ends the first Subscribe with its error (and the next
// Subscribe tries again).
func TestSupervisorFailUnconfirmed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := errors.New("connection refused")
		d := &fakeDialer{failing: map[string]error{"": down}}
		s := NewSupervisor(d, SupervisorOptions{FailUnconfirmed: true})
		defer s.Close()
		if _, err := s.Subscribe(t.Context(), "a", "ch", func(backend.Wake) {}); !errors.Is(err, down) {
			t.Fatalf("Subscribe with the server down = %v", err)
		}
		synctest.Wait()
		d.mu.Lock()
		delete(d.failing, "")
		d.mu.Unlock()
		subscribe(t, s, "a", "ch")
	})
}

// TestSupervisorCloseLeavesNoGoroutine: Close ends every goroutine (the
// bubble ends only when they have) and closes every connection, whatever
// state they are in.
func TestSupervisorCloseLeavesNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &fakeDialer{routes: map[string]string{"x": "n1", "y": "n2"}, failing: map[string]error{"n2": errors.New("down")}}
		s := NewSupervisor(routerDialer{d}, SupervisorOptions{})
		subscribe(t, s, "x", "x")
		go func() { _, _ = s.Subscribe(t.Context(), "y", "y", func(backend.Wake) {}) }() // n2 backs off
		go func() { _, _ = s.Subscribe(t.Context(), "q", "q", func(backend.Wake) {}) }() // no route: the router backs off
		time.Sleep(time.Second)
		synctest.Wait()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if n := len(d.live()); n != 0 {
			t.Fatalf("%d connections open after Close", n)
		}
	})
}
