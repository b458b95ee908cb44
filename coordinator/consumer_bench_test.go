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

// cgRegexBenchGroup builds a converged group of 10 members subscribed by
// the regex "orders-.*", which matches 10 topics of 4 partitions; the
// catalog holds those and catalog-10 topics the regex does not match.
func cgRegexBenchGroup(b *testing.B, catalog int) (*ConsumerGroup, []*cgBenchClient, time.Time) {
	cfg := DefaultConsumerConfig()
	topics := map[string]int32{}
	for t := range 10 {
		topics[fmt.Sprintf("orders-%02d", t)] = 4
	}
	for t := range catalog - 10 {
		topics[fmt.Sprintf("other-%05d", t)] = 4
	}
	g := NewConsumerGroup("g", &cfg, topics)
	now := cgT0
	var clients []*cgBenchClient
	var fx ConsumerEffects
	for i := range 10 {
		c := &cgBenchClient{id: fmt.Sprintf("member-%05d", i), held: tpSet{}}
		clients = append(clients, c)
		fx.Reset()
		c.apply(b, g.Heartbeat(cgRegexJoin(c.id, "orders-.*"), now, &fx))
	}
	fx.Reset()
	g.OnTimer(ConsumerTimerRegex, "", now, &fx) // the joins' resolution
	converge(b, g, clients, now)
	if got := len(g.regex.resolved["orders-.*"]); got != 10 {
		b.Fatalf("the regex resolved to %d topics", got)
	}
	return g, clients, now
}

// BenchmarkConsumerRegexHeartbeat: heartbeats of members subscribed by a
// regex, with 10 and with 10,000 topics in the catalog (the regex matches
// 10 of them either way). keepalive: nothing changed, owned partitions not
// sent; full: owned partitions sent; join-leave: a member joins with the
// regex (resolved already: an epoch bump and a new target) and leaves
// (another), two heartbeats per op. The catalog's size should not show:
// a heartbeat never matches the regex against it, and allocates the same
// (join-leave runs slower over the large catalog only by the collector's
// marking of the bigger heap that holds it).
//
//	go test -run '^$' -bench ConsumerRegexHeartbeat -benchmem -count=5 ./coordinator/
func BenchmarkConsumerRegexHeartbeat(b *testing.B) {
	for _, catalog := range []int{10, 10_000} {
		b.Run(fmt.Sprintf("keepalive/catalog=%d", catalog), func(b *testing.B) {
			g, clients, now := cgRegexBenchGroup(b, catalog)
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
		})
		b.Run(fmt.Sprintf("full/catalog=%d", catalog), func(b *testing.B) {
			g, clients, now := cgRegexBenchGroup(b, catalog)
			var fx ConsumerEffects
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				c := clients[i%len(clients)]
				fx.Reset()
				req := cgBeat(c.id, c.epoch, c.held.list())
				req.RebalanceTimeoutMs, req.SubscribedTopicRegex = 30000, strp("orders-.*")
				if r := g.Heartbeat(req, now, &fx); r.ErrorCode != ErrNone {
					b.Fatal(r.ErrorMessage)
				}
			}
		})
		b.Run(fmt.Sprintf("join-leave/catalog=%d", catalog), func(b *testing.B) {
			g, _, now := cgRegexBenchGroup(b, catalog)
			var fx ConsumerEffects
			epoch := g.Epoch()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				fx.Reset()
				if r := g.Heartbeat(cgRegexJoin("joiner", "orders-.*"), now, &fx); r.ErrorCode != ErrNone {
					b.Fatal(r.ErrorMessage)
				}
				fx.Reset()
				if r := g.Heartbeat(cgBeat("joiner", -1, nil), now, &fx); r.ErrorCode != ErrNone {
					b.Fatal(r.ErrorMessage)
				}
			}
			b.StopTimer()
			if g.Epoch() != epoch+int32(2*b.N) || g.regex.runs != 1 {
				b.Fatalf("epoch %d after %d resolutions, want %d after 1", g.Epoch(), g.regex.runs, epoch+int32(2*b.N))
			}
		})
	}
}
