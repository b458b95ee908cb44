package clustertest

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
)

// TestChaos runs a random sequence of faults against 3 nodes while groups
// heartbeat, commit and change members, then heals and checks the history.
// It runs only when COHORT_CLUSTER_CHAOS is a duration:
//
//	COHORT_CLUSTER_CHAOS=3m go -C cluster-test test . -run TestChaos -v -timeout 30m
//
// COHORT_CLUSTER_CHAOS_SEED replays a run (the seed is logged).
func TestChaos(t *testing.T) {
	v := os.Getenv("COHORT_CLUSTER_CHAOS")
	if v == "" {
		t.Skip("set COHORT_CLUSTER_CHAOS to a duration to run the chaos test")
	}
	dur, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("COHORT_CLUSTER_CHAOS=%q: %v", v, err)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("COHORT_CLUSTER_CHAOS_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	c := StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), dur+5*time.Minute)
	defer cancel()
	cfg := DefaultWorkload()
	cfg.Groups, cfg.Members, cfg.StaticGroups = 3, 4, 1
	w, err := StartWorkload(ctx, c.KafkaAddrs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := w.WaitStable(60*time.Second, time.Second); err != nil {
		t.Fatal(err)
	}
	w.SetCommits(true)

	down := -1
	counts := map[string]int{}
	pick := func(nodes []*Node) *Node { return nodes[rng.IntN(len(nodes))] }
	for end := time.Now().Add(dur); time.Now().Before(end); {
		time.Sleep(time.Second + time.Duration(rng.Int64N(int64(3*time.Second))))
		if down >= 0 {
			c.Restart(down)
			down = -1
			counts["restart"]++
			continue
		}
		leader := c.Leader()
		switch rng.IntN(6) {
		case 0:
			if leader != nil {
				c.Kill(leader.Index)
				down = leader.Index
				counts["kill leader"]++
			}
		case 1:
			n := pick(c.Running())
			c.Kill(n.Index)
			down = n.Index
			counts["kill any"]++
		case 2:
			if leader != nil {
				c.Stop(leader.Index)
				down = leader.Index
				counts["stop leader"]++
			}
		case 3:
			if leader != nil {
				target := pick(c.Running())
				tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := c.Admin.DoOnLeader(tctx, leader.RemoteAddr, &clusterpb.TransferLeadershipRequest{NodeId: target.ID})
				tcancel()
				if err != nil {
					t.Logf("transfer to %s: %v", target.ID, err)
				}
				counts["transfer"]++
			}
		case 4:
			g := w.Groups[rng.IntN(len(w.Groups))]
			if len(g.Members) > 2 {
				w.RemoveMember(g, g.Members[rng.IntN(len(g.Members))])
				counts["member crash"]++
			}
		case 5:
			g := w.Groups[rng.IntN(len(w.Groups))]
			if len(g.Members) < 6 {
				w.AddMember(g)
				counts["member join"]++
			}
		}
	}
	if down >= 0 {
		c.Restart(down)
	}
	c.WaitVoters(c.ids(), 60*time.Second)
	views, err := w.WaitStable(90*time.Second, 2*time.Second)
	if err != nil {
		t.Fatalf("after healing: %v; members: %v", err, memberStates(w))
	}
	if got, want := describeGroups(t, ctx, w), viewsAsDescribed(views); !mapsEqual(got, want) {
		t.Errorf("after healing: described %v, members see %v", got, want)
	}
	settled := time.Now()
	waitSuccess(t, w, OpCommit, settled, "", 30*time.Second)
	if err := w.StopCommits(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	checkHistory(t, c, w, fetchAll(t, ctx, c, w, c.WaitLeader(10*time.Second).KafkaAddr))
	if sts := c.WaitConverged(60 * time.Second); len(sts) != 3 {
		t.Errorf("%d nodes converged, want 3", len(sts))
	}
	t.Logf("faults: %v; JoinGroup requests: %d", counts, w.Joins())
}
