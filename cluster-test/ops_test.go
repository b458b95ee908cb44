package clustertest

import (
	"bytes"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func withHTTP(o *Options) { o.HTTP = true }

// waitReadyz waits until n's /readyz answers want (200 or 503) and returns
// its body.
func waitReadyz(t *testing.T, n *Node, want int, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code, body, err := n.HTTPGet("/readyz")
		if err == nil && code == want {
			return string(body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s /readyz: %d %q (%v), want %d within %v", n.ID, code, body, err, want, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func promtoolCheck(t *testing.T, text []byte) {
	t.Helper()
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = bytes.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

func wantValue(t *testing.T, m *Metrics, want float64, name string, labels ...string) {
	t.Helper()
	if v, ok := m.Value(name, labels...); !ok || v != want {
		t.Errorf("%s%v = %v (present %v), want %v", name, labels, v, ok, want)
	}
}

func wantAtLeast(t *testing.T, m *Metrics, least float64, name string, labels ...string) {
	t.Helper()
	if v := m.Sum(name, labels...); v < least {
		t.Errorf("%s%v = %v, want at least %v", name, labels, v, least)
	}
}

// The metrics of a 3-node cluster after groups formed and committed and
// after a failover; readiness on every node, and on a node left alone.
func TestMetricsAndReadiness(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3, withHTTP)
	for _, n := range c.Running() {
		if code, body, err := n.HTTPGet("/healthz"); err != nil || code != http.StatusOK || string(body) != "ok\n" {
			t.Fatalf("%s /healthz: %d %q %v", n.ID, code, body, err)
		}
		waitReadyz(t, n, http.StatusOK, 20*time.Second)
	}
	for _, r := range cohortctlStatus(t, c.Running()[0]) {
		if r["ready"] != true {
			t.Errorf("cohortctl cluster status: %v", r)
		}
	}
	cfg := DefaultWorkload()
	cfg.Groups, cfg.Members, cfg.Partitions = 2, 3, 6
	_, w, _ := stableWorkload(t, c, cfg)
	w.SetCommits(true)
	waitSuccess(t, w, OpCommit, time.Now(), "", 30*time.Second)
	if err := w.StopCommits(15 * time.Second); err != nil {
		t.Fatal(err)
	}

	leader := c.WaitLeader(10 * time.Second)
	m, err := leader.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	promtoolCheck(t, m.Text)
	wantValue(t, m, 2, "cohort_groups", "state=Stable", "protocol_type=consumer")
	wantValue(t, m, 0, "cohort_groups", "state=PreparingRebalance", "protocol_type=consumer")
	wantValue(t, m, 6, "cohort_group_members")
	wantAtLeast(t, m, 2, "cohort_group_rebalances_total", "cause=join")
	wantAtLeast(t, m, 2, "cohort_group_rebalance_duration_seconds", "cause=join")
	wantAtLeast(t, m, 12, "cohort_group_offset_commits_total")
	// Range groups of members that own nothing: the guard withholds none.
	wantValue(t, m, 0, "cohort_group_guard_withheld_partitions_total")
	wantValue(t, m, 0, "cohort_group_guard_follow_up_rebalances_total")
	wantValue(t, m, 2, "cohort_stored_groups")
	wantValue(t, m, 12, "cohort_stored_offsets")
	wantAtLeast(t, m, 6, "cohort_kafka_requests_total", "api=JoinGroup")
	wantAtLeast(t, m, 6, "cohort_kafka_requests_total", "api=OffsetCommit", "error=NONE")
	wantAtLeast(t, m, 6, "cohort_kafka_requests_total", "api=Heartbeat", "error=NONE")
	wantAtLeast(t, m, 6, "cohort_kafka_request_duration_seconds", "api=Heartbeat")
	wantAtLeast(t, m, 1, "cohort_kafka_connections")
	wantValue(t, m, 1, "cohort_raft_state", "state=Leader")
	wantValue(t, m, 1, "cohort_raft_leader_known")
	wantAtLeast(t, m, 1, "cohort_raft_commit_duration_seconds")
	wantAtLeast(t, m, 1, "cohort_raft_fsm_apply_duration_seconds")
	wantAtLeast(t, m, 1, "cohort_raft_log_store_duration_seconds")
	term, _ := m.Value("cohort_raft_term")
	applied, _ := m.Value("cohort_raft_applied_index")
	if term < 1 || applied < 12 {
		t.Errorf("term %v applied index %v", term, applied)
	}
	c.WaitConverged(20 * time.Second) // followers learn the commit index a heartbeat later
	for _, n := range c.Running() {
		if n == leader {
			continue
		}
		fm, err := n.Scrape()
		if err != nil {
			t.Fatal(err)
		}
		wantValue(t, fm, 1, "cohort_raft_state", "state=Follower")
		wantValue(t, fm, 0, "cohort_groups", "state=Stable", "protocol_type=consumer")
		wantValue(t, fm, 12, "cohort_stored_offsets")
	}

	// Failover: the new leader loads both groups with their members and
	// offsets; nobody rejoins.
	killed := time.Now()
	c.Kill(leader.Index)
	next := c.WaitLeader(20 * time.Second)
	waitSuccess(t, w, OpHeartbeat, killed, leader.KafkaAddr, 30*time.Second)
	m, err = next.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	promtoolCheck(t, m.Text)
	wantValue(t, m, 2, "cohort_groups", "state=Stable", "protocol_type=consumer")
	wantValue(t, m, 6, "cohort_group_members")
	wantValue(t, m, 12, "cohort_stored_offsets")
	wantValue(t, m, 1, "cohort_raft_state", "state=Leader")
	if v := m.Sum("cohort_group_rebalances_total"); v != 0 {
		t.Errorf("%v rebalances after the failover, want 0", v)
	}
	if t2, _ := m.Value("cohort_raft_term"); t2 <= term {
		t.Errorf("term %v after the failover, was %v", t2, term)
	}
	for _, n := range c.Running() {
		waitReadyz(t, n, http.StatusOK, 20*time.Second)
	}

	// Alone, the last node knows no leader: not ready, and cluster status
	// says why.
	var last *Node
	for _, n := range c.Running() {
		if n != next {
			last = n
		}
	}
	c.Kill(next.Index)
	body := waitReadyz(t, last, http.StatusServiceUnavailable, 20*time.Second)
	if !strings.Contains(body, "fail raft-leader-known") {
		t.Errorf("%s /readyz: %q", last.ID, body)
	}
	sts, errs := c.StatusOf([]*Node{last}, 5*time.Second)
	if errs[0] != nil || sts[0].Ready || len(sts[0].NotReady) == 0 || !strings.HasPrefix(sts[0].NotReady[0], "raft-leader-known") {
		t.Errorf("%s status: %v %v", last.ID, sts[0], errs[0])
	}
	rows := cohortctlStatus(t, last)
	if i := slices.IndexFunc(rows, func(r map[string]any) bool { return r["node_id"] == last.ID }); i < 0 ||
		rows[i]["ready"] != false || !strings.Contains(fmt.Sprint(rows[i]["not_ready"]), "raft-leader-known") {
		t.Errorf("cohortctl cluster status of %s: %v", last.ID, rows)
	}
}

// A single node is ready once it leads; a node that never found a leader
// (its --join address answers nothing) is not.
func TestReadinessSingleNodeAndLeaderless(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 1, withHTTP)
	n := c.Node(0)
	waitReadyz(t, n, http.StatusOK, 20*time.Second)
	sts, errs := c.StatusOf([]*Node{n}, 5*time.Second)
	if errs[0] != nil || !sts[0].Ready || len(sts[0].NotReady) != 0 {
		t.Fatalf("status: %v %v", sts[0], errs[0])
	}
	lone := c.newNode()
	c.startNode(lone, []string{"--join", "127.0.0.1:1"})
	body := waitReadyz(t, lone, http.StatusServiceUnavailable, 10*time.Second)
	if !strings.Contains(body, "fail raft-leader-known: no Raft leader known") || !strings.Contains(body, "ok groups-loaded") {
		t.Fatalf("%s /readyz: %q", lone.ID, body)
	}
	m, err := lone.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, m, 0, "cohort_raft_leader_known")
}
