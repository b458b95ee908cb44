package clustertest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
)

// TestShardMovesRealClients: unmodified clients of every family, three
// consumers each, on a 3-node cluster of 16 shards whose groups' shard
// leaders are moved again and again (COHORT_MOVES moves, default 10, one
// every COHORT_MOVE_EVERY seconds, default 3). A planned move must be
// invisible: no rebalance, no callback of any kind (a client that restarts
// its session reports one), the same partitions owned, and no
// acknowledged commit lost. It logs each move's time from the start of the
// transfer until the new leader serves the shard.
func TestShardMovesRealClients(t *testing.T) {
	skipShort(t)
	fams := clientFamilies(t)
	c := shardedCluster(t, 3, patientRaft)
	waitBalanced(t, c, 90*time.Second)
	groups := startSettledGroups(t, c, fams, "moves-test", rcShape)
	for _, g := range groups {
		t.Logf("%s is in shard %d", g.name, shardOfGroup(g.name))
	}
	stopCommits := commitLoops(groups)

	moves := envInt(t, "COHORT_MOVES", 10)
	every := time.Duration(envInt(t, "COHORT_MOVE_EVERY", 3)) * time.Second
	var took []time.Duration
	for i := range moves {
		g := groups[i%len(groups)]
		k := shardOfGroup(g.name)
		_, _, d, err := moveShard(c, k)
		if err != nil {
			t.Fatalf("move %d (shard %d of %s): %v", i+1, k, g.name, err)
		}
		took = append(took, d)
		time.Sleep(every)
	}
	time.Sleep(2 * time.Second)
	stopCommits()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, g := range groups {
		d := g.waitSettled(t, 60*time.Second)
		if d.gen != g.gen {
			t.Errorf("%s: generation %d before the moves, %d after", g.name, g.gen, d.gen)
		}
		for i, p := range g.procs {
			reps := p.Reports()
			for _, r := range reps[g.baseline[i]:] {
				t.Errorf("%s: %s callback at %s during the moves: owns %v, generation %d", p.Name, r.Event, r.At.Format("15:04:05.000"), r.Owned, r.Gen)
			}
			if last := reps[len(reps)-1]; !slices.Equal(last.Owned, g.owned[i]) {
				t.Errorf("%s owned %v before the moves and %v after", p.Name, g.owned[i], last.Owned)
			}
		}
		g.checkCommits(ctx, t)
		g.mu.Lock()
		t.Logf("%s: %d commit rounds, %d failed", g.name, g.sent, g.failed)
		g.mu.Unlock()
	}
	slices.Sort(took)
	t.Logf("%d moves: transfer start to the new leader serving, p50 %v, p99 %v, max %v", len(took),
		percentile(took, 0.5).Round(time.Millisecond), percentile(took, 0.99).Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
}

// moveShard moves shard k's leadership from its leader to another running
// node and returns both, and the time from the request until the new
// leader reports the shard active.
func moveShard(c *Cluster, k int) (from, to *Node, took time.Duration, err error) {
	nodes := c.Running()
	sts, _ := c.StatusOf(nodes, 2*time.Second)
	for i, st := range sts {
		if st == nil || k >= len(st.GetShards()) {
			continue
		}
		if st.GetShards()[k].GetState() == "Leader" {
			from = nodes[i]
		} else if to == nil {
			to = nodes[i]
		}
	}
	if from == nil || to == nil {
		return nil, nil, 0, errNoLeader
	}
	sh := uint32(k)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Admin.DoOnLeader(ctx, from.RemoteAddr, &clusterpb.TransferLeadershipRequest{NodeId: to.ID, Shard: &sh}); err != nil {
		return nil, nil, 0, err
	}
	for ctx.Err() == nil {
		if st, err := status(c.Admin, to.RemoteAddr, 2*time.Second); err == nil && st.GetShards()[k].GetActive() {
			return from, to, time.Since(start), nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil, nil, 0, ctx.Err()
}

var errNoLeader = errorString("shard has no leader, or no other node to move it to")

type errorString string

func (e errorString) Error() string { return strings.TrimSpace(string(e)) }
