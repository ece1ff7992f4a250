package rueidisbackend

import "testing"

// TestCanTrack: Tracking mode needs Redis 6.2 (LPOP with a count); New
// falls back to pub/sub below it, where an LPOP with a count is refused
// as a wrong number of arguments, and keeps Tracking on any other answer.
// A real Redis 7 answers the probe, and refuses an LPOP with too many
// arguments (Redis 6.0's answer to the probe) in the words lacksCount
// looks for.
func TestCanTrack(t *testing.T) {
	e := newEnv(t)
	inbox := e.prefix + "inbox"
	if !canTrack(e.raw, inbox) {
		t.Fatal("canTrack = false on Redis 7")
	}
	err := e.raw.Do(ctx, e.raw.B().Arbitrary("LPOP", inbox, "0", "1").Build()).Error()
	if !lacksCount(err) {
		t.Fatalf("lacksCount(%v) = false, want true", err)
	}
	err = e.raw.Do(ctx, e.raw.B().Arbitrary("NOSUCHCOMMAND").Build()).Error()
	if err == nil || lacksCount(err) {
		t.Fatalf("lacksCount(%v) = true, want false", err)
	}
}
