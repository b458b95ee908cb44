package clustertest

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestBenchShardKill measures the blast radius of a node crash in a 3-node
// cluster of 16 shards under a group workload:
//
//	COHORT_CLUSTER_BENCH=1 go -C cluster-test test . -run TestBenchShardKill -v -timeout 30m
//
// COHORT_BENCH_GROUPS groups (default 48) of 3 members heartbeat every
// 200 ms and commit every 100 ms. COHORT_BENCH_KILLS times (default 6) a
// node, in turn, is killed with SIGKILL after a quiet window of 10 s with
// every node leading its share of shards. A group is hit when the killed
// node led its shard, or when its members talk to that node, which handed
// their shard over and forwards their requests. For the groups not hit it
// compares the latency of their requests in the 10 s before the kill with
// the 10 s after, and counts their errors; for the others it takes the time
// from the kill to each group's first successful request at another node. The killed node
// then restarts and gets its shards back before the next kill. At the end
// no group has changed generation or joined again, and the history passes
// the checkers (generations, fencing, acknowledged offsets).
func TestBenchShardKill(t *testing.T) {
	benchEnabled(t)
	kills := envInt(t, "COHORT_BENCH_KILLS", 6)
	const window = 10 * time.Second
	c := shardedCluster(t, 3, benchOptions(t))
	waitBalanced(t, c, 90*time.Second)
	cfg := DefaultWorkload()
	cfg.Groups, cfg.Members, cfg.Partitions = envInt(t, "COHORT_BENCH_GROUPS", 48), 3, 6
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	w, err := StartWorkload(ctx, c.KafkaAddrs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	before, err := w.WaitStable(90*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	w.SetCommits(true)
	joins := w.Joins()

	var baseP50, baseP99, crashP50, crashP99, recovery []time.Duration
	untouchedErrors, untouchedOps := 0, 0
	for i := range kills {
		t.Logf("kill %d: leaders %v", i+1, waitBalanced(t, c, 90*time.Second))
		time.Sleep(window)
		victim := c.Node(i % len(c.Nodes))
		led := ledShards(c, victim)
		coordinator := map[string]string{}
		for _, g := range w.Groups {
			coordinator[g.ID] = g.Members[0].State().Node
		}
		// A group is hit when the victim led its shard, or when its members
		// talk to the victim, which forwards to the shard's leader: they
		// lose their connection though their coordinator lives.
		hit := func(group string) bool { return led[shardOfGroup(group)] || coordinator[group] == victim.KafkaAddr }
		forwarded := 0
		for _, g := range w.Groups {
			if !led[shardOfGroup(g.ID)] && coordinator[g.ID] == victim.KafkaAddr {
				forwarded++
			}
		}
		killed := time.Now()
		c.Kill(victim.Index)
		waitSuccess(t, w, OpHeartbeat, killed, victim.KafkaAddr, 30*time.Second)
		waitSuccess(t, w, OpCommit, killed, victim.KafkaAddr, 30*time.Second)
		if d := time.Until(killed.Add(window)); d > 0 {
			time.Sleep(d)
		}

		var base, crash []time.Duration
		first := map[string]time.Time{} // group -> first success at another node
		affected, errs := 0, 0
		for _, o := range w.History.Ops() {
			if o.Start.Before(killed.Add(-window)) || !o.Start.Before(killed.Add(window)) {
				continue
			}
			if hit(o.Group) {
				if o.Start.After(killed) && o.OK() && o.Node != victim.KafkaAddr {
					if f, ok := first[o.Group]; !ok || o.End.Before(f) {
						first[o.Group] = o.End
					}
				}
				continue
			}
			if o.Start.Before(killed) {
				if o.OK() {
					base = append(base, o.End.Sub(o.Start))
				}
				continue
			}
			untouchedOps++
			if !o.OK() {
				errs++
				t.Errorf("kill %d: group %s, not coordinated by the killed node: %s", i+1, o.Group, o)
				continue
			}
			crash = append(crash, o.End.Sub(o.Start))
		}
		untouchedErrors += errs
		var rec []time.Duration
		for _, g := range w.Groups {
			if !hit(g.ID) {
				continue
			}
			affected++
			if f, ok := first[g.ID]; ok {
				rec = append(rec, f.Sub(killed))
			} else {
				t.Errorf("kill %d: group %s had no success at a new coordinator within %v", i+1, g.ID, window)
			}
		}
		slices.Sort(base)
		slices.Sort(crash)
		slices.Sort(rec)
		baseP50, baseP99 = append(baseP50, percentile(base, 0.5)), append(baseP99, percentile(base, 0.99))
		crashP50, crashP99 = append(crashP50, percentile(crash, 0.5)), append(crashP99, percentile(crash, 0.99))
		recovery = append(recovery, rec...)
		t.Logf("kill %d (%s, leader of %d shards): untouched groups %d: before p50 %v p99 %v, after p50 %v p99 %v, %d errors in %d requests; %d groups hit (%d of them only connected to it): recovered after p50 %v max %v",
			i+1, victim.ID, len(led), len(w.Groups)-affected, ms(percentile(base, 0.5)), ms(percentile(base, 0.99)),
			ms(percentile(crash, 0.5)), ms(percentile(crash, 0.99)), errs, len(crash)+errs,
			affected, forwarded, ms(percentile(rec, 0.5)), ms(percentile(rec, 1)))
		c.Restart(victim.Index)
	}
	waitBalanced(t, c, 90*time.Second)
	after, err := w.WaitStable(60*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for id, v := range before {
		if a := after[id]; a.Gen != v.Gen || !slices.Equal(a.Members, v.Members) {
			changed++
			t.Errorf("%s: generation %d %v before, %d %v after", id, v.Gen, v.Members, a.Gen, a.Members)
		}
	}
	rejoins := w.Joins() - joins
	if rejoins != 0 {
		t.Errorf("%d JoinGroup requests after the groups settled", rejoins)
	}
	if err := w.StopCommits(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	checkHistory(t, c, w, fetchWorkload(t, ctx, w))

	med := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return percentile(s, 0.5)
	}
	slices.Sort(recovery)
	t.Logf("%d kills, medians over kills: untouched groups' request latency p50 %v -> %v, p99 %v -> %v (10 s before the kill -> 10 s after); %d errors in %d requests",
		kills, ms(med(baseP50)), ms(med(crashP50)), ms(med(baseP99)), ms(med(crashP99)), untouchedErrors, untouchedOps)
	t.Logf("groups of the killed node, kill -> first successful request at the new coordinator: %d samples, p50 %v p99 %v max %v; %d generation changes, %d rejoins",
		len(recovery), ms(percentile(recovery, 0.5)), ms(percentile(recovery, 0.99)), ms(percentile(recovery, 1)), changed, rejoins)
}

// ledShards is the set of shards node n leads.
func ledShards(c *Cluster, n *Node) map[int]bool {
	led := map[int]bool{}
	if st, err := status(c.Admin, n.RemoteAddr, 2*time.Second); err == nil {
		for k, sh := range st.GetShards() {
			if sh.GetState() == "Leader" {
				led[k] = true
			}
		}
	}
	return led
}

func ms(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
