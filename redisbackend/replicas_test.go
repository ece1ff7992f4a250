package redisbackend

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislocker/lock/internal/testenv/adaptertest"
)

// TestWaitReplicasOptions: WaitReplicas and WaitTimeout are validated;
// WAIT needs a client whose pipelines keep to one connection per node.
func TestWaitReplicasOptions(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: time.Second})
	defer client.Close()
	for _, o := range []Options{
		{WaitReplicas: -1},
		{WaitReplicas: 1, WaitTimeout: -time.Second},
		{WaitReplicas: 1, WaitTimeout: time.Microsecond},
		{WaitReplicas: 1, WaitTimeout: time.Second}, // not below ReadTimeout
	} {
		if _, err := New(client, &o); !adaptertest.IsArgumentError(err, "opts.Wait") {
			t.Errorf("New(%+v) = %v; want an *ArgumentError naming the field", o, err)
		}
	}
	if _, err := New(client, &Options{WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond}); err != nil {
		t.Errorf("New rejected a WaitTimeout below ReadTimeout: %v", err)
	}
	type wrapped struct{ *redis.Client }
	if _, err := New(wrapped{client}, &Options{WaitReplicas: 1}); err == nil || !strings.Contains(err.Error(), "WaitReplicas") {
		t.Errorf("New with WaitReplicas on a wrapped client: %v", err)
	}
}

func TestWaitReplicasWithoutReplicas(t *testing.T) {
	adaptertest.WaitReplicasWithoutReplicas(t, newEnv(t).adapter())
}
