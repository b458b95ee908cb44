package coordinator

import (
	"fmt"
	"testing"
	"time"
)

// cgBenchGroup builds a converged group of n members subscribed to topics
// topics of parts partitions each, driven by simulated clients.
func cgBenchGroup(b *testing.B, n, topics, parts int) (*ConsumerGroup, []*cgBenchClient, time.Time) {
	cfg := DefaultConsumerConfig()
	catalog := map[string]int32{}
	var names []string
	for t := range topics {
		name := fmt.Sprintf("topic-%03d", t)
		catalog[name] = int32(parts)
		names = append(names, name)
	}
	g := NewConsumerGroup("g", &cfg, catalog)
	now := cgT0
	var clients []*cgBenchClient
	for i := range n {
		c := &cgBenchClient{id: fmt.Sprintf("member-%05d", i), held: tpSet{}}
		clients = append(clients, c)
		c.join(b, g, now, names)
	}
	converge(b, g, clients, now)
	return g, clients, now
}

type cgBenchClient struct {
	id    string
	epoch int32
	held  tpSet
}

func (c *cgBenchClient) apply(b *testing.B, r ConsumerHeartbeatResponse) {
	if r.ErrorCode != ErrNone {
		b.Fatalf("%s: error %d %s", c.id, r.ErrorCode, r.ErrorMessage)
	}
	c.epoch = r.MemberEpoch
	if r.HasAssignment {
		c.held = newTPSet(r.Assignment)
	}
}

func (c *cgBenchClient) join(b *testing.B, g *ConsumerGroup, now time.Time, names []string) {
	var fx ConsumerEffects
	c.apply(b, g.Heartbeat(cgJoin(c.id, names...), now, &fx))
}

// converge heartbeats every client, reporting what it holds, until the
// group is Stable; it returns the number of rounds.
func converge(b *testing.B, g *ConsumerGroup, clients []*cgBenchClient, now time.Time) int {
	var fx ConsumerEffects
	for round := 1; ; round++ {
		for _, c := range clients {
			fx.Reset()
			c.apply(b, g.Heartbeat(cgBeat(c.id, c.epoch, c.held.list()), now, &fx))
		}
		if g.State() == "Stable" {
			return round
		}
		if round > 20 {
			b.Fatalf("no convergence: %s", g.State())
		}
	}
}

// BenchmarkConsumerKeepalive: one keepalive heartbeat (nothing changed, owned
// partitions not sent) of a member of a stable 1,000-member group.
//
//	go test -run '^$' -bench ConsumerKeepalive -benchtime=50000x -count=5 ./coordinator/
func BenchmarkConsumerKeepalive(b *testing.B) {
	g, clients, now := cgBenchGroup(b, 1000, 100, 10)
	var fx ConsumerEffects
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c := clients[i%len(clients)]
		fx.Reset()
		if r := g.Heartbeat(cgBeat(c.id, c.epoch, nil), now, &fx); r.ErrorCode != ErrNone {
			b.Fatal(r.ErrorMessage)
		}
	}
}

// BenchmarkConsumerScaleOut: a stable group of 1,000 members (100 topics of
// 20 partitions, two per member) grows by 100 members, who take one
// partition each from 200 of the others; one operation is the 100 joins and
// every heartbeat until the group is Stable again (rounds/op: heartbeats of
// every member needed).
//
//	go test -run '^$' -bench ConsumerScaleOut -benchtime=3x -count=5 ./coordinator/
func BenchmarkConsumerScaleOut(b *testing.B) {
	names := make([]string, 100)
	for t := range names {
		names[t] = fmt.Sprintf("topic-%03d", t)
	}
	rounds := 0
	for range b.N {
		b.StopTimer()
		g, clients, now := cgBenchGroup(b, 1000, 100, 20)
		b.StartTimer()
		for i := range 100 {
			c := &cgBenchClient{id: fmt.Sprintf("new-%05d", i), held: tpSet{}}
			clients = append(clients, c)
			c.join(b, g, now, names)
		}
		rounds += converge(b, g, clients, now)
	}
	b.ReportMetric(float64(rounds)/float64(b.N), "rounds/op")
}
