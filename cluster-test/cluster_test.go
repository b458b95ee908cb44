package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/raftfsm"
)

// stableWorkload starts cfg's members against c and waits until every group
// is stable. The workload stops, and ctx ends, when the test does.
func stableWorkload(t *testing.T, c *Cluster, cfg WorkloadConfig) (context.Context, *Workload, map[string]GroupView) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	w, err := StartWorkload(ctx, c.KafkaAddrs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	before, err := w.WaitStable(60*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, w, before
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts cohortd processes")
	}
}

// waitSuccess waits until every member had a successful request of kind
// after since, answered by a node other than the one at except (only the
// leader answers group requests, so that is a leader other than except).
func waitSuccess(t *testing.T, w *Workload, kind string, since time.Time, except string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, m := range w.Members() {
		for {
			if last := m.LastOK(kind); last.After(since) && (except == "" || m.State().Node != except) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no successful %s since %s at a node other than %q within %v (state %+v)", m.Name, kind, since.Format(time.TimeOnly), except, timeout, m.State())
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

// fetchAll fetches the committed offsets of every group from the node at
// want.
func fetchAll(t *testing.T, ctx context.Context, c *Cluster, w *Workload, want string) map[OffsetKey]int64 {
	t.Helper()
	out := map[OffsetKey]int64{}
	for _, g := range w.Groups {
		offs, addr, err := FetchOffsets(ctx, g.Coord, g.Topic, g.Partitions)
		if err != nil {
			t.Fatal(err)
		}
		if addr != want {
			if now := c.Leader(); now != nil && now.KafkaAddr != want {
				t.Logf("leadership moved from %s to %s (term change); the offsets come from the current leader", c.NameOf(want), now.ID)
				want = now.KafkaAddr
			}
		}
		if addr != want {
			t.Errorf("%s: offsets fetched from %s, want the leader %s", g.ID, c.NameOf(addr), c.NameOf(want))
		}
		for p, o := range offs {
			out[OffsetKey{g.ID, g.Topic, p}] = o
		}
	}
	return out
}

func checkHistory(t *testing.T, c *Cluster, w *Workload, fetched map[OffsetKey]int64) {
	t.Helper()
	ops := w.History.Ops()
	for _, err := range CheckGenerations(ops) {
		t.Error(err)
	}
	for _, err := range CheckOffsets(ops, fetched) {
		t.Error(err)
	}
	for _, err := range CheckFencing(ops) {
		t.Error(err)
	}
	acked, unusual := 0, 0
	for _, o := range ops {
		if o.Kind == OpCommit && o.OK() {
			acked++
		}
		switch o.Code {
		case errNone, kerr.CoordinatorLoadInProgress.Code, kerr.CoordinatorNotAvailable.Code, kerr.NotCoordinator.Code,
			kerr.IllegalGeneration.Code, kerr.UnknownMemberID.Code, kerr.RebalanceInProgress.Code, kerr.MemberIDRequired.Code:
		default:
			if unusual++; unusual <= 10 {
				t.Logf("unusual answer from %s at %s: %s", c.NameOf(o.Node), o.Start.Format("15:04:05.000"), o)
			}
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
	var view struct {
		Nodes []map[string]any `json:"nodes"`
	}
	if err := json.Unmarshal(out, &view); err != nil {
		t.Fatalf("cohortctl cluster status: %v\n%s", err, out)
	}
	return view.Nodes
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
			// Every node of the cluster runs this version, so the cluster
			// writes the newest log format (compressed entries).
			for _, r := range rows {
				if f, _ := r["log_format"].(float64); uint32(f) != raftfsm.LogFormat {
					t.Fatalf("%v: log format %v, want %d", r["node_id"], r["log_format"], raftfsm.LogFormat)
				}
			}
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
// groups of 5 members (one group with static membership) heartbeat and
// commit. The failover must cause no
// rebalance, every acknowledged commit must be fetched from the new leader,
// no generation may be answered with two memberships, and the killed node
// must come back and converge to the same FSM hash.
func TestLeaderKillKeepsGroups(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	cfg := DefaultWorkload()
	cfg.StaticGroups = 1
	ctx, w, before := stableWorkload(t, c, cfg)
	if got, want := describeGroups(t, ctx, w), viewsAsDescribed(before); !mapsEqual(got, want) {
		t.Fatalf("before the kill: described %v, members see %v", got, want)
	}
	joins := w.Joins()
	w.SetCommits(true)
	waitSuccess(t, w, OpCommit, time.Now(), "", 30*time.Second)

	checkRouting(t, ctx, c, w.Groups[0].ID)
	old := c.WaitLeader(10 * time.Second)
	killed := time.Now()
	c.Kill(old.Index)
	leader := c.WaitLeader(20 * time.Second)
	if leader == old {
		t.Fatalf("%s still leads after being killed", old.ID)
	}
	waitSuccess(t, w, OpHeartbeat, killed, old.KafkaAddr, 30*time.Second)
	waitSuccess(t, w, OpCommit, killed, old.KafkaAddr, 30*time.Second)
	t.Logf("killed %s; %s leads; every member heartbeat and committed at a new leader within %v", old.ID, leader.ID, time.Since(killed).Round(time.Millisecond))
	if err := w.StopCommits(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	checkRouting(t, ctx, c, w.Groups[0].ID)
	leader = c.WaitLeader(10 * time.Second)

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
	checkHistory(t, c, w, fetchAll(t, ctx, c, w, leader.KafkaAddr))

	c.Restart(old.Index)
	sts := c.WaitConverged(30 * time.Second)
	if len(sts) != 3 {
		t.Fatalf("%d nodes converged, want 3", len(sts))
	}
	for _, st := range sts {
		if v := sortedCopy(Voters(st)); !slices.Equal(v, []string{"node1", "node2", "node3"}) {
			t.Errorf("%s sees voters %v", st.NodeId, v)
		}
	}
	waitCohortctlHash(t, c, 3, 15*time.Second)
	checkRouting(t, ctx, c, w.Groups[0].ID)
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

// checkRouting checks that every running node names the leader as the
// group's coordinator and that followers answer group requests with
// NOT_COORDINATOR. Nodes learn of a new leader at slightly different times,
// so it retries for up to 10 s and reports the last discrepancy.
func checkRouting(t *testing.T, ctx context.Context, c *Cluster, group string) {
	t.Helper()
	conns := NewConns("routing-check")
	defer conns.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		leader := c.WaitLeader(10 * time.Second)
		problems := routingProblems(ctx, conns, c, leader, group)
		if len(problems) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range problems {
				t.Error(p)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func routingProblems(ctx context.Context, conns *Conns, c *Cluster, leader *Node, group string) []string {
	var problems []string
	for _, n := range c.Running() {
		one := &Coordinator{Conns: conns, Seeds: func() []string { return []string{n.KafkaAddr} }, Group: group}
		addr, err := one.Find(ctx)
		if err != nil {
			problems = append(problems, fmt.Sprintf("FindCoordinator at %s: %v", n.ID, err))
			continue
		}
		if addr != leader.KafkaAddr {
			problems = append(problems, fmt.Sprintf("FindCoordinator at %s answered %s, want the leader %s", n.ID, c.NameOf(addr), c.NameOf(leader.KafkaAddr)))
		}
		if n == leader {
			continue
		}
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.Generation, req.MemberID = group, 1, "nobody"
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := conns.Request(rctx, n.KafkaAddr, req)
		cancel()
		if err != nil {
			problems = append(problems, fmt.Sprintf("Heartbeat at follower %s: %v", n.ID, err))
			continue
		}
		if code := res.(*kmsg.HeartbeatResponse).ErrorCode; code != kerr.NotCoordinator.Code {
			problems = append(problems, fmt.Sprintf("Heartbeat at follower %s: error code %d, want NOT_COORDINATOR (16)", n.ID, code))
		}
	}
	return problems
}
