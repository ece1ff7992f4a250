package cluster

import (
	"testing"

	"github.com/redislocker/lock/internal/testenv/harness"
	"github.com/redislocker/lock/redisbackend"
	"github.com/redislocker/lock/rueidisbackend"
)

// TestConformanceGoRedis runs the shared suite with redisbackend on
// redis.ClusterClient, one client per backend.
func TestConformanceGoRedis(t *testing.T) {
	harness.RunGoRedis(t, sharedCluster, nil)
}

// TestConformanceRueidisTracking runs the suite with rueidisbackend in
// Tracking mode on a rueidis cluster client (one tracking connection per
// node).
func TestConformanceRueidisTracking(t *testing.T) {
	harness.RunRueidis(t, sharedCluster, rueidisbackend.Tracking, nil)
}

// TestConformanceRueidisPubSub runs the suite with rueidisbackend in
// PubSub mode (NewWithClient) on a rueidis cluster client.
func TestConformanceRueidisPubSub(t *testing.T) {
	harness.RunRueidis(t, sharedCluster, rueidisbackend.PubSub, nil)
}

// TestConformanceGoRedisSharded runs the suite with redisbackend on
// redis.ClusterClient with ShardedPubSub: SPUBLISH from the scripts, one
// SSUBSCRIBE connection per master.
func TestConformanceGoRedisSharded(t *testing.T) {
	harness.RunGoRedis(t, sharedCluster, &redisbackend.Options{ShardedPubSub: true})
}

// TestConformanceRueidisPubSubSharded runs the suite with rueidisbackend
// in PubSub mode with ShardedPubSub: SPUBLISH from the scripts, SSUBSCRIBE
// through rueidis's connection to each channel's master.
func TestConformanceRueidisPubSubSharded(t *testing.T) {
	harness.RunRueidis(t, sharedCluster, rueidisbackend.PubSub, &rueidisbackend.Options{ShardedPubSub: true})
}
