// Package cluster runs the lock library on scaled-out Redis
// deployments. It holds tests only:
//
//   - conformance of both adapters on a local Redis Cluster of three
//     masters with one replica each (started once per
//     test binary in about 3 s and shared by every test under its own key
//     prefix): redisbackend on redis.ClusterClient with classic and with
//     sharded pub/sub, rueidisbackend in Tracking mode and in PubSub mode,
//     classic and sharded;
//   - sharded subscriptions: one connection per master, restored after the
//     connections are killed; Tracking mode: one tracking connection per
//     master runs the steps, a release wakes only its id;
//   - AcquireMany as one batched call per master;
//   - a slot migration there and back while locks are held and waiters
//     queued: no double grant, fences increase, waiters still woken;
//   - the WAIT option (WaitReplicas) on a master with a replica and on the
//     cluster; Sentinel (go-redis's failover client, rueidis's sentinel
//     client): a hand-off and a forced failover; the failover risk that
//     WAIT narrows, shown with a replication link cut by a proxy;
//   - least privilege: both adapters, in every mode, as ACL users of
//     harness.ACLRules and its additions for Cluster (ACLRulesCluster, a
//     slot migration included) and Sentinel (ACLRulesBehindSentinel,
//     ACLRulesSentinel), with no refusal in any node's ACL LOG;
//   - BenchmarkAcquireMany: 10,000 ids on one master and on three.
//
// Without redis-server and redis-cli the tests skip, unless CI is set.
// REDIS_CLUSTER_ADDRS runs them on a cluster of your own (the tests that
// reconfigure a cluster then skip).
package cluster
