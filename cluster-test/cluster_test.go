package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"
)

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts cohortd processes")
	}
}

// waitSuccess waits until every member had a successful request of kind
// that started after since, answered by the node at addr when addr is set.
func waitSuccess(t *testing.T, w *Workload, kind string, since time.Time, addr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, m := range w.Members() {
		for {
			if last := m.LastOK(kind); last.After(since) && (addr == "" || m.State().Node == addr) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no successful %s since %s at %q within %v (state %+v)", m.Name, kind, since.Format(time.TimeOnly), addr, timeout, m.State())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// describeGroups returns each group's description as "state gen members".
func describeGroups(t *testing.T, ctx context.Context, w *Workload) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, g := range w.Groups {
		d, _, err := DescribeGroup(ctx, g.Coord)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range d.Members {
			ids = append(ids, m.MemberID)
		}
		out[g.ID] = fmt.Sprintf("%s %v", d.State, sortedCopy(ids))
	}
	return out
}

func viewsAsDescribed(v map[string]GroupView) map[string]string {
	out := map[string]string{}
	for g, gv := range v {
		out[g] = fmt.Sprintf("Stable %v", gv.Members)
	}
	return out
}

// fetchAll fetches the committed offsets of every group.
func fetchAll(t *testing.T, ctx context.Context, w *Workload) map[OffsetKey]int64 {
	t.Helper()
	out := map[OffsetKey]int64{}
	for _, g := range w.Groups {
		offs, _, err := FetchOffsets(ctx, g.Coord, g.Topic, g.Partitions)
		if err != nil {
			t.Fatal(err)
		}
		for p, o := range offs {
			out[OffsetKey{g.ID, g.Topic, p}] = o
		}
	}
	return out
}

func checkHistory(t *testing.T, w *Workload, fetched map[OffsetKey]int64) {
	t.Helper()
	ops := w.History.Ops()
	for _, err := range CheckGenerations(ops) {
		t.Error(err)
	}
	for _, err := range CheckOffsets(ops, fetched) {
		t.Error(err)
	}
	acked := 0
	for _, o := range ops {
		if o.Kind == OpCommit && o.OK() {
			acked++
		}
	}
	if acked == 0 {
		t.Error("no commit was acknowledged: the workload did nothing")
	}
	t.Logf("history: %s", Summary(ops))
}

// cohortctlStatus runs `cohortctl --json cluster status` against node n.
func cohortctlStatus(t *testing.T, n *Node) []map[string]any {
	t.Helper()
	bin, err := Binary("./cmd/cohortctl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--json", "--timeout", "10s", "cluster", "--remote", n.RemoteAddr, "status").Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("cohortctl cluster status: %v: %s", err, msg)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("cohortctl cluster status: %v\n%s", err, out)
	}
	return rows
}

// waitCohortctlHash waits until `cohortctl cluster status` lists want nodes,
// all with the same FSM hash, and returns it.
func waitCohortctlHash(t *testing.T, c *Cluster, want int, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rows := cohortctlStatus(t, c.Running()[0])
		hashes := map[string]bool{}
		for _, r := range rows {
			h, _ := r["fsm_hash"].(string)
			hashes[h] = true
		}
		if len(rows) == want && len(hashes) == 1 && !hashes[""] {
			for h := range hashes {
				return h
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("cohortctl cluster status did not show %d nodes with one FSM hash within %v: %v", want, timeout, rows)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestLeaderKillKeepsGroups kills the raft leader with SIGKILL while 3
// groups of 5 members heartbeat and commit. The failover must cause no
// rebalance, every acknowledged commit must be fetched from the new leader,
// no generation may be answered with two memberships, and the killed node
// must come back and converge to the same FSM hash.
func TestLeaderKillKeepsGroups(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, err := StartWorkload(ctx, c.KafkaAddrs, DefaultWorkload())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	before, err := w.WaitStable(60*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := describeGroups(t, ctx, w), viewsAsDescribed(before); !mapsEqual(got, want) {
		t.Fatalf("before the kill: described %v, members see %v", got, want)
	}
	joins := w.Joins()
	w.SetCommits(true)
	waitSuccess(t, w, OpCommit, time.Now(), "", 30*time.Second)

	old := c.WaitLeader(10 * time.Second)
	killed := time.Now()
	c.Kill(old.Index)
	leader := c.WaitLeader(20 * time.Second)
	if leader == old {
		t.Fatalf("%s still leads after being killed", old.ID)
	}
	waitSuccess(t, w, OpHeartbeat, killed, leader.KafkaAddr, 30*time.Second)
	waitSuccess(t, w, OpCommit, killed, leader.KafkaAddr, 30*time.Second)
	t.Logf("killed %s; %s leads; every member heartbeat and committed at it within %v", old.ID, leader.ID, time.Since(killed).Round(time.Millisecond))
	if err := w.StopCommits(15 * time.Second); err != nil {
		t.Fatal(err)
	}

	if n := w.Joins() - joins; n != 0 {
		for _, o := range w.History.Ops() {
			if o.Kind == OpJoin && o.Start.After(killed) {
				t.Logf("rejoin: %s", o)
			}
		}
		t.Errorf("the failover caused %d JoinGroup requests, want 0", n)
	}
	after, ok := w.Stable()
	if !ok || !sameViews(before, after) {
		t.Errorf("members' view changed: before %v, after %v (stable %v)", before, after, ok)
	}
	if got, want := describeGroups(t, ctx, w), viewsAsDescribed(before); !mapsEqual(got, want) {
		t.Errorf("after the failover: described %v, want %v", got, want)
	}
	checkHistory(t, w, fetchAll(t, ctx, w))

	c.Restart(old.Index)
	sts := c.WaitConverged(30 * time.Second)
	if len(sts) != 3 {
		t.Fatalf("%d nodes converged, want 3", len(sts))
	}
	for _, st := range sts {
		if st.NodeId == old.ID && st.State != "Follower" {
			t.Errorf("restarted %s is %s", st.NodeId, st.State)
		}
		if v := sortedCopy(Voters(st)); !slices.Equal(v, []string{"node1", "node2", "node3"}) {
			t.Errorf("%s sees voters %v", st.NodeId, v)
		}
	}
	waitCohortctlHash(t, c, 3, 15*time.Second)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// exec_ runs a command and returns its combined output.
func exec_(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	return string(out), err
}
