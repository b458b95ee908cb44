package clustertest

import (
	"testing"
	"time"
)

// TestLeaderKillDuringRebalance kills the raft leader while each group is
// rebalancing to take in a new member. The groups must settle with every
// member, no generation may be answered with two memberships or overlapping
// assignments, no stale generation may succeed, and no acknowledged commit
// may be lost.
func TestLeaderKillDuringRebalance(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	cfg := DefaultWorkload()
	cfg.Groups, cfg.Members = 2, 3
	ctx, w, before := stableWorkload(t, c, cfg)
	w.SetCommits(true)
	waitSuccess(t, w, OpCommit, time.Now(), "", 30*time.Second)

	old := c.WaitLeader(10 * time.Second)
	var added []*Member
	for _, g := range w.Groups {
		added = append(added, w.AddMember(g))
	}
	// The second JoinGroup carries the member id the first one was given
	// (MEMBER_ID_REQUIRED): once it is sent, the group is rebalancing.
	deadline := time.Now().Add(20 * time.Second)
	for _, m := range added {
		for m.Joins() < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not send its second JoinGroup", m.Name)
			}
			time.Sleep(time.Millisecond)
		}
	}
	killed := time.Now()
	c.Kill(old.Index)
	after, err := w.WaitStable(60*time.Second, time.Second)
	if err != nil {
		t.Fatalf("after killing %s mid-rebalance: %v; members: %v", old.ID, err, memberStates(w))
	}
	for _, g := range w.Groups {
		if v := after[g.ID]; len(v.Members) != cfg.Members+1 || v.Gen <= before[g.ID].Gen {
			t.Errorf("%s: settled at generation %d with %d members, want more than generation %d and %d members", g.ID, v.Gen, len(v.Members), before[g.ID].Gen, cfg.Members+1)
		}
	}
	for _, g := range w.Groups {
		t.Logf("%s: generation %d with %d members before, %d with %d after", g.ID, before[g.ID].Gen, len(before[g.ID].Members), after[g.ID].Gen, len(after[g.ID].Members))
	}
	t.Logf("killed %s mid-rebalance; groups settled within %v", old.ID, time.Since(killed).Round(time.Millisecond))
	if got, want := describeGroups(t, ctx, w), viewsAsDescribed(after); !mapsEqual(got, want) {
		t.Errorf("described %v, members see %v", got, want)
	}
	settled := time.Now()
	waitSuccess(t, w, OpCommit, settled, old.KafkaAddr, 30*time.Second)
	if err := w.StopCommits(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	checkHistory(t, c, w, fetchAll(t, ctx, c, w, c.WaitLeader(10*time.Second).KafkaAddr))

	c.Restart(old.Index)
	if sts := c.WaitConverged(30 * time.Second); len(sts) != 3 {
		t.Errorf("%d nodes converged, want 3", len(sts))
	}
}

func memberStates(w *Workload) map[string]MemberState {
	out := map[string]MemberState{}
	for _, m := range w.Members() {
		out[m.Name] = m.State()
	}
	return out
}
