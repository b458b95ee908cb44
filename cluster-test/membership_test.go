package clustertest

import (
	"context"
	"slices"
	"testing"
	"time"
)

// checkGroupsKept checks that the groups kept the generation and members of
// before, that no member rejoined since joins was read, and that the
// history is clean.
func checkGroupsKept(t *testing.T, ctx context.Context, w *Workload, before map[string]GroupView, joins int64, step string) {
	t.Helper()
	if n := w.Joins() - joins; n != 0 {
		t.Errorf("%s: %d JoinGroup requests, want 0", step, n)
	}
	if got, want := describeGroups(t, ctx, w), viewsAsDescribed(before); !mapsEqual(got, want) {
		t.Errorf("%s: described %v, want %v", step, got, want)
	}
	after, ok := w.Stable()
	if !ok || !sameViews(before, after) {
		t.Errorf("%s: members see %v (stable %v), want %v", step, after, ok, before)
	}
}

// quiesceAndConverge stops commits, waits for every running node to apply the
// same state, and resumes commits.
func quiesceAndConverge(t *testing.T, c *Cluster, w *Workload, want int) {
	t.Helper()
	if err := w.StopCommits(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	if sts := c.WaitConverged(30 * time.Second); len(sts) != want {
		t.Fatalf("%d nodes converged, want %d", len(sts), want)
	}
	w.SetCommits(true)
}

// TestMembershipChanges grows a 3-node cluster to 4, removes a follower,
// then removes the leader (through cohortctl), while groups heartbeat and
// commit. No change may cause a rebalance or lose an acknowledged commit,
// and the remaining nodes converge after each step.
func TestMembershipChanges(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	cfg := DefaultWorkload()
	cfg.Groups, cfg.Members = 2, 3
	ctx, w, before := stableWorkload(t, c, cfg)
	joins := w.Joins()
	w.SetCommits(true)
	waitSuccess(t, w, OpCommit, time.Now(), "", 30*time.Second)

	begin := time.Now()
	logf := func(format string, args ...any) {
		t.Helper()
		t.Logf("%6.2fs "+format, append([]any{time.Since(begin).Seconds()}, args...)...)
	}
	// Add a fourth node.
	n4 := c.AddNode()
	quiesceAndConverge(t, c, w, 4)
	logf("added %s", n4.ID)

	// Remove a follower.
	leader := c.WaitLeader(10 * time.Second)
	var follower *Node
	for _, n := range c.Running() {
		if n != leader {
			follower = n
			break
		}
	}
	if err := c.RemoveVoter(follower.Index); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for _, n := range c.Running() {
		if n != follower {
			rest = append(rest, n.ID)
		}
	}
	c.WaitVoters(rest, 20*time.Second)
	c.Stop(follower.Index)
	step := time.Now()
	waitSuccess(t, w, OpCommit, step, "", 30*time.Second)
	quiesceAndConverge(t, c, w, 3)
	checkGroupsKept(t, ctx, w, before, joins, "after removing follower "+follower.ID)
	logf("removed follower %s", follower.ID)

	// Remove the leader through cohortctl: the leader hands leadership over,
	// and the command follows it to the new leader.
	leader = c.WaitLeader(10 * time.Second)
	bin, err := Binary("./cmd/cohortctl")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec_(bin, "--timeout", "30s", "cluster", "--remote", leader.RemoteAddr, "remove-voter", leader.ID); err != nil {
		t.Fatalf("cohortctl cluster remove-voter %s: %v\n%s", leader.ID, err, out)
	}
	rest = rest[:0]
	for _, n := range c.Running() {
		if n != leader {
			rest = append(rest, n.ID)
		}
	}
	newLeader := c.WaitVoters(rest, 20*time.Second)
	if newLeader == leader {
		t.Fatalf("removed leader %s still leads", leader.ID)
	}
	logf("%s removed, %s leads", leader.ID, newLeader.ID)
	c.Stop(leader.Index)
	step = time.Now()
	waitSuccess(t, w, OpHeartbeat, step, leader.KafkaAddr, 30*time.Second)
	waitSuccess(t, w, OpCommit, step, leader.KafkaAddr, 30*time.Second)
	if err := w.StopCommits(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	logf("every member heartbeat and committed at a node other than %s", leader.ID)
	sts := c.WaitConverged(30 * time.Second)
	for _, st := range sts {
		if v := sortedCopy(Voters(st)); !slices.Equal(v, sortedCopy(rest)) {
			t.Errorf("%s sees voters %v, want %v", st.NodeId, v, rest)
		}
	}
	checkGroupsKept(t, ctx, w, before, joins, "after removing leader "+leader.ID)
	checkHistory(t, c, w, fetchAll(t, ctx, c, w, c.WaitLeader(10*time.Second).KafkaAddr))
	logf("removed leader %s; %s leads %v; term %d", leader.ID, newLeader.ID, rest, sts[0].Term)
}
