package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/internal/tripwire"
	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// mappingListener is a listener that is never served, with a catalog of
// topics "a" (2 partitions) and "b" (3), for the tests of the mapping
// functions. ids holds the topics' ids by name.
func mappingListener(t testing.TB, cfg func(*Config)) (*Listener, map[string][16]byte) {
	t.Helper()
	topics := catalog.New()
	ids := map[string][16]byte{}
	for name, parts := range map[string]int32{"a": 2, "b": 3} {
		ids[name] = catalog.NewTopicID()
		if err := topics.Apply(catalog.CreateTopic{Name: name, ID: ids[name], Partitions: parts}); err != nil {
			t.Fatal(err)
		}
	}
	c := DefaultConfig()
	c.Addr = "127.0.0.1:0"
	if cfg != nil {
		cfg(&c)
	}
	l, err := New(c, &fakeGroups{}, topics, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, ids
}

func mappingRequest(l *Listener, v int16) *request {
	return &request{version: v, clientID: "client-1", c: &conn{l: l, host: "/10.0.0.7"}}
}

func owned(id [16]byte, parts ...int32) kmsg.ConsumerGroupHeartbeatRequestTopic {
	t := kmsg.NewConsumerGroupHeartbeatRequestTopic()
	t.TopicID, t.Partitions = id, parts
	return t
}

func TestHeartbeatRequestMapping(t *testing.T) {
	l, ids := mappingListener(t, nil)
	unknown := catalog.NewTopicID()
	str := kmsg.StringPtr
	for _, tc := range []struct {
		name    string
		v       int16
		req     kmsg.ConsumerGroupHeartbeatRequest
		want    *grouppb.ConsumerGroupHeartbeatRequest
		dropped int
	}{{
		name: "keepalive: every null stays unset",
		v:    1,
		req:  kmsg.ConsumerGroupHeartbeatRequest{Group: "g", MemberID: "m", MemberEpoch: 4, RebalanceTimeoutMillis: -1},
		want: &grouppb.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "m", MemberEpoch: 4, RebalanceTimeoutMs: -1,
			ClientId: "client-1", ClientHost: "/10.0.0.7", ApiVersion: 1},
	}, {
		name: "full join: empty lists are set, values kept",
		v:    1,
		req: kmsg.ConsumerGroupHeartbeatRequest{Group: "g", MemberID: "m", InstanceID: str("i"), RackID: str("r"),
			RebalanceTimeoutMillis: 30000, SubscribedTopicNames: []string{}, SubscribedTopicRegex: str(""), ServerAssignor: str("range"),
			Topics: []kmsg.ConsumerGroupHeartbeatRequestTopic{}},
		want: &grouppb.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "m", InstanceId: proto.String("i"), RackId: proto.String("r"),
			RebalanceTimeoutMs: 30000, SubscribedTopicNamesSet: true, SubscribedTopicRegex: proto.String(""), ServerAssignor: proto.String("range"),
			TopicsSet: true, ClientId: "client-1", ClientHost: "/10.0.0.7", ApiVersion: 1},
	}, {
		name: "owned partitions named by the catalog, an unknown and the zero id dropped",
		v:    1,
		req: kmsg.ConsumerGroupHeartbeatRequest{Group: "g", MemberID: "m", MemberEpoch: 7, RebalanceTimeoutMillis: -1,
			SubscribedTopicNames: []string{"b", "a"},
			Topics:               []kmsg.ConsumerGroupHeartbeatRequestTopic{owned(ids["b"], 2, 0), owned(unknown, 1), owned([16]byte{}, 0), owned(ids["a"], 1)}},
		want: &grouppb.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "m", MemberEpoch: 7, RebalanceTimeoutMs: -1,
			SubscribedTopicNamesSet: true, SubscribedTopicNames: []string{"b", "a"}, TopicsSet: true,
			Topics:   []*grouppb.TopicPartitions{{Name: "b", Partitions: []int32{2, 0}}, {Name: "a", Partitions: []int32{1}}},
			ClientId: "client-1", ClientHost: "/10.0.0.7", ApiVersion: 1},
		dropped: 2,
	}, {
		name: "every owned topic unknown: still an owned list, empty",
		v:    1,
		req: kmsg.ConsumerGroupHeartbeatRequest{Group: "g", MemberID: "m", MemberEpoch: 7, RebalanceTimeoutMillis: -1,
			Topics: []kmsg.ConsumerGroupHeartbeatRequestTopic{owned(unknown, 0)}},
		want: &grouppb.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "m", MemberEpoch: 7, RebalanceTimeoutMs: -1, TopicsSet: true,
			ClientId: "client-1", ClientHost: "/10.0.0.7", ApiVersion: 1},
		dropped: 1,
	}, {
		name: "v0 has no regex",
		v:    0,
		req:  kmsg.ConsumerGroupHeartbeatRequest{Group: "g", MemberEpoch: 0, RebalanceTimeoutMillis: 1000, SubscribedTopicRegex: str("x.*")},
		want: &grouppb.ConsumerGroupHeartbeatRequest{GroupId: "g", RebalanceTimeoutMs: 1000, ClientId: "client-1", ClientHost: "/10.0.0.7"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.SetVersion(tc.v)
			got, dropped := l.heartbeatRequest(mappingRequest(l, tc.v), &req)
			for _, d := range tripwire.Diff(tc.want, got) {
				t.Error(d)
			}
			if dropped != tc.dropped {
				t.Errorf("dropped %d, want %d", dropped, tc.dropped)
			}
		})
	}
}

func TestHeartbeatAnswerMapping(t *testing.T) {
	l, ids := mappingListener(t, nil)
	for _, tc := range []struct {
		name string
		out  *grouppb.ConsumerGroupHeartbeatResponse
		want kmsg.ConsumerGroupHeartbeatResponse
	}{{
		name: "an error carries its code and message only",
		out: &grouppb.ConsumerGroupHeartbeatResponse{ErrorCode: int32(kerr.FencedMemberEpoch.Code), ErrorMessage: "fenced",
			MemberId: "m", MemberEpoch: 3, HeartbeatIntervalMs: 5000, HasAssignment: true},
		want: kmsg.ConsumerGroupHeartbeatResponse{ErrorCode: kerr.FencedMemberEpoch.Code, ErrorMessage: kmsg.StringPtr("fenced")},
	}, {
		name: "no assignment: a nil Assignment",
		out:  &grouppb.ConsumerGroupHeartbeatResponse{MemberId: "m", MemberEpoch: 3, HeartbeatIntervalMs: 5000},
		want: kmsg.ConsumerGroupHeartbeatResponse{MemberID: kmsg.StringPtr("m"), MemberEpoch: 3, HeartbeatIntervalMillis: 5000},
	}, {
		name: "an empty assignment is sent",
		out:  &grouppb.ConsumerGroupHeartbeatResponse{MemberId: "m", MemberEpoch: 3, HeartbeatIntervalMs: 5000, HasAssignment: true},
		want: kmsg.ConsumerGroupHeartbeatResponse{MemberID: kmsg.StringPtr("m"), MemberEpoch: 3, HeartbeatIntervalMillis: 5000,
			Assignment: &kmsg.ConsumerGroupHeartbeatResponseAssignment{Topics: []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}}},
	}, {
		name: "topics by id, a deleted one left out",
		out: &grouppb.ConsumerGroupHeartbeatResponse{MemberId: "m", MemberEpoch: 9, HeartbeatIntervalMs: 5000, HasAssignment: true,
			Assignment: []*grouppb.TopicPartitions{{Name: "b", Partitions: []int32{0, 2}}, {Name: "gone", Partitions: []int32{0}}, {Name: "a", Partitions: []int32{1}}}},
		want: kmsg.ConsumerGroupHeartbeatResponse{MemberID: kmsg.StringPtr("m"), MemberEpoch: 9, HeartbeatIntervalMillis: 5000,
			Assignment: &kmsg.ConsumerGroupHeartbeatResponseAssignment{Topics: []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{
				{TopicID: ids["b"], Partitions: []int32{0, 2}}, {TopicID: ids["a"], Partitions: []int32{1}}}}},
	}, {
		name: "a leave echoes the member and its epoch",
		out:  &grouppb.ConsumerGroupHeartbeatResponse{MemberId: "m", MemberEpoch: -1},
		want: kmsg.ConsumerGroupHeartbeatResponse{MemberID: kmsg.StringPtr("m"), MemberEpoch: -1},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := kmsg.NewPtrConsumerGroupHeartbeatResponse()
			l.heartbeatAnswer(tc.out, got)
			for _, d := range tripwire.DiffStruct(&tc.want, got) {
				t.Error(d)
			}
		})
	}
}

func TestDescribedGroupMapping(t *testing.T) {
	l, ids := mappingListener(t, nil)
	out := &grouppb.ConsumerGroupDescribeResponse{GroupId: "g", State: "Reconciling", GroupEpoch: 5, AssignmentEpoch: 4, AssignorName: "range",
		Members: []*grouppb.ConsumerGroupDescribedMember{{
			MemberId: "m1", InstanceId: proto.String("i1"), RackId: proto.String("r1"), MemberEpoch: 4, ClientId: "c1", ClientHost: "/10.0.0.1",
			SubscribedTopicNames: []string{"a", "b"}, SubscribedTopicRegex: proto.String(""), State: "UNREVOKED_PARTITIONS",
			Assignment:       []*grouppb.TopicPartitions{{Name: "a", Partitions: []int32{0, 1}}, {Name: "gone", Partitions: []int32{0}}},
			TargetAssignment: []*grouppb.TopicPartitions{{Name: "b", Partitions: []int32{2}}},
		}, {
			MemberId: "m2", MemberEpoch: 5, ClientId: "c2", ClientHost: "/10.0.0.2",
		}}}
	for _, v := range []int16{0, 1} {
		memberType := int8(-1)
		if v >= 1 {
			memberType = 1
		}
		want := kmsg.NewConsumerGroupDescribeResponseGroup()
		want.State, want.Epoch, want.AssignmentEpoch, want.AssignorName = "Reconciling", 5, 4, "range"
		want.Members = []kmsg.ConsumerGroupDescribeResponseGroupMember{{
			MemberID: "m1", InstanceID: kmsg.StringPtr("i1"), RackID: kmsg.StringPtr("r1"), MemberEpoch: 4, ClientID: "c1", ClientHost: "/10.0.0.1",
			SubscribedTopics: []string{"a", "b"}, SubscribedTopicRegex: kmsg.StringPtr(""),
			Assignment:       kmsg.Assignment{TopicPartitions: []kmsg.AssignmentTopicPartition{{TopicID: ids["a"], Topic: "a", Partitions: []int32{0, 1}}}},
			TargetAssignment: kmsg.Assignment{TopicPartitions: []kmsg.AssignmentTopicPartition{{TopicID: ids["b"], Topic: "b", Partitions: []int32{2}}}},
			MemberType:       memberType,
		}, {
			MemberID: "m2", MemberEpoch: 5, ClientID: "c2", ClientHost: "/10.0.0.2", SubscribedTopics: []string{},
			Assignment:       kmsg.Assignment{TopicPartitions: []kmsg.AssignmentTopicPartition{}},
			TargetAssignment: kmsg.Assignment{TopicPartitions: []kmsg.AssignmentTopicPartition{}},
			MemberType:       memberType,
		}}
		got := kmsg.NewConsumerGroupDescribeResponseGroup()
		l.describedGroup(mappingRequest(l, v), out, &got)
		for _, d := range tripwire.DiffStruct(&want, &got) {
			t.Errorf("v%d: %s", v, d)
		}
	}
	// An error answer carries its code and message, no members.
	got := kmsg.NewConsumerGroupDescribeResponseGroup()
	l.describedGroup(mappingRequest(l, 1), &grouppb.ConsumerGroupDescribeResponse{ErrorCode: int32(kerr.GroupIDNotFound.Code), ErrorMessage: "Group g not found.",
		State: "Dead", Members: out.Members}, &got)
	if got.ErrorCode != kerr.GroupIDNotFound.Code || got.ErrorMessage == nil || *got.ErrorMessage != "Group g not found." || got.State != "" || got.Members != nil {
		t.Fatalf("error answer %+v", got)
	}
}

// The protocol off: ApiVersions still lists both APIs at v0-1, and every
// request is answered UNSUPPORTED_VERSION (the group service would have
// served them, as it does with the protocol on).
func TestConsumerProtocolOff(t *testing.T) {
	for _, on := range []bool{true, false} {
		s := startConsumerServer(t, func(c *Config) { c.ConsumerProtocol = on })
		c := dial(t, s.l.Addr())
		av := c.do(&kmsg.ApiVersionsRequest{Version: 3, ClientSoftwareName: "t", ClientSoftwareVersion: "1"}).(*kmsg.ApiVersionsResponse)
		listed := map[int16][2]int16{}
		for _, k := range av.ApiKeys {
			listed[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
		}
		for _, key := range []int16{68, 69} {
			if got := listed[key]; got != [2]int16{0, 1} {
				t.Errorf("protocol on %v: api %d listed as %v, want v0-1", on, key, got)
			}
		}
		for _, v := range []int16{0, 1} {
			hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			hb.SetVersion(v)
			hb.Group, hb.MemberID, hb.RebalanceTimeoutMillis = "g", fmt.Sprintf("m-%d", v), 30_000
			hb.SubscribedTopicNames, hb.Topics = []string{"orders"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
			hr := c.do(hb).(*kmsg.ConsumerGroupHeartbeatResponse)
			ds := kmsg.NewPtrConsumerGroupDescribeRequest()
			ds.SetVersion(v)
			ds.Groups = []string{"g", "h"}
			dr := c.do(ds).(*kmsg.ConsumerGroupDescribeResponse)
			if len(dr.Groups) != 2 || dr.Groups[0].Group != "g" || dr.Groups[1].Group != "h" {
				t.Fatalf("protocol on %v, v%d: describe answered %+v", on, v, dr.Groups)
			}
			if !on {
				for _, code := range []int16{hr.ErrorCode, dr.Groups[0].ErrorCode, dr.Groups[1].ErrorCode} {
					if code != kerr.UnsupportedVersion.Code {
						t.Fatalf("protocol off, v%d: heartbeat %+v, describe %+v", v, hr, dr.Groups)
					}
				}
				if hr.ErrorMessage == nil || *hr.ErrorMessage != consumerProtocolOffMsg || dr.Groups[0].ErrorMessage == nil {
					t.Fatalf("protocol off, v%d: UNSUPPORTED_VERSION without its message", v)
				}
				continue
			}
			// On: the members join one after the other, and the group is
			// described.
			if hr.ErrorCode != 0 || hr.MemberEpoch != int32(v)+1 || dr.Groups[0].ErrorCode != 0 || len(dr.Groups[0].Members) != int(v)+1 ||
				dr.Groups[1].ErrorCode != kerr.GroupIDNotFound.Code {
				t.Fatalf("protocol on, v%d: heartbeat %+v, describe %+v", v, hr, dr.Groups)
			}
		}
	}
	var zero Config
	if zero.ConsumerProtocol || !DefaultConfig().ConsumerProtocol {
		t.Fatal("the protocol is on by default only")
	}
}

// A join must own nothing: one that reports owned partitions of a topic
// the catalog does not know is refused by the listener (it cannot pass
// them on) as the group refuses one owning a known topic. Past the join, an
// unknown owned topic (deleted) is left out and the heartbeat goes on.
func TestOwnedUnknownTopic(t *testing.T) {
	s := startConsumerServer(t, nil)
	m := s.member(t, "g", "m-1")
	for _, id := range [][16]byte{catalog.NewTopicID(), s.orders} {
		m.owned = map[[16]byte][]int32{id: {0}}
		r := m.send(0)
		if r.ErrorCode != kerr.InvalidRequest.Code || r.ErrorMessage == nil || *r.ErrorMessage != joinOwnsTopicsMsg || r.MemberID != nil {
			t.Fatalf("join owning a partition of topic %x: %+v", id, r)
		}
	}
	m.owned = nil
	m.beat()
	if m.epoch != 1 || len(m.owned[s.orders]) != 4 {
		t.Fatalf("join: epoch %d, owns %v", m.epoch, m.owned)
	}
	m.owned[catalog.NewTopicID()] = []int32{0, 1}
	r := m.beat()
	if m.epoch != 1 || r.Assignment != nil {
		t.Fatalf("heartbeat owning a deleted topic too: %+v", r)
	}
}

// A failed call answers COORDINATOR_NOT_AVAILABLE, as every group API.
func TestConsumerCallFailureIsRetriable(t *testing.T) {
	withAsyncBound(t, 200*time.Millisecond) // the heartbeat's call is sent: answered at its bound
	fg := &fakeGroups{fn: func(ctx context.Context, _ proto.Message) (proto.Message, error) {
		return nil, context.DeadlineExceeded
	}}
	s := startServer(t, fg, nil)
	c := dial(t, s.l.Addr())
	for _, v := range []int16{0, 1} {
		hb := sampleRequest(68, v)
		hb.SetVersion(v)
		if r := c.do(hb).(*kmsg.ConsumerGroupHeartbeatResponse); r.ErrorCode != kerr.CoordinatorNotAvailable.Code || r.MemberID != nil {
			t.Fatalf("v%d heartbeat: %+v", v, r)
		}
		ds := sampleRequest(69, v)
		ds.SetVersion(v)
		if r := c.do(ds).(*kmsg.ConsumerGroupDescribeResponse); len(r.Groups) != 1 || r.Groups[0].ErrorCode != kerr.CoordinatorNotAvailable.Code {
			t.Fatalf("v%d describe: %+v", v, r.Groups)
		}
	}
}

// ConsumerGroupDescribe: "" is INVALID_GROUP_ID, every other id is
// described, and the authorized operations are INT32_MIN unless asked for.
func TestConsumerGroupDescribeGroups(t *testing.T) {
	s := startConsumerServer(t, nil)
	for _, g := range []string{"g", "h"} {
		s.member(t, g, "m-1").beat()
	}
	c := dial(t, s.l.Addr())
	for _, ops := range []bool{false, true} {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.SetVersion(1)
		req.Groups, req.IncludeAuthorizedOperations = []string{"", "g", "h"}, ops
		r := c.do(req).(*kmsg.ConsumerGroupDescribeResponse)
		if len(r.Groups) != 3 || r.Groups[0].ErrorCode != kerr.InvalidGroupID.Code || r.Groups[1].Group != "g" || r.Groups[2].Group != "h" {
			t.Fatalf("groups %+v", r.Groups)
		}
		wantOps := int32(-1 << 31)
		if ops {
			wantOps = 1<<kmsg.ACLOperationRead | 1<<kmsg.ACLOperationDelete | 1<<kmsg.ACLOperationDescribe
		}
		for _, g := range r.Groups[1:] {
			if g.ErrorCode != 0 || g.AuthorizedOperations != wantOps || g.Epoch != 1 || len(g.Members) != 1 {
				t.Fatalf("operations asked %v: group %+v", ops, g)
			}
			a := g.Members[0].Assignment.TopicPartitions
			if len(a) != 2 {
				t.Fatalf("assignment %+v", a)
			}
			for _, tp := range a {
				if id, _ := s.topics.Get(tp.Topic); id.ID != tp.TopicID {
					t.Fatalf("assignment %+v: topic %s has id %x", a, tp.Topic, id.ID)
				}
			}
		}
	}
}

// Native strings are UTF-8: a heartbeat with another string is refused,
// naming the field, a describe of such a group id is INVALID_GROUP_ID, and
// a client id is shown as Java decodes it.
func TestConsumerStringsNotUTF8(t *testing.T) {
	s := startConsumerServer(t, nil)
	m := s.member(t, "g", "m-\xff")
	if r := m.send(0); r.ErrorCode != kerr.InvalidRequest.Code || r.ErrorMessage == nil || *r.ErrorMessage != "MemberId is not valid UTF-8." {
		t.Fatalf("member id not UTF-8: %+v", r)
	}
	m.id = "m-1"
	m.c.fmt = kmsg.NewRequestFormatter(kmsg.FormatterClientID("client-\xff"))
	m.beat()
	gs := s.describe(t, m.c, 1, "g", "g-\xff")
	if gs[0].ErrorCode != 0 || len(gs[0].Members) != 1 || gs[0].Members[0].ClientID != "client-\uFFFD" || gs[1].ErrorCode != kerr.InvalidGroupID.Code {
		t.Fatalf("describe: %+v", gs)
	}
}
