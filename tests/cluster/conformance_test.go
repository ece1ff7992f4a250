package cluster

import (
	"sync"
	"testing"

	"github.com/redislocker/lock/internal/testenv/harness"
	"github.com/redislocker/lock/redisbackend"
	"github.com/redislocker/lock/rueidisbackend"
)

// TestConformance runs the shared suite on the shared cluster with each
// adapter configuration, two at a time: each property has a key prefix of
// its own, and a run mostly waits on timers and the network (about half a
// core under -race); three at once starved the suite's tighter timing
// bounds (300 ms leases) on a loaded 2-core machine. They run in goroutines of their own rather
// than as parallel subtests, which -test.parallel (the number of CPUs)
// would hold to two at a time.
//
//   - go-redis: redisbackend on redis.ClusterClient, one client per
//     backend.
//   - rueidis-tracking: rueidisbackend in Tracking mode on a rueidis
//     cluster client (one tracking connection per node).
//   - rueidis-pubsub: rueidisbackend in PubSub mode (NewWithClient) on a
//     rueidis cluster client.
//   - go-redis-sharded: redisbackend with ShardedPubSub: SPUBLISH from the
//     scripts, one SSUBSCRIBE connection per master.
//   - rueidis-pubsub-sharded: rueidisbackend in PubSub mode with
//     ShardedPubSub: SPUBLISH from the scripts, SSUBSCRIBE through
//     rueidis's connection to each channel's master.
func TestConformance(t *testing.T) {
	runs := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"go-redis", func(t *testing.T) { harness.RunGoRedis(t, sharedCluster, nil) }},
		{"rueidis-tracking", func(t *testing.T) { harness.RunRueidis(t, sharedCluster, rueidisbackend.Tracking, nil) }},
		{"rueidis-pubsub", func(t *testing.T) { harness.RunRueidis(t, sharedCluster, rueidisbackend.PubSub, nil) }},
		{"go-redis-sharded", func(t *testing.T) {
			harness.RunGoRedis(t, sharedCluster, &redisbackend.Options{ShardedPubSub: true})
		}},
		{"rueidis-pubsub-sharded", func(t *testing.T) {
			harness.RunRueidis(t, sharedCluster, rueidisbackend.PubSub, &rueidisbackend.Options{ShardedPubSub: true})
		}},
	}
	Shared(t) // started once, before the runs need it
	const atOnce = 2
	sem := make(chan struct{}, atOnce)
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(r.name, r.run)
		})
	}
	wg.Wait()
}
