package member_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/actors/member"
	clustertest "github.com/cohort-coord/cohort/cluster-test"
)

// TestLeaderFailover: a 3-node cohort cluster loses its leader (SIGKILL)
// while 20 members heartbeat and commit. No member reports lost, none
// rebalances (generation and partitions unchanged), and every acknowledged
// commit is there afterwards.
func TestLeaderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	for _, tr := range []string{"native", "kafka"} {
		t.Run(tr, func(t *testing.T) { leaderFailover(t, tr) })
	}
}

func leaderFailover(t *testing.T, transport string) {
	c := clustertest.StartCluster(t, 3)
	var remotes, kafkas []string
	for _, n := range c.Nodes {
		remotes = append(remotes, n.RemoteAddr)
		kafkas = append(kafkas, n.KafkaAddr)
	}
	tf := member.Native(remotes...)
	if transport == "kafka" {
		tf = member.Kafka(kafkas...)
	}
	createTopic(t, kafkas, "t", 40)
	const members, partitions = 20, 40
	want := allPartitions("t", partitions)
	leader := c.WaitLeader(20 * time.Second)
	system := c.Admin.System()
	base := []member.Opt{
		member.SessionTimeout(20 * time.Second),
		member.HeartbeatInterval(500 * time.Millisecond),
		member.RebalanceTimeout(20 * time.Second),
		member.RetryBackoff(100*time.Millisecond, time.Second),
		member.RequestTimeout(2 * time.Second),
		member.WithTransport(tf),
		member.Partitions("t", partitions),
		member.Topics("t"),
	}
	g := newGroupOn(t, system, nativeDescriber(system, leader.RemoteAddr, "failover"), "failover", base...)
	for range members {
		g.add()
	}
	g.settle(want)
	gens := map[string]int32{}
	owned := map[string]string{}
	for _, m := range g.members {
		gens[m.n] = m.m.Generation()
		owned[m.n] = fmt.Sprint(m.owned())
	}
	g.h.mu.Lock()
	changesBefore := g.h.changes
	g.h.mu.Unlock()

	// Every member commits a rising offset for each partition it owns.
	var mu sync.Mutex
	acked := map[tp]int64{}
	var failed, ok int
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, m := range g.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next := int64(1); ctx.Err() == nil; next++ {
				offsets := map[string]map[int32]int64{}
				for _, p := range m.owned() {
					if offsets[p.topic] == nil {
						offsets[p.topic] = map[int32]int64{}
					}
					offsets[p.topic][p.partition] = next
				}
				cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
				err := m.m.Commit(cctx, offsets)
				ccancel()
				mu.Lock()
				if err == nil {
					ok++
					for _, p := range m.owned() {
						acked[p] = next
					}
				} else if !errors.Is(err, context.Canceled) {
					if failed == 0 {
						t.Logf("first failed commit: %v", err)
					}
					failed++
				}
				mu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	time.Sleep(2 * time.Second)
	mu.Lock()
	if ok == 0 {
		t.Errorf("no commit acknowledged before the kill")
	}
	mu.Unlock()
	killed := time.Now()
	c.Kill(leader.Index)
	newLeader := c.WaitLeader(20 * time.Second)
	t.Logf("killed leader %s; new leader %s after %v", leader.ID, newLeader.ID, time.Since(killed).Round(time.Millisecond))
	// Wait until commits succeed again, then a little longer.
	deadline := time.Now().Add(30 * time.Second)
	mu.Lock()
	okAtKill := ok
	mu.Unlock()
	for time.Now().Before(deadline) {
		mu.Lock()
		resumed := ok > okAtKill+3*members
		mu.Unlock()
		if resumed {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	if ok <= okAtKill+3*members {
		t.Errorf("commits did not resume after the failover")
	}
	mu.Unlock()
	t.Logf("commits acknowledged again %v after the kill", time.Since(killed).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	cancel()
	wg.Wait()

	g.describe = nativeDescriber(system, newLeader.RemoteAddr, "failover")
	g.settle(want)
	for _, m := range g.members {
		if m.m.Generation() != gens[m.n] || fmt.Sprint(m.owned()) != owned[m.n] {
			t.Errorf("%s: generation %d owning %v after the failover, was %d owning %v", m.n, m.m.Generation(), m.owned(), gens[m.n], owned[m.n])
		}
	}
	g.h.mu.Lock()
	if g.h.changes != changesBefore {
		t.Errorf("%d partition changes during the failover (a rebalance)", g.h.changes-changesBefore)
	}
	g.h.mu.Unlock()
	got, err := nativeFetcher(system, newLeader.RemoteAddr, "failover")()
	if err != nil {
		t.Fatal(err)
	}
	missing := 0
	for p, o := range acked {
		if got[p] < o {
			missing++
			t.Errorf("%v: committed offset %d, but %d was acknowledged", p, got[p], o)
		}
	}
	t.Logf("%d commits acknowledged, %d failed during the failover, %d partitions checked, %d missing", ok, failed, len(acked), missing)
	g.h.check(t)
}

// createTopic creates a topic over the Kafka protocol (the Kafka listener
// refuses commits for topics it does not know).
func createTopic(t testing.TB, seeds []string, name string, partitions int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10000
	res, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := res.Topics[0].ErrorCode; code != 0 {
		t.Fatalf("create topic %s: %v", name, kerr.ErrorForCode(code))
	}
}

// TestCoordinatorGoneLosesAfterSession: when the only coordinator dies the
// members cannot know whether their partitions were handed out, so after a
// session timeout without an answer they report them lost (never revoked);
// once the coordinator is back they join again and the group settles.
func TestCoordinatorGoneLosesAfterSession(t *testing.T) {
	c := cohortd(t)
	node := c.Node(0)
	want := allPartitions("t", 12)
	g := newGroup(t, c, "gone", append(timing(), member.WithTransport(member.Native(node.RemoteAddr)), member.Partitions("t", 12), member.Topics("t"))...)
	g.add()
	g.add()
	g.settle(want)
	killed := time.Now()
	c.Kill(0)
	deadline := time.Now().Add(30 * time.Second)
	for {
		g.h.mu.Lock()
		n := len(g.h.lost)
		g.h.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d members reported lost 30s after the coordinator died", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	after := time.Since(killed)
	if after < 5*time.Second { // session timeout 6s from the last answer, heartbeats every 300ms
		t.Fatalf("lost %v after the kill, before the session timeout", after)
	}
	t.Logf("both members reported lost %v after the coordinator died", after.Round(time.Millisecond))
	for _, m := range g.members {
		if len(m.owned()) != 0 || m.m.Generation() != -1 {
			t.Fatalf("%s owns %v in generation %d after losing", m.n, m.owned(), m.m.Generation())
		}
	}
	c.Restart(0)
	g.describe = nativeDescriber(g.system, c.Node(0).RemoteAddr, "gone")
	g.settle(want)
	g.h.mu.Lock()
	g.h.lost = nil
	g.h.mu.Unlock()
	g.h.check(t)
}
