package clustertest

import (
	"fmt"
	"strings"
	"testing"

	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
)

// hashAt is the made-up FSM hash of a replica that applied up to index.
func hashAt(index uint64) string { return fmt.Sprintf("hash-%d", index) }

func st(id, state string, applied uint64) *clusterpb.StatusResponse {
	return &clusterpb.StatusResponse{NodeId: id, State: state, AppliedIndex: applied, CommitIndex: applied, FsmHash: hashAt(applied)}
}

var convergeIDs = []string{"node1", "node2", "node3"}

// Polls of a cluster whose clients keep committing: the leader applies a
// few entries between polls and both followers trail it by one entry in
// every poll, as they did when a failover test gave up (leader at 2020,
// followers at 2019, with different hashes).
func TestConvergenceWhileClientsWrite(t *testing.T) {
	v := newConvergence()
	leader := []uint64{2000, 2005, 2011, 2016, 2017, 2022}
	for k, l := range leader {
		v.add(st("node1", "Follower", l-1))
		v.add(st("node2", "Leader", l))
		v.add(st("node3", "Follower", l-1))
		got, ok := v.agreed(convergeIDs)
		// No poll has all three at one index; the leader was seen at
		// 2016 in one poll and the followers at 2016 in the next.
		if want := k >= 4; ok != want {
			t.Fatalf("after poll %d (leader at %d): agreed=%v, want %v", k, l, ok, want)
		}
		if ok && got != 2016 {
			t.Fatalf("agreed at %d, want 2016", got)
		}
	}
}

// A node that never gets as far as the cluster was when the wait began, or
// whose state differs, does not converge; neither does a node that
// reported no hash.
func TestConvergenceRefuses(t *testing.T) {
	t.Run("restarted node stuck behind", func(t *testing.T) {
		v := newConvergence()
		// node3 came back with its log up to 1990 and moves no further
		// while the leader goes on from 2000.
		for k := range uint64(5) {
			v.add(st("node1", "Follower", 1999+k))
			v.add(st("node2", "Leader", 2000+k))
			v.add(st("node3", "Follower", 1990))
		}
		if i, ok := v.agreed(convergeIDs); ok {
			t.Fatalf("agreed at %d with node3 stuck at 1990", i)
		}
		if r := strings.Join(v.report(convergeIDs), "\n"); !strings.Contains(r, "node3: state=Follower term=0 applied=1990 commit=1990 last-log=0 leader-contact=0ms ago ") {
			t.Fatalf("report does not show node3 at 1990:\n%s", r)
		}
	})
	t.Run("diverged", func(t *testing.T) {
		v := newConvergence()
		for range 3 {
			v.add(st("node1", "Follower", 2000))
			v.add(st("node2", "Leader", 2000))
			bad := st("node3", "Follower", 2000)
			bad.FsmHash = "other"
			v.add(bad)
		}
		if i, ok := v.agreed(convergeIDs); ok {
			t.Fatalf("agreed at %d with node3's hash different", i)
		}
		if m := v.mismatches(convergeIDs); m != "node1 and node3 differ at applied index 2000; node2 and node3 differ at applied index 2000" {
			t.Fatalf("mismatches = %q", m)
		}
	})
	t.Run("no hash", func(t *testing.T) {
		v := newConvergence()
		for _, id := range convergeIDs {
			v.add(&clusterpb.StatusResponse{NodeId: id, AppliedIndex: 5})
		}
		if i, ok := v.agreed(convergeIDs); ok {
			t.Fatalf("agreed at %d without hashes", i)
		}
	})
	t.Run("a node not polled yet", func(t *testing.T) {
		v := newConvergence()
		v.add(st("node1", "Follower", 10))
		v.add(st("node2", "Leader", 10))
		if i, ok := v.agreed(convergeIDs); ok {
			t.Fatalf("agreed at %d without node3", i)
		}
	})
}

// The rule WaitConverged used before: all nodes at one index with one
// hash in a single poll still converges.
func TestConvergenceInOnePoll(t *testing.T) {
	v := newConvergence()
	for _, id := range convergeIDs {
		v.add(st(id, "Follower", 42))
	}
	if i, ok := v.agreed(convergeIDs); !ok || i != 42 {
		t.Fatalf("agreed = %d, %v; want 42, true", i, ok)
	}
}
