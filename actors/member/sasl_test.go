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
	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/internal/testnode"
	"github.com/cohort-coord/cohort/node"
	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
	"github.com/cohort-coord/cohort/security"
)

// A member over the Kafka transport authenticates with SCRAM, is assigned
// its group's partitions and commits, where its ACLs allow.
func TestKafkaTransportSASL(t *testing.T) {
	cfg := testnode.Config(t)
	cfg.Security = node.SecurityConfig{Listeners: []security.Listener{{Protocol: security.SASLPlaintext, Addr: "127.0.0.1:0"}}, Authorizer: true}
	n := testnode.Start(t, cfg)
	ctx := context.Background()
	if err := n.Topics().Propose(ctx, catalog.CreateTopic{Name: "t", ID: catalog.NewTopicID(), Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	c, _ := security.NewCredential("svc", securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_512, "svc-pw", security.MinIterations)
	if err := n.ChangeScram(ctx, &securitypb.ScramChange{Upserts: []*securitypb.ScramCredential{c}}); err != nil {
		t.Fatal(err)
	}
	change := &securitypb.AclChange{}
	for _, r := range []struct {
		rt   kmsg.ACLResourceType
		name string
	}{{kmsg.ACLResourceTypeGroup, "svc-g"}, {kmsg.ACLResourceTypeTopic, "t"}} {
		a := security.ACL{ResourceType: r.rt, ResourceName: r.name, PatternType: kmsg.ACLResourcePatternTypeLiteral,
			Principal: "User:svc", Host: "*", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow}
		change.Creates = append(change.Creates, a.Proto())
	}
	if err := n.ChangeACL(ctx, change); err != nil {
		t.Fatal(err)
	}
	if _, err := member.KafkaSASL("SCRAM-SHA-1", "svc", "svc-pw"); err == nil {
		t.Fatal("an unknown mechanism is accepted")
	}
	sasl, err := member.KafkaSASL(security.MechanismScramSHA512, "svc", "svc-pw")
	if err != nil {
		t.Fatal(err)
	}
	system := actor.NewActorSystem()
	assigned := make(chan int, 4)
	m, err := member.Start(system, "svc-g", append(timing(),
		member.Topics("t"),
		member.WithTransport(member.KafkaWithOptions([]string{n.KafkaAddr()}, sasl, kgo.RequestRetries(1))),
		member.OnAssigned(func(_ context.Context, _ *member.Member, ps []assignor.TopicPartitions) {
			count := 0
			for _, p := range ps {
				count += len(p.Partitions)
			}
			assigned <- count
		}))...)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-assigned:
		if got != 3 {
			t.Fatalf("assigned %d partitions, want 3", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no assignment over SASL")
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := m.Commit(cctx, map[string]map[int32]int64{"t": {0: 42}}); err != nil {
		t.Fatalf("commit: %v", err)
	}
	_, offs, _ := n.Raft().FSM.Load("svc-g")
	if len(offs) != 1 || offs[0].GetOffset() != 42 {
		t.Fatalf("stored offsets %v", offs)
	}
	if err := m.Close(cctx); err != nil {
		t.Fatal(err)
	}
}
