package keys

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// hashTag returns the part of key that Redis Cluster hashes: the bytes
// between the first '{' and the next '}' when that is non-empty, otherwise
// the whole key (the rule of the Redis Cluster specification).
func hashTag(key string) string {
	start := strings.IndexByte(key, '{')
	if start < 0 {
		return key
	}
	end := strings.IndexByte(key[start+1:], '}')
	if end <= 0 {
		return key
	}
	return key[start+1 : start+1+end]
}

func TestEncodeExamples(t *testing.T) {
	cases := map[string]string{
		"":            "%",
		"order-42":    "order-42",
		"a{b}c":       "a%7Bb%7Dc",
		"100%":        "100%25",
		"%7B":         "%257B",
		"}{":          "%7D%7B",
		"x:y}:lock":   "x:y%7D:lock",
		"\x00\xff\n ": "\x00\xff\n ",
	}
	for id, want := range cases {
		if got := Encode(id); got != want {
			t.Errorf("Encode(%q) = %q, want %q", id, got, want)
		}
		back, err := Decode(want)
		if err != nil || back != id {
			t.Errorf("Decode(%q) = %q, %v; want %q", want, back, err, id)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, s := range []string{"", "a{", "}", "%%", "%2", "%7b", "%41", "a%7"} {
		if got, err := Decode(s); !errors.Is(err, ErrBadEncoding) {
			t.Errorf("Decode(%q) = %q, %v; want ErrBadEncoding", s, got, err)
		}
	}
}

func TestPrefix(t *testing.T) {
	k, err := New("")
	if err != nil || k.Prefix() != DefaultPrefix || DefaultPrefix != "lock:" {
		t.Fatalf(`New("") = %q, %v; want the default prefix "lock:"`, k.Prefix(), err)
	}
	for _, p := range []string{"{", "}", "a{b", "x}"} {
		if _, err := New(p); !errors.Is(err, ErrBadPrefix) {
			t.Errorf("New(%q) error = %v, want ErrBadPrefix", p, err)
		}
	}
	k, err = New("app:locks:")
	if err != nil {
		t.Fatal(err)
	}
	got := k.For("a{b}")
	slot := Slot("{a%7Bb%7D}")
	want := ID{
		Lock:    "app:locks:{a%7Bb%7D}:lock",
		Queue:   "app:locks:{a%7Bb%7D}:q",
		Waiters: "app:locks:{a%7Bb%7D}:w",
		Fence:   "app:locks:fence:{" + SlotTag(slot) + "}",
		Slot:    slot,
	}
	if got != want {
		t.Errorf("For = %+v, want %+v", got, want)
	}
	// The keys of the id's slot: in that slot, never parsed as an id's key,
	// and told apart by SlotKey.
	for _, key := range []string{got.Fence, k.Released(slot, 12345)} {
		if s := Slot(key); s != slot {
			t.Errorf("Slot(%q) = %d, want the id's slot %d", key, s, slot)
		}
		if _, _, err := k.Parse(key); !errors.Is(err, ErrNotInKeyspace) {
			t.Errorf("Parse(%q) error = %v, want ErrNotInKeyspace", key, err)
		}
		if _, ok := k.SlotKey(key); !ok {
			t.Errorf("SlotKey(%q) = false", key)
		}
	}
	if r := k.Released(slot, 12345); r != "app:locks:rel:12345:{"+SlotTag(slot)+"}" {
		t.Errorf("Released = %q", r)
	}
	for _, key := range []string{got.Lock, got.Queue, k.Wire(), "other:fence:{x}"} {
		if _, ok := k.SlotKey(key); ok {
			t.Errorf("SlotKey(%q) = true, want false", key)
		}
	}
	if p := k.Pattern("a*[?]\\"); p != `app:locks:{a\*\[\?\]\\}:*` {
		t.Errorf("Pattern = %q", p)
	}
	k, _ = New("t[1]*:")
	if p := k.PrefixPattern(); p != `t\[1\]\*:*` {
		t.Errorf("PrefixPattern = %q", p)
	}
}

// FuzzEncode checks, for any id and any allowed prefix, that the encoding
// is injective (Decode inverts it), contains no brace, and that the hash tag
// Redis computes for every key of the id is exactly
// Encode(id), so all of them hash to one slot and no id changes the layout;
// no id's key is the prefix's wire marker.
func FuzzEncode(f *testing.F) {
	for _, s := range []struct{ prefix, id string }{
		{"lock:", "order-42"}, {"", ""}, {"p", "{}"}, {"lock:", "%"}, {"x:", "%7B"},
		{"a", "}{:lock"}, {"lock:", "id}:q{x"}, {"", "\xff\x00{"},
	} {
		f.Add(s.prefix, s.id)
	}
	f.Fuzz(func(t *testing.T, prefix, id string) {
		enc := Encode(id)
		if strings.ContainsAny(enc, "{}") {
			t.Fatalf("Encode(%q) = %q contains a brace", id, enc)
		}
		if enc == "" {
			t.Fatalf("Encode(%q) is empty: Redis would hash the whole key", id)
		}
		back, err := Decode(enc)
		if err != nil || back != id {
			t.Fatalf("Decode(Encode(%q)) = %q, %v", id, back, err)
		}
		k, err := New(prefix)
		if strings.ContainsAny(prefix, "{}") {
			if err == nil {
				t.Fatalf("New(%q) accepted a prefix with a brace", prefix)
			}
			return
		}
		if err != nil {
			t.Fatalf("New(%q): %v", prefix, err)
		}
		ks := k.For(id)
		for _, key := range []string{ks.Lock, ks.Queue, ks.Waiters} {
			if tag := hashTag(key); tag != enc {
				t.Fatalf("hash tag of %q = %q, want %q", key, tag, enc)
			}
			gotID, suffix, err := k.Parse(key)
			if err != nil || gotID != id || !strings.HasSuffix(key, "}:"+suffix) {
				t.Fatalf("Parse(%q) = %q, %q, %v; want id %q", key, gotID, suffix, err, id)
			}
			if key == k.Wire() {
				t.Fatalf("the key %q of id %q is the wire marker", key, id)
			}
		}
	})
}

// FuzzDecode checks that Decode accepts only what Encode produces, so that
// two different key names never decode to the same id.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"%", "a%25", "%7B%7D", "%7b", "{", "", "%2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := Decode(s)
		if err != nil {
			return
		}
		if enc := Encode(id); enc != s {
			t.Fatalf("Decode(%q) = %q but Encode of that is %q", s, id, enc)
		}
	})
}

// TestSlot checks Slot against values CLUSTER KEYSLOT returns (and the
// Redis Cluster specification's CRC16 check value), and that every key
// and the channel of an id share SlotOf(id).
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":         12739, // CRC16-XMODEM("123456789") = 0x31C3
		"foo":               12182,
		"bar":               5061,
		"{user1000}.a":      Slot("user1000"),
		"a{}b":              Slot("a{}b"), // empty tag: the whole key
		"{}{user1000}":      Slot("{}{user1000}"),
		"x{user1000}{y}":    Slot("user1000"),
		"":                  0,
		"lock:{order-42}:q": Slot("order-42"),
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if Slot("a{}b") == Slot("") {
		t.Errorf("an empty hash tag must hash the whole key")
	}
	k, _ := New("app:")
	for _, id := range []string{"order-42", "", "a{b}c", "%7B", "}{:lock"} {
		ks := k.For(id)
		want := SlotOf(id)
		for _, key := range []string{ks.Lock, ks.Queue, ks.Waiters, ks.Fence, k.Released(ks.Slot, 7)} {
			if got := Slot(key); got != want {
				t.Errorf("Slot(%q) = %d, want SlotOf(%q) = %d", key, got, id, want)
			}
		}
	}
}

// Every slot has a tag, and an inbox of a slot hashes to that slot; the
// inbox of every slot has no hash tag.
func TestInboxSlots(t *testing.T) {
	k, err := New("app:")
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s < NumSlots; s++ {
		name := k.Inbox("p1", s)
		if got := Slot(name); got != s || InboxOf(name) != s {
			t.Fatalf("Inbox(p1, %d) = %q hashes to slot %d (InboxOf %d)", s, name, got, InboxOf(name))
		}
		if !strings.HasPrefix(name, k.InboxBase("p1")) {
			t.Fatalf("Inbox(p1, %d) = %q does not start with InboxBase %q", s, name, k.InboxBase("p1"))
		}
	}
	if got := k.Inbox("p1", -1); got != "app:inbox:p1:" || InboxOf(got) != -1 {
		t.Fatalf("Inbox(p1, -1) = %q (InboxOf %d), want %q with no slot", got, InboxOf(got), "app:inbox:p1:")
	}
	if _, _, err := k.Parse(k.Inbox("p1", 7)); !errors.Is(err, ErrNotInKeyspace) {
		t.Fatalf("Parse(an inbox) = %v, want ErrNotInKeyspace: no id's key looks like an inbox", err)
	}
}

// TestReleaseMark: the mark of a release tells ids and tokens apart,
// also where their concatenations agree, and is 12 bytes.
func TestReleaseMark(t *testing.T) {
	a, b, c := ReleaseMark("ab", "c"), ReleaseMark("a", "bc"), ReleaseMark("ab", "c")
	if a == b || a != c || len(a) != 12 {
		t.Errorf("marks %x %x %x: want the first two different, the first and last equal, 12 bytes each", a, b, c)
	}
}

// TestPeriod: periods are ReleasePeriod long, and a release record lives
// two of them.
func TestPeriod(t *testing.T) {
	t0 := time.UnixMilli(1_000 * ReleasePeriod.Milliseconds())
	if Period(t0) != 1000 || Period(t0.Add(ReleasePeriod-time.Millisecond)) != 1000 || Period(t0.Add(ReleasePeriod)) != 1001 {
		t.Errorf("Period: %d %d %d, want 1000 1000 1001", Period(t0), Period(t0.Add(ReleasePeriod-time.Millisecond)), Period(t0.Add(ReleasePeriod)))
	}
	if ReleaseKeep < 2*ReleasePeriod {
		t.Errorf("ReleaseKeep %v < two periods", ReleaseKeep)
	}
}

// TestLockValue: a lock key's value splits back into its token (colons
// and all) and fence; a value of another shape does not.
func TestLockValue(t *testing.T) {
	for _, tok := range []string{"T", "a:b:c", ":", "x\x00y"} {
		v := "1796318480881479:" + tok // as the scripts write it
		if got, f, ok := ParseLock(v); !ok || got != tok || f != 1796318480881479 {
			t.Errorf("ParseLock(%q) = %q, %d, %v", v, got, f, ok)
		}
	}
	for _, v := range []string{"T", "", "x:T", ":T", "-1:T"} {
		if _, _, ok := ParseLock(v); ok {
			t.Errorf("ParseLock(%q) ok, want not", v)
		}
	}
}

// The names a release builds cost one allocation each.
func TestReleaseNamesAllocs(t *testing.T) {
	k, _ := New("app:")
	one := k.OneServer()
	if n := testing.AllocsPerRun(100, func() { _ = ReleaseMark("order-42", "0123456789abcdef0123456789abcdef") }); n > 1 {
		t.Errorf("ReleaseMark: %v allocations, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = one.Released(5, 59000000) }); n > 1 {
		t.Errorf("Released: %v allocations, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = one.Fence(5) }); n > 0 {
		t.Errorf("Fence of a OneServer keyspace: %v allocations, want 0", n)
	}
}

// A waiter record round-trips, with or without permits, and a malformed
// one does not parse.
func TestWaiterRecord(t *testing.T) {
	for _, w := range []Waiter{
		{Deadline: 1700000000000, TTL: 60000, Inbox: "Plock:in:{3}"},
		{Deadline: 5, TTL: 1, Inbox: "K:x:/y", Permits: 3},
	} {
		got, ok := ParseWaiter(w.String())
		if !ok || got != w {
			t.Errorf("ParseWaiter(%q) = %+v, %v; want %+v", w.String(), got, ok, w)
		}
	}
	for _, v := range []string{"", "1:2", "1:0:P", "1:2/0:P", "1:2/x:P", "x:2:P", "1:/3:P"} {
		if w, ok := ParseWaiter(v); ok {
			t.Errorf("ParseWaiter(%q) = %+v; want not ok", v, w)
		}
	}
}
