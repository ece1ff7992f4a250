package cluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/internal/redis/keys"
)

// TestShared checks the shared cluster's shape: three masters that share
// the 16384 slots, one replica each, and that a second call returns the
// same cluster.
func TestShared(t *testing.T) {
	start := time.Now()
	c := Shared(t)
	t.Logf("shared cluster up in %v: %v", time.Since(start), c.Addrs())
	if again := Shared(t); again != c {
		t.Fatal("Shared returned two clusters")
	}
	ctx := context.Background()
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.external {
		t.Skip("external cluster: its shape is not ours")
	}
	if len(masters) != SharedOptions.Masters {
		t.Fatalf("masters = %v, want %d", masters, SharedOptions.Masters)
	}
	for _, m := range masters {
		r, err := c.ReplicasOf(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if len(r) != SharedOptions.Replicas {
			t.Errorf("replicas of %s = %v, want %d", m, r, SharedOptions.Replicas)
		}
	}
}

// TestKeySlotAgrees checks keys.Slot against CLUSTER KEYSLOT, for the
// keys of ids with braces, escapes and bytes that are not UTF-8.
func TestKeySlotAgrees(t *testing.T) {
	c := Shared(t)
	ctx := context.Background()
	ks, _ := keys.New("t:")
	for i, id := range []string{"order-42", "a{b}c", "%7B", "}{:lock", "\xff\x00", "x"} {
		k := ks.For(id)
		for _, key := range []string{k.Lock, k.Queue, k.Waiters, k.Fence, ks.Released(k.Slot, 1), ks.Wire(), fmt.Sprint("plain", i)} {
			got, err := c.Do(ctx, c.Nodes[0].Addr, "CLUSTER", "KEYSLOT", key)
			if err != nil {
				t.Fatal(err)
			}
			if got.(int64) != int64(keys.Slot(key)) {
				t.Errorf("CLUSTER KEYSLOT %q = %v, keys.Slot = %d", key, got, keys.Slot(key))
			}
			if key != ks.Wire() && key[:5] != "plain" && got.(int64) != int64(k.Slot) {
				t.Errorf("CLUSTER KEYSLOT %q = %v, want the id's slot %d", key, got, k.Slot)
			}
		}
	}
}

// TestMoveSlot moves the slot of a few keys to another master and back;
// a cluster client follows.
func TestMoveSlot(t *testing.T) {
	c := Shared(t)
	c.RequireOwned(t)
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	tag := fmt.Sprintf("{movetest-%d}", time.Now().UnixNano())
	slot := keys.Slot(tag)
	for i := range 5 {
		if err := cc.Set(ctx, fmt.Sprint(tag, i), i, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	from, err := c.SlotOwner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	masters, _ := c.Masters(ctx)
	to := masters[(slices.Index(masters, from)+1)%len(masters)]
	moved := 0 // of this test's keys: the slot may hold other tests' keys too
	if err := c.MoveSlot(ctx, slot, to, MoveHooks{Moved: func(key string) error {
		if strings.HasPrefix(key, tag) {
			moved++
		}
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	if moved != 5 {
		t.Errorf("moved %d keys, want 5", moved)
	}
	if owner, _ := c.SlotOwner(ctx, slot); owner != to {
		t.Fatalf("slot %d is on %s, want %s", slot, owner, to)
	}
	for i := range 5 {
		if v, err := cc.Get(ctx, fmt.Sprint(tag, i)).Int(); err != nil || v != i {
			t.Fatalf("after the move, GET = %v, %v", v, err)
		}
	}
	if err := c.MoveSlot(ctx, slot, from, MoveHooks{}); err != nil {
		t.Fatal(err)
	}
}

// TestStartStop starts a private cluster without replicas and checks that
// Stop leaves no node answering.
func TestStartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second cluster")
	}
	start := time.Now()
	c := Start(t, Options{})
	t.Logf("private cluster up in %v", time.Since(start))
	if len(c.Nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(c.Nodes))
	}
	c.Stop()
	for _, n := range c.Nodes {
		if conn, err := net.DialTimeout("tcp", n.Addr, time.Second); err == nil {
			conn.Close()
			t.Errorf("node %s still answers after Stop", n.Addr)
		}
	}
	c.Stop()
}
