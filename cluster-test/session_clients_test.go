package clustertest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/kafka/interop/clients"
)

// TestSessionClientsKeepMembersThroughKills: sarama with its own
// consumer-group settings and kafkajs with a 10 s session, six consumers
// each, through four SIGKILLs of their coordinator, on one shard and on 16.
// Both families cache their coordinator and look for it again only once
// its broker is gone from Metadata (or answers NOT_COORDINATOR), so unless
// the cluster leaves a dead node out of Metadata soon enough, their
// members expire before they reach the new coordinator. No member may
// expire: the group keeps its generation and its member ids, and every
// acknowledged commit is there at the end.
func TestSessionClientsKeepMembersThroughKills(t *testing.T) {
	skipShort(t)
	for _, shards := range []int{1, 16} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) { sessionClientKills(t, shards) })
	}
}

func sessionClientKills(t *testing.T, shards int) {
	all := clientFamilies(t)
	var fams []clients.Family
	for _, f := range all {
		if f.Name == "sarama" || f.Name == "kafkajs" {
			fams = append(fams, f)
		}
	}
	kills := envInt(t, "COHORT_SESSION_KILLS", 4)
	shape := groupShape{members: 6, session: 10 * time.Second, env: []string{"CLIENT_DEFAULTS=1"}}
	var c *Cluster
	if shards > 1 {
		// Both groups on one shard, so that each kill hits both.
		for i := 0; ; i++ {
			shape.prefix = fmt.Sprintf("k%d-", i)
			if shardOfGroup("group-"+shape.prefix+"sarama") == shardOfGroup("group-"+shape.prefix+"kafkajs") {
				break
			}
		}
		c = shardedCluster(t, 3, patientRaft)
		waitBalanced(t, c, 90*time.Second)
	} else {
		c = StartCluster(t, 3)
	}
	groups := startSettledGroups(t, c, fams, fmt.Sprintf("session-clients-%d", shards), shape)
	members := map[string][]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, g := range groups {
		d, err := g.describe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for id := range d.members {
			members[g.name] = append(members[g.name], id)
		}
		slices.Sort(members[g.name])
	}
	stopCommits := commitLoops(groups)
	back := map[string][]time.Duration{} // per group, how long after each kill it was back
	for i := range kills {
		victim := c.WaitLeader(30 * time.Second)
		if shards > 1 {
			victim = busiestShardLeader(t, c, groups)
		}
		killed := time.Now()
		c.Kill(victim.Index)
		// The node comes back a few seconds later, as a supervisor restarts
		// it: kafkajs keeps dialing its dead coordinator until then.
		time.Sleep(3 * time.Second)
		c.Restart(victim.Index)
		for _, g := range groups {
			deadline := time.Now().Add(30 * time.Second)
			for {
				if d, ok := g.recoveredAfter(ctx, killed); ok {
					back[g.name] = append(back[g.name], d.Round(time.Millisecond))
					t.Logf("kill %d of %s: %s back at its coordinator after %v", i+1, victim.ID, g.fam.Name, d.Round(time.Millisecond))
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("kill %d of %s: %s not back at its coordinator within 30s", i+1, victim.ID, g.fam.Name)
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		c.WaitConverged(30 * time.Second)
		if shards > 1 {
			waitBalanced(t, c, 90*time.Second)
		}
		time.Sleep(2 * time.Second)
	}
	stopCommits()
	for _, g := range groups {
		d := g.waitSettled(t, 60*time.Second)
		var ids []string
		for id := range d.members {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		if d.gen != g.gen {
			t.Errorf("%s: generation %d after %d kills, was %d", g.name, d.gen, kills, g.gen)
		}
		if !slices.Equal(ids, members[g.name]) {
			t.Errorf("%s: members %v after the kills, were %v (a member expired and joined again)", g.name, ids, members[g.name])
		}
		g.checkCommits(ctx, t)
		times := back[g.name]
		slices.Sort(times)
		t.Logf("%s: generation %d (was %d), %d members; back at the coordinator after each kill: %v", g.fam.Name, d.gen, g.gen, len(ids), times)
	}
}

// recoveredAfter is how long after t the group's consumers were back at
// their coordinator: for a family that acknowledges commits, its first
// acknowledged commit; for sarama, which commits without telling its
// caller the outcome, when every partition's committed offset is from a
// round sent after t (the coordinator takes a commit only from a member of
// the group's generation, and each consumer owns one partition).
func (g *clientGroup) recoveredAfter(ctx context.Context, t time.Time) (time.Duration, bool) {
	if g.fam.SyncCommits {
		return g.firstAckAfter(t)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	got, _, err := FetchOffsets(ctx, g.coord, g.topic, rcPartitions)
	if err != nil {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(got) < rcPartitions {
		return 0, false
	}
	for _, off := range got {
		if at, ok := g.sentAt[off-off%1000]; !ok || !at.After(t) {
			return 0, false
		}
	}
	return time.Since(t), true
}
