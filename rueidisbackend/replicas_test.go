package rueidisbackend

import (
	"testing"
	"time"

	"github.com/redislocker/lock/internal/testenv/adaptertest"
)

// TestWaitReplicasOptions: WaitReplicas and WaitTimeout are validated.
func TestWaitReplicasOptions(t *testing.T) {
	for _, o := range []Options{
		{WaitReplicas: -1},
		{WaitReplicas: 1, WaitTimeout: -time.Second},
		{WaitReplicas: 1, WaitTimeout: time.Microsecond},
	} {
		if _, err := newBackend(&o); err == nil {
			t.Errorf("newBackend accepted %+v", o)
		}
	}
}

func TestWaitReplicasWithoutReplicas(t *testing.T) {
	inModes(t, adaptertest.WaitReplicasWithoutReplicas)
}
