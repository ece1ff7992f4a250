package cluster

import (
	"strconv"
	"strings"
	"testing"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/redis/scripts"
	"github.com/redislocker/lock/internal/testenv/harness"
)

// TestFunctionsCluster: both adapters, in every mode, logged in as an ACL
// user of harness.ACLRules and harness.ACLRulesCluster with the optional
// "+function|load +fcall" (docs/deployment.md), load the scripts' function
// library on every master and run the workload of aclWorkload by FCALL on
// each of them. No node logs a refusal of that user.
func TestFunctionsCluster(t *testing.T) {
	e := newClusterEnv(t)
	e.c.RequireOwned(t) // it adds a user to every node
	u := newACLUser(t)
	ks := testKeys(t)
	rules := append(harness.ACLRules(ks.Prefix()), harness.ACLRulesCluster()...)
	rules = append(rules, "+function|load", "+fcall")
	for _, addr := range e.c.Addrs() {
		u.create(t, addr, rules)
	}
	var ids []string
	byMaster := e.idsPerMaster(2)
	for _, m := range e.masters {
		ids = append(ids, byMaster[m]...)
	}
	fcalls := func(addr string) int64 {
		t.Helper()
		v, err := e.c.Do(ctx, addr, "INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(v.(string), "\n") {
			if s, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_fcall:calls="); ok {
				n, _ := strconv.ParseInt(strings.Split(s, ",")[0], 10, 64)
				return n
			}
		}
		return 0
	}
	for _, a := range aclAdapters {
		t.Run(a.name, func(t *testing.T) {
			before := map[string]int64{}
			for _, m := range e.masters {
				before[m] = fcalls(m)
			}
			prefix := ks.Prefix() + a.name + ":"
			aclWorkload(t, func() backend.Backend { return a.onCluster(t, e.c.Addrs(), u, prefix) }, a.wait, ids)
			for _, m := range e.masters {
				libs, err := e.c.Do(ctx, m, "FUNCTION", "LIST", "LIBRARYNAME", scripts.Lib.Name)
				if err != nil || len(libs.([]any)) != 1 {
					t.Fatalf("%s: FUNCTION LIST %s = %v, %v; want the library", m, scripts.Lib.Name, libs, err)
				}
				if n := fcalls(m) - before[m]; n == 0 {
					t.Errorf("%s: no FCALL in the workload", m)
				}
			}
		})
	}
	harness.CheckACLLogAt(t, nil, u.name, e.c.Addrs()...)
}
