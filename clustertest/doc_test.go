// Package clustertest runs the lock library on scaled-out Redis
// deployments: a local Redis Cluster of three masters with one replica
// each (internal/rediscluster, one per test binary, shared by every test
// under its own key prefix), and, for the failover client, a master with a
// replica and Sentinels. It holds tests only:
//
//   - conformance of both adapters on the cluster: redisbackend on a
//     redis.ClusterClient, rueidisbackend in Tracking and PubSub modes;
//   - every key of an id in one slot (CLUSTER KEYSLOT);
//   - a slot migration while locks are held and waiters queued;
//   - the replica-acknowledgement option (WAIT);
//   - AcquireMany of many ids on one master and on the cluster.
//
// The cluster starts in about 3 s (redis-cli --cluster create waits in
// steps of one second); without redis-server and redis-cli the tests skip,
// unless CI is set.
package clustertest
