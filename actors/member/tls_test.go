package member_test

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/internal/testcerts"
	"github.com/cohort-coord/cohort/internal/testnode"
	"github.com/cohort-coord/cohort/node"
	"github.com/cohort-coord/cohort/tlsconfig"
)

// TestKafkaTransportOverTLS: a member joins and commits through a node
// whose Kafka listener requires client certificates (member.KafkaTLS).
func TestKafkaTransportOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "member test CA")
	testcerts.WriteFile(t, dir+"/ca.crt", ca.PEM)
	sf := ca.Issue(t, testcerts.Options{CommonName: "node1"}).Write(t, dir, "node1", nil)
	cf := ca.Issue(t, testcerts.Options{CommonName: "worker"}).Write(t, dir, "worker", nil)
	cfg := testnode.Config(t)
	cfg.Kafka.DefaultPartitions = 4
	cfg.TLS = node.TLSConfig{Files: sf.TLSFiles(), Kafka: true, KafkaClientAuth: tlsconfig.ClientAuthRequire}
	n := testnode.Start(t, cfg)
	tc, err := tlsconfig.ClientConfig(cf.TLSFiles())
	if err != nil {
		t.Fatal(err)
	}
	assigned := make(chan []assignor.TopicPartitions, 4)
	system := actor.NewActorSystem()
	m, err := member.Start(system, "tls-group", append(timing(),
		member.WithTransport(member.KafkaTLS(tc, n.KafkaAddr())), member.Topics("t"),
		member.OnAssigned(func(_ context.Context, _ *member.Member, ps []assignor.TopicPartitions) { assigned <- ps }))...)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ps := <-assigned:
		if got := flatten(ps); len(got) != 4 {
			t.Fatalf("assigned %v, want the 4 partitions of t", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no assignment over TLS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m.Commit(ctx, map[string]map[int32]int64{"t": {2: 42}}); err != nil {
		t.Fatalf("commit over TLS: %v", err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DialTLSConfig(tc))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = "tls-group"
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	var got int64 = -2
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if tp.Topic == "t" && p.Partition == 2 {
				got = p.Offset
			}
		}
	}
	if got != 42 {
		t.Fatalf("committed offset of t/2: %d, want 42", got)
	}
}
