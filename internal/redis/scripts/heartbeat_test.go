package scripts

import (
	"fmt"
	"testing"

	"github.com/redislocker/lock/backend"
)

// GroupHeartbeats groups by id in order of first appearance, splits an id
// past MaxHeartbeatBatch, and ScatterHeartbeat puts each reply back at its
// waiter's position.
func TestGroupAndScatterHeartbeats(t *testing.T) {
	var ws []backend.Waiter
	for i := 0; i < MaxHeartbeatBatch+2; i++ {
		ws = append(ws, backend.Waiter{ID: "a", Token: fmt.Sprint("a", i)})
		if i < 2 {
			ws = append(ws, backend.Waiter{ID: "b", Token: fmt.Sprint("b", i)})
		}
	}
	groups := GroupHeartbeats(ws)
	if len(groups) != 3 || groups[0].ID != "a" || groups[1].ID != "b" || groups[2].ID != "a" {
		t.Fatalf("groups = %d (%v, ...); want a, b, a (a split past MaxHeartbeatBatch)", len(groups), groups[0].ID)
	}
	if len(groups[0].Tokens) != MaxHeartbeatBatch || len(groups[1].Tokens) != 2 || len(groups[2].Tokens) != 2 {
		t.Fatalf("group sizes %d, %d, %d", len(groups[0].Tokens), len(groups[1].Tokens), len(groups[2].Tokens))
	}
	out := make([]backend.HeartbeatResult, len(ws))
	for gi, g := range groups {
		reply := make([]int64, len(g.Tokens))
		if gi == 1 {
			for j := range reply {
				reply[j] = 1 // queued
			}
		}
		if err := ScatterHeartbeat(out, g, reply); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range ws {
		if want := w.ID == "b"; out[i].Queued != want {
			t.Fatalf("result %d (%s) Queued = %v, want %v", i, w.Token, out[i].Queued, want)
		}
	}
	if err := ScatterHeartbeat(out, groups[1], []int64{1}); err == nil {
		t.Fatal("a reply of the wrong length was accepted")
	}
}
