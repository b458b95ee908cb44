package clustertest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
	"github.com/cohort-coord/cohort/shard"
)

const testShards = 16

// shardedCluster starts n nodes of a 16-shard cluster whose leader
// placement may move a shard again one second after it last moved.
func shardedCluster(t *testing.T, n int, opts ...func(*Options)) *Cluster {
	return StartCluster(t, n, append([]func(*Options){func(o *Options) {
		o.Args = append(o.Args, "--shards", fmt.Sprint(testShards), "--shard-move-interval", "1s")
	}}, opts...)...)
}

// patientRaft doubles the Raft timeouts, for the tests of planned moves: on
// a loaded two-core machine a 500 ms heartbeat timeout now and then lets an
// election happen by itself, and an election is a failover, which clients
// may see, not a planned move.
func patientRaft(o *Options) {
	o.HeartbeatTimeout, o.ElectionTimeout, o.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
}

// ShardLeaders returns how many shards each running node leads, as the
// shards' leaders report themselves; ok is false while a shard has no
// leader that says so.
func (c *Cluster) ShardLeaders() (map[string]int, bool) {
	nodes := c.Running()
	sts, _ := c.StatusOf(nodes, 2*time.Second)
	counts := map[string]int{}
	for _, n := range nodes {
		counts[n.ID] = 0
	}
	led := map[uint32]bool{}
	for i, st := range sts {
		if st == nil {
			continue
		}
		for _, sh := range st.GetShards() {
			if sh.GetState() == "Leader" && sh.GetActive() && !led[sh.GetId()] {
				led[sh.GetId()] = true
				counts[nodes[i].ID]++
			}
		}
	}
	return counts, len(led) == testShards
}

// waitBalanced waits until every shard has an active leader and every
// running node leads ⌊S/N⌋ or ⌈S/N⌉ of them, and returns the counts.
func waitBalanced(t *testing.T, c *Cluster, timeout time.Duration) map[string]int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		counts, ok := c.ShardLeaders()
		lo := testShards / len(counts)
		hi := (testShards + len(counts) - 1) / len(counts)
		even := ok
		for _, k := range counts {
			even = even && k >= lo && k <= hi
		}
		if even {
			return counts
		}
		if time.Now().After(deadline) {
			t.Fatalf("shard leaders not spread evenly within %v: %v (all led: %v)", timeout, counts, ok)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A 3-node cluster of 16 shards: every node leads 5 or 6 shards and
// coordinates their groups. SIGKILL of one node stops only the groups of
// the shards it led: the other groups' requests all succeed meanwhile, and
// the stopped ones continue in the same generation once their shards'
// new leaders serve. When the node comes back, placement gives it its share
// of leaders again, moving shards under live groups, and no group changes
// generation through all of it; no acknowledged commit is lost.
func TestShardedClusterSpreadsAndSurvivesANodeLoss(t *testing.T) {
	skipShort(t)
	c := shardedCluster(t, 3)
	t.Logf("leaders after bootstrap: %v", waitBalanced(t, c, 90*time.Second))
	cfg := DefaultWorkload()
	cfg.Groups, cfg.Members, cfg.Partitions = 12, 2, 4
	ctx, w, before := stableWorkload(t, c, cfg)
	w.SetCommits(true)

	coordinatorOf := map[string]string{} // group -> Kafka address
	for _, g := range w.Groups {
		coordinatorOf[g.ID] = g.Members[0].State().Node
	}
	used := map[string]bool{}
	for _, a := range coordinatorOf {
		used[a] = true
	}
	if len(used) < 2 {
		t.Fatalf("12 groups over 16 shards on 3 nodes, all coordinated by %v", slices.Collect(maps.Keys(used)))
	}
	counts, _ := c.ShardLeaders()
	victim := c.Running()[0]
	for _, n := range c.Running() {
		if counts[n.ID] > counts[victim.ID] {
			victim = n
		}
	}
	time.Sleep(2 * time.Second) // commits and heartbeats before the kill
	killed := time.Now()
	c.Kill(victim.Index)
	t.Logf("killed %s, leader of %d shards", victim.ID, counts[victim.ID])
	waitSuccess(t, w, OpHeartbeat, killed, victim.KafkaAddr, 30*time.Second)
	waitSuccess(t, w, OpCommit, killed, victim.KafkaAddr, 30*time.Second)
	recovered := time.Now()

	// Groups whose shard the victim did not lead saw no error at all.
	untouched := 0
	for _, o := range w.History.Ops() {
		if o.Start.Before(killed) || coordinatorOf[o.Group] == victim.KafkaAddr {
			continue
		}
		untouched++
		if !o.OK() {
			t.Errorf("group %s, not coordinated by the killed node: %s", o.Group, o)
		}
	}
	if untouched == 0 {
		t.Error("no request of a group the killed node did not coordinate")
	}

	c.Restart(victim.Index)
	t.Logf("leaders after %s came back: %v", victim.ID, waitBalanced(t, c, 90*time.Second))
	moved := time.Now()
	waitSuccess(t, w, OpHeartbeat, moved, "", 30*time.Second)
	waitSuccess(t, w, OpCommit, moved, "", 30*time.Second)
	after, err := w.WaitStable(30*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for id, v := range before {
		if a := after[id]; a.Gen != v.Gen || !slices.Equal(a.Members, v.Members) {
			t.Errorf("%s: generation %d %v before, %d %v after the node loss and the moves back", id, v.Gen, v.Members, a.Gen, a.Members)
		}
	}
	if err := w.StopCommits(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	checkHistory(t, c, w, fetchWorkload(t, ctx, w))
	ops := w.History.Ops()
	joins := 0
	for _, o := range ops {
		if o.Kind == OpJoin && o.Start.After(killed) {
			joins++
		}
		if o.Start.After(killed) && o.Code != errNone && o.Code != kerr.NotCoordinator.Code && o.Code != kerr.CoordinatorNotAvailable.Code && o.Code != kerr.CoordinatorLoadInProgress.Code {
			t.Errorf("after the kill: %s", o)
		}
	}
	if joins > 0 {
		t.Errorf("%d JoinGroup requests after the kill: a member lost its generation", joins)
	}
	t.Logf("recovered %v after the kill; %s", recovered.Sub(killed).Round(time.Millisecond), Summary(ops))
}

// Planned moves are invisible to clients: shard leaders handed from node
// to node under live groups (as placement and `cohortctl cluster
// transfer-leadership --shard` do) answer every request of the workload
// without an error, NOT_COORDINATOR included: the old leader forwards what
// reaches it to the new one. No group changes generation.
func TestShardMovesAreInvisibleToClients(t *testing.T) {
	skipShort(t)
	c := shardedCluster(t, 3, patientRaft)
	waitBalanced(t, c, 90*time.Second)
	cfg := DefaultWorkload()
	cfg.Groups, cfg.Members, cfg.Partitions = 6, 2, 4
	_, w, before := stableWorkload(t, c, cfg)
	w.SetCommits(true)
	time.Sleep(time.Second)
	start := time.Now()
	const moves = 12
	for i := range moves {
		g := w.Groups[i%len(w.Groups)]
		k := shardOfGroup(g.ID)
		sts, _ := c.StatusOf(c.Running(), 2*time.Second)
		from, to := "", ""
		for j, st := range sts {
			if st == nil {
				continue
			}
			if st.GetShards()[k].GetState() == "Leader" {
				from = c.Running()[j].RemoteAddr
			} else if to == "" {
				to = c.Running()[j].ID
			}
		}
		if from == "" || to == "" {
			t.Fatalf("shard %d: leader %q, target %q", k, from, to)
		}
		shard := uint32(k)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := c.Admin.DoOnLeader(ctx, from, &clusterpb.TransferLeadershipRequest{NodeId: to, Shard: &shard})
		cancel()
		if err != nil {
			t.Fatalf("move %d: shard %d to %s: %v", i, k, to, err)
		}
		time.Sleep(700 * time.Millisecond)
	}
	waitSuccess(t, w, OpHeartbeat, time.Now(), "", 20*time.Second)
	after, err := w.WaitStable(20*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for id, v := range before {
		if a := after[id]; a.Gen != v.Gen {
			t.Errorf("%s: generation %d before the moves, %d after", id, v.Gen, a.Gen)
		}
	}
	n := 0
	for _, o := range w.History.Ops() {
		if o.Start.Before(start) {
			continue
		}
		n++
		if !o.OK() {
			t.Errorf("during the moves: %s", o)
		}
	}
	t.Logf("%d moves, %d requests; %s", moves, n, Summary(w.History.Ops()))
}

// fetchWorkload fetches the committed offsets of every group of w from its
// coordinator.
func fetchWorkload(t *testing.T, ctx context.Context, w *Workload) map[OffsetKey]int64 {
	t.Helper()
	fetched := map[OffsetKey]int64{}
	for _, g := range w.Groups {
		offs, _, err := FetchOffsets(ctx, g.Coord, g.Topic, g.Partitions)
		if err != nil {
			t.Fatal(err)
		}
		for p, o := range offs {
			fetched[OffsetKey{g.ID, g.Topic, p}] = o
		}
	}
	return fetched
}

// shardOfGroup is the shard of a group in the test cluster.
func shardOfGroup(id string) int { return shard.Of(id, testShards) }

// Leaders follow membership: a fourth node that joins gets its share of
// shard leaders (4 of 16), and when a node that leads shards is removed
// its shards go to the others, which again lead 5 or 6 each. Shard voters
// follow the meta group's: every replica of every shard ends on the same
// FSM hash.
func TestShardLeadersFollowMembership(t *testing.T) {
	skipShort(t)
	c := shardedCluster(t, 3)
	waitBalanced(t, c, 90*time.Second)
	joined := time.Now()
	fourth := c.AddNode()
	counts := waitBalanced(t, c, 90*time.Second)
	t.Logf("a fourth node joined: leaders %v after %v", counts, time.Since(joined).Round(time.Millisecond))
	if counts[fourth.ID] != testShards/4 {
		t.Fatalf("the new node leads %d shards, want %d: %v", counts[fourth.ID], testShards/4, counts)
	}

	victim := c.Node(1)
	removed := time.Now()
	if err := c.RemoveVoter(victim.Index); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for _, n := range c.Running() {
		if n.ID != victim.ID {
			rest = append(rest, n.ID)
		}
	}
	c.WaitVoters(rest, 30*time.Second)
	// The removed node hands over what it led before it goes.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := status(c.Admin, victim.RemoteAddr, 2*time.Second)
		leads := 0
		for _, sh := range st.GetShards() {
			if sh.GetState() == "Leader" {
				leads++
			}
		}
		if err == nil && leads == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the removed node still leads %d shards (%v)", leads, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.ExpectExit(victim.Index)
	c.Kill(victim.Index)
	counts = waitBalanced(t, c, 90*time.Second)
	t.Logf("%s removed: leaders %v after %v", victim.ID, counts, time.Since(removed).Round(time.Millisecond))
	c.WaitConverged(30 * time.Second)
	waitShardsConverged(t, c, 30*time.Second)
}

// waitShardsConverged waits until every running node's replica of each
// shard has the same FSM hash at the same applied index.
func waitShardsConverged(t *testing.T, c *Cluster, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		sts, errs := c.StatusOf(c.Running(), 2*time.Second)
		var differ []string
		for k := range testShards {
			var hashes []string
			for i, st := range sts {
				if st == nil || k >= len(st.GetShards()) {
					differ = append(differ, fmt.Sprintf("shard %d: no status (%v)", k, errs[i]))
					continue
				}
				sh := st.GetShards()[k]
				hashes = append(hashes, fmt.Sprintf("%d/%s", sh.GetAppliedIndex(), sh.GetFsmHash()))
			}
			if h := slices.Compact(slices.Clone(hashes)); len(h) != 1 {
				differ = append(differ, fmt.Sprintf("shard %d: %v", k, hashes))
			}
		}
		if len(differ) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("shard replicas differ after %v: %v", timeout, differ)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A shard's clients stay with the node that handed the shard over, which
// forwards their requests; when the node it was handed to crashes, those
// requests go to whichever node the election makes the shard's leader next.
// The clients, still connected to a live node, see no error and no
// NOT_COORDINATOR (some would rejoin on one), and keep their generation.
func TestForwardedShardFollowsItsNextLeader(t *testing.T) {
	skipShort(t)
	c := shardedCluster(t, 3, patientRaft)
	waitBalanced(t, c, 90*time.Second)
	cfg := DefaultWorkload()
	cfg.Groups, cfg.Members, cfg.Partitions = 2, 2, 4
	_, w, before := stableWorkload(t, c, cfg)
	w.SetCommits(true)
	g := w.Groups[0]
	k := shardOfGroup(g.ID)
	from, to, _, err := moveShard(c, k)
	if err != nil {
		t.Fatalf("move shard %d: %v", k, err)
	}
	// The group's members still talk to the node that handed the shard
	// over: it forwards. Kill the node it was handed to before placement
	// may move it again.
	time.Sleep(500 * time.Millisecond)
	killed := time.Now()
	c.Kill(to.Index)
	t.Logf("shard %d moved %s -> %s, then %s killed", k, from.ID, to.ID, to.ID)
	waitSuccess(t, w, OpHeartbeat, killed.Add(3*time.Second), to.KafkaAddr, 30*time.Second)
	waitSuccess(t, w, OpCommit, killed.Add(3*time.Second), to.KafkaAddr, 30*time.Second)
	after, err := w.WaitStable(30*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if a := after[g.ID]; a.Gen != before[g.ID].Gen {
		t.Errorf("%s: generation %d before, %d after", g.ID, before[g.ID].Gen, a.Gen)
	}
	n := 0
	for _, o := range w.History.Ops() {
		if o.Group != g.ID || o.Start.Before(killed) {
			continue
		}
		n++
		if o.Node != from.KafkaAddr {
			t.Errorf("%s left the node that forwards its shard: %s", g.ID, o)
		} else if !o.OK() {
			t.Errorf("after the kill: %s", o)
		}
	}
	if n == 0 {
		t.Fatal("no request of the group after the kill")
	}
	t.Logf("%d requests of %s after the kill; %s", n, g.ID, Summary(w.History.Ops()))
}
