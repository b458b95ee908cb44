package kafka

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
	"github.com/cohort-coord/cohort/security"
)

// grow is one topic of a CreatePartitions request; assignment nil sends
// none (a null array), each inner slice is one new partition's replicas.
type grow struct {
	topic      string
	count      int32
	assignment [][]int32
}

// growAnswer is one topic of a CreatePartitions answer.
type growAnswer struct {
	topic string
	code  int16
	msg   string // "-": none
}

func createPartitions(t *testing.T, c *rawClient, version int16, validateOnly bool, grows ...grow) []growAnswer {
	t.Helper()
	req := kmsg.NewPtrCreatePartitionsRequest()
	req.SetVersion(version)
	req.ValidateOnly = validateOnly
	for _, g := range grows {
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = g.topic, g.count
		if g.assignment != nil {
			rt.Assignment = []kmsg.CreatePartitionsRequestTopicAssignment{}
		}
		for _, replicas := range g.assignment {
			a := kmsg.NewCreatePartitionsRequestTopicAssignment()
			a.Replicas = replicas
			rt.Assignment = append(rt.Assignment, a)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp := c.do(req).(*kmsg.CreatePartitionsResponse)
	var out []growAnswer
	for _, rt := range resp.Topics {
		a := growAnswer{topic: rt.Topic, code: rt.ErrorCode, msg: "-"}
		if rt.ErrorMessage != nil {
			a.msg = *rt.ErrorMessage
		}
		out = append(out, a)
	}
	return out
}

func wantAnswers(t *testing.T, what string, got []growAnswer, want ...growAnswer) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s:\n got %v\nwant %v", what, got, want)
	}
}

// metadataPartitions is how many partitions Metadata lists for topic, and
// its id.
func metadataPartitions(t *testing.T, c *rawClient, topic string) (int, [16]byte) {
	t.Helper()
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	md.Topics = append(md.Topics, mt)
	r := c.do(md).(*kmsg.MetadataResponse)
	if len(r.Topics) != 1 || r.Topics[0].ErrorCode != 0 {
		t.Fatalf("metadata of %s: %+v", topic, r.Topics)
	}
	return len(r.Topics[0].Partitions), r.Topics[0].TopicID
}

// CreatePartitions grows a topic with Kafka's rules and answers (the
// messages are its controller's); a grown topic keeps its id, and nothing
// refused or validated only changes the catalog.
func TestCreatePartitions(t *testing.T) {
	s := startServer(t, nil, nil)
	c := dial(t, s.l.Addr())
	_, id := metadataPartitions(t, c, "t")
	ok := func(topic string) growAnswer { return growAnswer{topic, 0, "-"} }
	invalid := func(topic, msg string) growAnswer { return growAnswer{topic, kerr.InvalidPartitions.Code, msg} }
	badAssignment := func(msg string) growAnswer { return growAnswer{"t", kerr.InvalidReplicaAssignment.Code, msg} }

	wantAnswers(t, "grow t to 5", createPartitions(t, c, 3, false, grow{"t", 5, nil}), ok("t"))
	if n, got := metadataPartitions(t, c, "t"); n != 5 || got != id {
		t.Fatalf("after the grow: %d partitions, id %x (was %x)", n, got, id)
	}
	version := s.topics.Version()
	refusals := []struct {
		what  string
		grows []grow
		want  []growAnswer
	}{
		{"the same count", []grow{{"t", 5, nil}}, []growAnswer{invalid("t", "Topic already has 5 partition(s).")}},
		{"fewer", []grow{{"t", 2, nil}}, []growAnswer{invalid("t", "The topic t currently has 5 partition(s); 2 would not be an increase.")}},
		{"above the maximum", []grow{{"t", catalog.MaxPartitions + 1, nil}}, []growAnswer{invalid("t", "The topic t would have 65537 partitions; a topic has at most 65536.")}},
		{"an unknown topic", []grow{{"nope", 9, nil}}, []growAnswer{{"nope", kerr.UnknownTopicOrPartition.Code, "-"}}},
		{"a topic named twice", []grow{{"t", 7, nil}, {"t", 8, nil}}, []growAnswer{{"t", kerr.InvalidRequest.Code, "Duplicate topic name."}}},
		{"too few assignments", []grow{{"t", 7, [][]int32{{1}}}}, []growAnswer{badAssignment("Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")}},
		{"an empty assignment list", []grow{{"t", 6, [][]int32{}}}, []growAnswer{badAssignment("Attempted to add 1 additional partition(s), but only 0 assignment(s) were specified.")}},
		{"an unknown broker", []grow{{"t", 7, [][]int32{{1}, {2}}}}, []growAnswer{badAssignment("The manual partition assignment includes broker 2, but no such broker is registered.")}},
		{"a broker twice", []grow{{"t", 6, [][]int32{{1, 1}}}}, []growAnswer{badAssignment("The manual partition assignment includes the broker 1 more than once.")}},
		{"no replica", []grow{{"t", 6, [][]int32{{}}}}, []growAnswer{badAssignment("The manual partition assignment includes an empty replica list.")}},
	}
	for _, r := range refusals {
		for _, validateOnly := range []bool{false, true} {
			wantAnswers(t, fmt.Sprintf("%s (validate only %v)", r.what, validateOnly), createPartitions(t, c, 3, validateOnly, r.grows...), r.want...)
		}
		if v := s.topics.Version(); v != version {
			t.Fatalf("%s changed the catalog", r.what)
		}
	}
	// Validate only: answered as the grow would be, nothing changes.
	wantAnswers(t, "validate a grow to 9", createPartitions(t, c, 3, true, grow{"t", 9, [][]int32{{1}, {1}, {1}, {1}}}), ok("t"))
	if n, _ := metadataPartitions(t, c, "t"); n != 5 || s.topics.Version() != version {
		t.Fatalf("validate only changed the catalog: %d partitions", n)
	}
	// One request, two topics, at every version: each answered in order,
	// one grown with assignments of the one broker there is.
	if err := s.topics.Apply(catalog.CreateTopic{Name: "u", ID: catalog.NewTopicID(), Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	for v := range int16(4) {
		count := 6 + int32(v)
		got := createPartitions(t, c, v, false, grow{"u", count, [][]int32{{1}}}, grow{"t", count, nil}, grow{"nope", count, nil})
		wantAnswers(t, fmt.Sprint("v", v), got, growAnswer{"u", kerr.InvalidReplicaAssignment.Code, fmt.Sprintf("Attempted to add %d additional partition(s), but only 1 assignment(s) were specified.", count-1-int32(v))},
			ok("t"), growAnswer{"nope", kerr.UnknownTopicOrPartition.Code, "-"})
		wantAnswers(t, fmt.Sprint("v", v, " u"), createPartitions(t, c, v, false, grow{"u", 2 + int32(v), [][]int32{{1}}}), ok("u"))
		if n, _ := metadataPartitions(t, c, "t"); n != int(count) {
			t.Fatalf("v%d: t has %d partitions, want %d", v, n, count)
		}
		if n, _ := metadataPartitions(t, c, "u"); n != 2+int(v) {
			t.Fatalf("v%d: u has %d partitions", v, n)
		}
	}
}

// Growing a topic takes ALTER on it (a superuser may): without it the
// answer is TOPIC_AUTHORIZATION_FAILED, whether the topic exists or not,
// as Kafka checks before it looks the topic up.
func TestCreatePartitionsNeedsAlter(t *testing.T) {
	s, store := secureServer(t, true, nil)
	alice := authedRaw(t, s, aliceUser, alicePass)
	admin := authedRaw(t, s, adminUser, adminPass)
	allow := func(op kmsg.ACLOperation) {
		a := security.ACL{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: "t", PatternType: kmsg.ACLResourcePatternTypeLiteral,
			Principal: "User:alice", Host: "*", Operation: op, Permission: kmsg.ACLPermissionTypeAllow}
		if err := store.ApplyACL(&securitypb.AclChange{Creates: []*securitypb.AclBinding{a.Proto()}}); err != nil {
			t.Fatal(err)
		}
	}
	denied := func(topic string) growAnswer { return growAnswer{topic, topicDenied, "-"} }
	wantAnswers(t, "no ACLs", createPartitions(t, alice, 3, false, grow{"t", 4, nil}, grow{"nope", 4, nil}), denied("t"), denied("nope"))
	allow(kmsg.ACLOperationDescribe)
	allow(kmsg.ACLOperationCreate)
	wantAnswers(t, "DESCRIBE and CREATE", createPartitions(t, alice, 3, true, grow{"t", 4, nil}), denied("t"))
	if got, _ := s.topics.Get("t"); got.Partitions != 3 {
		t.Fatalf("a refused grow changed t: %+v", got)
	}
	allow(kmsg.ACLOperationAlter)
	wantAnswers(t, "ALTER", createPartitions(t, alice, 3, false, grow{"t", 4, nil}, grow{"nope", 4, nil}),
		growAnswer{"t", 0, "-"}, denied("nope"))
	wantAnswers(t, "superuser", createPartitions(t, admin, 3, false, grow{"t", 5, nil}, grow{"nope", 4, nil}),
		growAnswer{"t", 0, "-"}, growAnswer{"nope", kerr.UnknownTopicOrPartition.Code, "-"})
	if got, _ := s.topics.Get("t"); got.Partitions != 5 {
		t.Fatalf("t after the grows: %+v", got)
	}
}

// A grow the Raft leader does not take is answered as CreateTopics answers
// (NOT_CONTROLLER, REQUEST_TIMED_OUT); one refused because not every node
// can apply it yet is UNSUPPORTED_VERSION; one that lost a race with
// another grow is INVALID_PARTITIONS, worded from the catalog as it is now.
func TestCreatePartitionsProposalFails(t *testing.T) {
	cases := []struct {
		err  error
		want growAnswer
	}{
		{fmt.Errorf("no leader: %w", coordinator.ErrStoreNotLeader), growAnswer{"t", kerr.NotController.Code, "no Raft leader to take the catalog update"}},
		{fmt.Errorf("slow: %w", coordinator.ErrStoreTimeout), growAnswer{"t", kerr.RequestTimedOut.Code, "catalog update did not complete"}},
		{fmt.Errorf("format 4: %w", catalog.ErrUnsupported), growAnswer{"t", kerr.UnsupportedVersion.Code, "not every node of the cluster runs a version that can grow topics yet"}},
		{catalog.ErrUnknownTopic, growAnswer{"t", kerr.UnknownTopicOrPartition.Code, "-"}},
		{catalog.ErrInvalidPartitions, growAnswer{"t", kerr.InvalidPartitions.Code, "The topic t currently has 6 partition(s); 4 would not be an increase."}},
	}
	for _, tc := range cases {
		var s *testServer
		s = startServerProposing(t, nil, nil, func(_ context.Context, cmd catalog.Command) error {
			if g, ok := cmd.(catalog.GrowTopic); !ok || g.Name != "t" || g.Partitions != 4 || g.ID == ([16]byte{}) {
				return fmt.Errorf("proposed %+v", cmd)
			}
			if tc.err == catalog.ErrInvalidPartitions {
				// Another grow won: the catalog has it, as a forwarded
				// refusal waits for (see Node.proposeTopic).
				if err := s.topics.Apply(catalog.GrowTopic{Name: "t", Partitions: 6}); err != nil {
					return err
				}
			}
			return tc.err
		})
		c := dial(t, s.l.Addr())
		wantAnswers(t, tc.err.Error(), createPartitions(t, c, 3, false, grow{"t", 4, nil}), tc.want)
	}
}
