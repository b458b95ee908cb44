package clustertest

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestTransferAndGracefulStop moves leadership with `cohortctl cluster
// transfer-leadership` (sent to a follower, which names the leader), then
// stops the new leader with SIGTERM, which hands leadership over before it
// exits. Neither may cause a rebalance or lose an acknowledged commit.
func TestTransferAndGracefulStop(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	cfg := DefaultWorkload()
	cfg.Groups, cfg.Members = 2, 3
	ctx, w, before := stableWorkload(t, c, cfg)
	joins := w.Joins()
	w.SetCommits(true)
	waitSuccess(t, w, OpCommit, time.Now(), "", 30*time.Second)

	leader := c.WaitLeader(10 * time.Second)
	var via, target *Node
	for _, n := range c.Running() {
		switch {
		case n == leader:
		case via == nil:
			via = n
		default:
			target = n
		}
	}
	bin, err := Binary("./cmd/cohortctl")
	if err != nil {
		t.Fatal(err)
	}
	moved := time.Now()
	if out, err := exec_(bin, "--timeout", "30s", "cluster", "--remote", via.RemoteAddr, "transfer-leadership", target.ID); err != nil {
		t.Fatalf("cohortctl cluster transfer-leadership %s via %s: %v\n%s", target.ID, via.ID, err, out)
	}
	if l := c.WaitLeader(10 * time.Second); l != target {
		t.Fatalf("after transfer-leadership %s, %s leads", target.ID, l.ID)
	}
	waitSuccess(t, w, OpHeartbeat, moved, leader.KafkaAddr, 30*time.Second)
	waitSuccess(t, w, OpCommit, moved, leader.KafkaAddr, 30*time.Second)
	t.Logf("transfer %s -> %s: every member heartbeat and committed at the new leader within %v", leader.ID, target.ID, time.Since(moved).Round(time.Millisecond))

	stopped := time.Now()
	c.Stop(target.Index)
	if err := c.ExitErr(target.Index); err != nil {
		t.Errorf("%s exited with %v after SIGTERM, want status 0", target.ID, err)
	}
	if b, err := os.ReadFile(target.LogPath); err != nil || !strings.Contains(string(b), "leadership transferred before shutdown") {
		t.Errorf("%s did not log a leadership transfer before shutdown (%v)", target.ID, err)
	}
	waitSuccess(t, w, OpHeartbeat, stopped, target.KafkaAddr, 30*time.Second)
	waitSuccess(t, w, OpCommit, stopped, target.KafkaAddr, 30*time.Second)
	next := c.WaitLeader(10 * time.Second)
	t.Logf("SIGTERM %s: %s leads; every member heartbeat and committed at it within %v", target.ID, next.ID, time.Since(stopped).Round(time.Millisecond))

	if err := w.StopCommits(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	checkGroupsKept(t, ctx, w, before, joins, "after the transfer and the graceful stop")
	checkHistory(t, c, w, fetchAll(t, ctx, c, w, c.WaitLeader(10*time.Second).KafkaAddr))
	if sts := c.WaitConverged(30 * time.Second); len(sts) != 2 {
		t.Errorf("%d nodes converged, want 2", len(sts))
	}
}
