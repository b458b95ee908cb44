package clustertest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Unmodified franz-go consumers on the consumer group protocol (KIP-848,
// kgo.ServerSideBalancer) through leader failovers (SIGKILL) of a 3-node
// cluster: no partition is ever owned by two consumers at once (from their
// callbacks), no acknowledged commit is lost, and the group epoch never goes
// back; as the consumers keep heartbeating, they see nothing of the
// failovers: no callback, the same group epoch.

const (
	cfMembers    = 6
	cfPartitions = 12
	cfKills      = 3
)

// cfInterval is a partition owned by a consumer from one callback to
// another.
type cfInterval struct {
	client   string
	from, to time.Time
}

// cfGroup is the consumers and what they reported.
type cfGroup struct {
	group, topic string
	mu           sync.Mutex
	owned        map[string]map[int32]time.Time // open intervals per client
	closed       map[int32][]cfInterval
	epochs       map[string]int32 // highest member epoch seen per client
	calls        []string         // callbacks that revoked or lost partitions, after since
	since        time.Time
	epochBack    []string
	acked        map[int32]int64
	clients      []*kgo.Client
}

func (g *cfGroup) callback(name, kind string) func(context.Context, *kgo.Client, map[string][]int32) {
	return func(_ context.Context, cl *kgo.Client, a map[string][]int32) {
		_, epoch := cl.GroupMetadata()
		now := time.Now()
		g.mu.Lock()
		defer g.mu.Unlock()
		if prev, ok := g.epochs[name]; ok && epoch < prev && kind != "lost" {
			g.epochBack = append(g.epochBack, fmt.Sprintf("%s: member epoch %d after %d", name, epoch, prev))
		}
		g.epochs[name] = max(g.epochs[name], epoch)
		if kind != "assigned" && len(a[g.topic]) > 0 && !g.since.IsZero() {
			g.calls = append(g.calls, fmt.Sprintf("%s %s %v at member epoch %d", name, kind, a[g.topic], epoch))
		}
		if g.owned[name] == nil {
			g.owned[name] = map[int32]time.Time{}
		}
		for _, p := range a[g.topic] {
			if kind == "assigned" {
				g.owned[name][p] = now
				continue
			}
			if from, ok := g.owned[name][p]; ok {
				g.closed[p] = append(g.closed[p], cfInterval{name, from, now})
				delete(g.owned[name], p)
			}
		}
	}
}

// overlaps lists every moment two consumers owned one partition.
func (g *cfGroup) overlaps(end time.Time) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	all := map[int32][]cfInterval{}
	for p, l := range g.closed {
		all[p] = slices.Clone(l)
	}
	for c, ps := range g.owned {
		for p, from := range ps {
			all[p] = append(all[p], cfInterval{c, from, end})
		}
	}
	var out []string
	for p, l := range all {
		sort.Slice(l, func(i, j int) bool { return l[i].from.Before(l[j].from) })
		for i := range l {
			for j := i + 1; j < len(l); j++ {
				if l[i].client != l[j].client && l[j].from.Before(l[i].to) {
					out = append(out, fmt.Sprintf("partition %d: %s and %s at once for %v", p, l[i].client, l[j].client, l[i].to.Sub(l[j].from)))
				}
			}
		}
	}
	return out
}

// stable reports whether every consumer owns its even share and every
// partition is owned once.
func (g *cfGroup) stable() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	// Every member owns its even share: under KIP-848 every partition is
	// owned once nearly all along a rebalance (a partition goes to its new
	// owner only once the old one revoked it), so that alone is no
	// settled group.
	if len(g.owned) != cfMembers {
		return false
	}
	n := 0
	for _, ps := range g.owned {
		if len(ps) < cfPartitions/cfMembers || len(ps) > (cfPartitions+cfMembers-1)/cfMembers {
			return false
		}
		n += len(ps)
	}
	seen := map[int32]bool{}
	for _, ps := range g.owned {
		for p := range ps {
			seen[p] = true
		}
	}
	return n == cfPartitions && len(seen) == cfPartitions
}

// commit commits made-up offsets for what cl's consumer owns and records
// the acknowledged ones.
func (g *cfGroup) commit(ctx context.Context, name string, cl *kgo.Client, base int64) {
	g.mu.Lock()
	parts := slices.Sorted(maps.Keys(g.owned[name]))
	g.mu.Unlock()
	if len(parts) == 0 {
		return
	}
	offs := map[string]map[int32]kgo.EpochOffset{g.topic: {}}
	for _, p := range parts {
		offs[g.topic][p] = kgo.EpochOffset{Epoch: -1, Offset: base + int64(p)}
	}
	cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			return
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode == 0 {
					g.acked[p.Partition] = max(g.acked[p.Partition], base+int64(p.Partition))
				}
			}
		}
	})
}

// groupShardLeader is the node that leads the shard of group.
func groupShardLeader(t *testing.T, c *Cluster, group string) *Node {
	t.Helper()
	nodes := c.Running()
	sts, _ := c.StatusOf(nodes, 2*time.Second)
	k := shardOfGroup(group)
	for i, st := range sts {
		if st != nil && st.GetShards()[k].GetState() == "Leader" {
			return nodes[i]
		}
	}
	t.Fatalf("no node leads the shard of %s", group)
	return nil
}

// groupEpoch describes the group with ConsumerGroupDescribe through cl.
func groupEpoch(ctx context.Context, cl *kgo.Client, group string) (int32, error) {
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	if len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 {
		return 0, fmt.Errorf("describe %s: %+v", group, resp.Groups)
	}
	return resp.Groups[0].Epoch, nil
}

func TestConsumerProtocolFailover(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		name := "one-shard"
		if sharded {
			name = "16-shards"
		}
		t.Run(name, func(t *testing.T) { consumerProtocolFailover(t, sharded) })
	}
}

func consumerProtocolFailover(t *testing.T, sharded bool) {
	var c *Cluster
	if sharded {
		c = shardedCluster(t, 3, patientRaft)
		waitBalanced(t, c, 90*time.Second)
	} else {
		c = StartCluster(t, 3)
	}
	g := &cfGroup{group: "cg-failover", topic: "cg-topic", owned: map[string]map[int32]time.Time{}, closed: map[int32][]cfInterval{},
		epochs: map[string]int32{}, acked: map[int32]int64{}}
	coord := &Coordinator{Conns: NewConns("cg-admin"), Seeds: c.KafkaAddrs, Group: g.group}
	defer coord.Conns.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := CreateTopic(ctx, coord, g.topic, cfPartitions); err != nil {
		t.Fatal(err)
	}
	names := make([]string, cfMembers)
	for i := range cfMembers {
		names[i] = fmt.Sprintf("cg-%d", i)
		cl, err := kgo.NewClient(
			kgo.SeedBrokers(c.KafkaAddrs()...),
			kgo.ClientID(names[i]),
			kgo.ConsumerGroup(g.group),
			kgo.ConsumeTopics(g.topic),
			kgo.ServerSideBalancer(),
			kgo.DisableAutoCommit(),
			kgo.FetchMaxWait(200*time.Millisecond),
			kgo.OnPartitionsAssigned(g.callback(names[i], "assigned")),
			kgo.OnPartitionsRevoked(g.callback(names[i], "revoked")),
			kgo.OnPartitionsLost(g.callback(names[i], "lost")),
		)
		if err != nil {
			t.Fatal(err)
		}
		g.clients = append(g.clients, cl)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, cl := range g.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := int64(0)
			for {
				select {
				case <-stop:
					return
				default:
				}
				pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
				cl.PollFetches(pctx)
				pcancel()
				base += 1000
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				g.commit(cctx, names[i], cl, base)
				ccancel()
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
		for _, cl := range g.clients {
			cl.Close()
		}
	}()
	waitStable := func(what string) {
		deadline := time.Now().Add(60 * time.Second)
		for !g.stable() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the consumers do not own every partition once", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitStable("before the kills")
	before, err := groupEpoch(ctx, g.clients[0], g.group)
	if err != nil || before <= 0 {
		t.Fatalf("not a consumer-protocol group (epoch %d): %v", before, err)
	}
	g.mu.Lock()
	g.since = time.Now()
	g.mu.Unlock()
	for i := range cfKills {
		leader := c.WaitLeader(30 * time.Second)
		if sharded {
			leader = groupShardLeader(t, c, g.group)
		}
		at := time.Now()
		c.Kill(leader.Index)
		c.WaitLeader(30 * time.Second)
		time.Sleep(3 * time.Second)
		c.Restart(leader.Index)
		c.WaitConverged(30 * time.Second)
		if sharded {
			waitBalanced(t, c, 90*time.Second)
		}
		waitStable(fmt.Sprintf("after kill %d", i+1))
		t.Logf("kill %d of %s at %s", i+1, leader.ID, at.Format("15:04:05.000"))
	}
	after, err := groupEpoch(ctx, g.clients[0], g.group)
	if err != nil {
		t.Fatal(err)
	}
	// The members kept heartbeating through the failovers: the group
	// carries on at its epoch, and no consumer gave anything up.
	if after != before {
		t.Errorf("group epoch %d before the kills, %d after", before, after)
	}
	g.mu.Lock()
	for _, call := range g.calls {
		t.Errorf("callback during the failovers: %s", call)
	}
	g.mu.Unlock()
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	end := time.Now()
	for _, o := range g.overlaps(end) {
		t.Error(o)
	}
	g.mu.Lock()
	for _, e := range g.epochBack {
		t.Error(e)
	}
	acked := maps.Clone(g.acked)
	g.mu.Unlock()
	if len(acked) != cfPartitions {
		t.Errorf("commits acknowledged for %d of %d partitions", len(acked), cfPartitions)
	}
	got, _, err := FetchOffsets(ctx, coord, g.topic, cfPartitions)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range acked {
		if got[p] < want {
			t.Errorf("partition %d: committed offset %d, but %d was acknowledged", p, got[p], want)
		}
	}
	t.Logf("group epoch %d before the kills, %d after; %d partitions with acknowledged commits", before, after, len(acked))
}
