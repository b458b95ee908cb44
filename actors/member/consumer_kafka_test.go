package member_test

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/internal/testnode"
)

// startKafkaNode starts a node whose Kafka listener serves the consumer
// protocol when consumer is set, with topic "t" of six partitions.
func startKafkaNode(t *testing.T, consumer bool) string {
	t.Helper()
	cfg := testnode.Config(t)
	cfg.Kafka.ConsumerProtocol = consumer
	cfg.Consumer.SessionTimeout, cfg.Consumer.HeartbeatInterval = 6*time.Second, 300*time.Millisecond
	n := testnode.Start(t, cfg)
	if err := n.Topics().Propose(context.Background(), catalog.CreateTopic{Name: "t", ID: catalog.NewTopicID(), Partitions: 6}); err != nil {
		t.Fatal(err)
	}
	return n.KafkaAddr()
}

// Two consumer-protocol members over the Kafka transport (ConsumerGroupHeartbeat
// by topic id) share a six-partition topic without holding a partition
// twice; one commits at its member epoch and the offset is there.
func TestConsumerProtocolOverKafka(t *testing.T) {
	addr := startKafkaNode(t, true)
	system := actor.NewActorSystem()
	h := &holders{by: map[int32]string{}}
	ms := map[string]*member.Member{}
	for _, name := range []string{"a", "b"} {
		opts := append(timing(), member.ConsumerProtocol(), member.ServerAssignor("range"),
			member.WithTransport(member.Kafka(addr)), member.Topics("t"))
		m, err := member.Start(system, "over-kafka", append(opts, h.opts(name)...)...)
		if err != nil {
			t.Fatal(err)
		}
		ms[name] = m
	}
	waitForReal(t, "two shares of three", func() bool {
		h.mu.Lock()
		n := len(h.by)
		h.mu.Unlock()
		return n == 6 && len(partitionsOf(ms["a"].Assignment())) == 3 && len(partitionsOf(ms["b"].Assignment())) == 3
	})
	a := ms["a"]
	if a.GroupProtocol() != "consumer" || a.Generation() <= 0 {
		t.Fatalf("protocol %s epoch %d", a.GroupProtocol(), a.Generation())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := partitionsOf(a.Assignment())[0]
	if err := a.Commit(ctx, map[string]map[int32]int64{"t": {p: 42}}); err != nil {
		t.Fatalf("commit at epoch %d: %v", a.Generation(), err)
	}
	for _, m := range ms {
		if err := m.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	if len(h.clashes) > 0 || len(h.lost) > 0 {
		t.Fatalf("clashes %v, lost %v", h.clashes, h.lost)
	}
	h.mu.Unlock()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = "over-kafka"
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	got := int64(-2)
	for _, tp := range resp.Topics {
		for _, pp := range tp.Partitions {
			if tp.Topic == "t" && pp.Partition == p {
				got = pp.Offset
			}
		}
	}
	if got != 42 {
		t.Fatalf("committed offset of t/%d: %d, want 42", p, got)
	}
}

// Over the Kafka transport too, a coordinator that does not serve the
// consumer protocol makes the member speak the classic one.
func TestConsumerProtocolOverKafkaFallsBack(t *testing.T) {
	addr := startKafkaNode(t, false)
	system := actor.NewActorSystem()
	h := &holders{by: map[int32]string{}}
	opts := append(timing(), member.ConsumerProtocol(), member.WithTransport(member.Kafka(addr)), member.Topics("t"))
	m, err := member.Start(system, "kafka-classic", append(opts, h.opts("a")...)...)
	if err != nil {
		t.Fatal(err)
	}
	waitForReal(t, "all six through the classic protocol", func() bool { return len(partitionsOf(m.Assignment())) == 6 })
	if m.GroupProtocol() != "classic" {
		t.Fatalf("group protocol %s", m.GroupProtocol())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitForReal polls cond for up to 30 seconds of wall time.
func waitForReal(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
