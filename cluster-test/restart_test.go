package clustertest

import (
	"testing"
	"time"
)

// TestWholeClusterCrash kills every node with SIGKILL at once while groups
// heartbeat and commit, then restarts them all from their data directories.
// Every acknowledged commit must survive (fsync), and the groups must come
// back with the same generation and members: the members keep heartbeating
// and the outage is shorter than their session timeout.
func TestWholeClusterCrash(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	cfg := DefaultWorkload()
	cfg.Groups, cfg.Members, cfg.StaticGroups = 2, 3, 1
	ctx, w, before := stableWorkload(t, c, cfg)
	joins := w.Joins()
	w.SetCommits(true)
	waitSuccess(t, w, OpCommit, time.Now(), "", 30*time.Second)

	crashed := time.Now()
	for i := range c.Nodes {
		c.Kill(i)
	}
	for i := range c.Nodes {
		c.Restart(i)
	}
	leader := c.WaitLeader(30 * time.Second)
	waitSuccess(t, w, OpHeartbeat, crashed, "", 30*time.Second)
	waitSuccess(t, w, OpCommit, crashed, "", 30*time.Second)
	t.Logf("crashed all nodes; %s leads; every member heartbeat and committed within %v", leader.ID, time.Since(crashed).Round(time.Millisecond))
	if err := w.StopCommits(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	checkGroupsKept(t, ctx, w, before, joins, "after the whole cluster crashed")
	checkHistory(t, c, w, fetchAll(t, ctx, c, w, c.WaitLeader(10*time.Second).KafkaAddr))
	if sts := c.WaitConverged(30 * time.Second); len(sts) != 3 {
		t.Errorf("%d nodes converged, want 3", len(sts))
	}
}
