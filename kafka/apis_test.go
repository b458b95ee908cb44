package kafka

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sampleRequest builds a valid request of every served API for the walk test.
func sampleRequest(key, v int16) kmsg.Request {
	str := kmsg.StringPtr
	switch key {
	case 0:
		r := kmsg.NewPtrProduceRequest()
		r.Acks = 1
		t := kmsg.NewProduceRequestTopic()
		t.Topic = "t"
		p := kmsg.NewProduceRequestTopicPartition()
		t.Partitions = append(t.Partitions, p)
		r.Topics = append(r.Topics, t)
		return r
	case 1:
		r := kmsg.NewPtrFetchRequest()
		r.MaxWaitMillis = 1
		t := kmsg.NewFetchRequestTopic()
		t.Topic = "t"
		p := kmsg.NewFetchRequestTopicPartition()
		p.FetchOffset = 5
		t.Partitions = append(t.Partitions, p)
		r.Topics = append(r.Topics, t)
		return r
	case 2:
		r := kmsg.NewPtrListOffsetsRequest()
		t := kmsg.NewListOffsetsRequestTopic()
		t.Topic = "t"
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Timestamp = -1
		t.Partitions = append(t.Partitions, p)
		r.Topics = append(r.Topics, t)
		return r
	case 3:
		r := kmsg.NewPtrMetadataRequest()
		for _, n := range []string{"t", fmt.Sprintf("auto-%d", v)} {
			t := kmsg.NewMetadataRequestTopic()
			t.Topic = str(n)
			r.Topics = append(r.Topics, t)
		}
		r.AllowAutoTopicCreation = true
		return r
	case 8:
		r := kmsg.NewPtrOffsetCommitRequest()
		r.Group, r.MemberID = "g", "m-1"
		t := kmsg.NewOffsetCommitRequestTopic()
		t.Topic = "t"
		for _, part := range []int32{0, 99} {
			p := kmsg.NewOffsetCommitRequestTopicPartition()
			p.Partition, p.Offset = part, 10
			t.Partitions = append(t.Partitions, p)
		}
		r.Topics = append(r.Topics, t)
		return r
	case 9:
		r := kmsg.NewPtrOffsetFetchRequest()
		if v >= 8 {
			g := kmsg.NewOffsetFetchRequestGroup()
			g.Group = "g"
			t := kmsg.NewOffsetFetchRequestGroupTopic()
			t.Topic, t.Partitions = "t", []int32{0}
			g.Topics = append(g.Topics, t)
			r.Groups = append(r.Groups, g)
			return r
		}
		r.Group = "g"
		t := kmsg.NewOffsetFetchRequestTopic()
		t.Topic, t.Partitions = "t", []int32{0}
		r.Topics = append(r.Topics, t)
		return r
	case 10:
		r := kmsg.NewPtrFindCoordinatorRequest()
		r.CoordinatorKey = "g"
		r.CoordinatorKeys = []string{"g", "h"}
		return r
	case 11:
		r := kmsg.NewPtrJoinGroupRequest()
		r.Group, r.SessionTimeoutMillis, r.RebalanceTimeoutMillis, r.ProtocolType = "g", 10000, 10000, "consumer"
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", []byte{0, 1}
		r.Protocols = append(r.Protocols, p)
		return r
	case 12:
		r := kmsg.NewPtrHeartbeatRequest()
		r.Group, r.Generation, r.MemberID = "g", 1, "m-1"
		return r
	case 13:
		r := kmsg.NewPtrLeaveGroupRequest()
		r.Group, r.MemberID = "g", "m-1"
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID = "m-1"
		r.Members = append(r.Members, m)
		return r
	case 14:
		r := kmsg.NewPtrSyncGroupRequest()
		r.Group, r.Generation, r.MemberID = "g", 1, "m-1"
		r.ProtocolType, r.Protocol = str("consumer"), str("range")
		return r
	case 15:
		r := kmsg.NewPtrDescribeGroupsRequest()
		r.Groups = []string{"g"}
		return r
	case 16:
		return kmsg.NewPtrListGroupsRequest()
	case 18:
		r := kmsg.NewPtrApiVersionsRequest()
		r.ClientSoftwareName, r.ClientSoftwareVersion = "test", "1"
		return r
	case 19:
		r := kmsg.NewPtrCreateTopicsRequest()
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic, t.NumPartitions, t.ReplicationFactor = fmt.Sprintf("ct-%d", v), 2, 1
		r.Topics = append(r.Topics, t)
		return r
	case 20:
		r := kmsg.NewPtrDeleteTopicsRequest()
		name := fmt.Sprintf("ct-%d", v)
		r.TopicNames = []string{name}
		t := kmsg.NewDeleteTopicsRequestTopic()
		t.Topic = str(name)
		r.Topics = append(r.Topics, t)
		return r
	case 37:
		// Grows t (3 partitions) by one per version walked.
		r := kmsg.NewPtrCreatePartitionsRequest()
		t := kmsg.NewCreatePartitionsRequestTopic()
		t.Topic, t.Count = "t", 4+int32(v)
		r.Topics = append(r.Topics, t)
		return r
	case 42:
		r := kmsg.NewPtrDeleteGroupsRequest()
		r.Groups = []string{"g"}
		return r
	case 17:
		r := kmsg.NewPtrSASLHandshakeRequest()
		r.Mechanism = "PLAIN"
		return r
	case 36:
		return kmsg.NewPtrSASLAuthenticateRequest()
	case 29:
		r := kmsg.NewPtrDescribeACLsRequest()
		r.ResourceType, r.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
		r.Operation, r.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
		return r
	case 30:
		r := kmsg.NewPtrCreateACLsRequest()
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = kmsg.ACLResourceTypeGroup, "g", kmsg.ACLResourcePatternTypeLiteral
		c.Principal, c.Host, c.Operation, c.PermissionType = "User:a", "*", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow
		r.Creations = append(r.Creations, c)
		return r
	case 31:
		r := kmsg.NewPtrDeleteACLsRequest()
		f := kmsg.NewDeleteACLsRequestFilter()
		f.ResourceType, f.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
		f.Operation, f.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
		r.Filters = append(r.Filters, f)
		return r
	case 50:
		return kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
	case 51:
		return kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	case 68:
		// A join: a member id (required from v1), epoch 0, a rebalance
		// timeout, a subscription and no owned partitions.
		r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		r.Group, r.MemberID, r.RebalanceTimeoutMillis = "g", "m-1", 60000
		r.SubscribedTopicNames, r.Topics = []string{"t"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		return r
	case 69:
		r := kmsg.NewPtrConsumerGroupDescribeRequest()
		r.Groups = []string{"g"}
		return r
	case 47:
		r := kmsg.NewPtrOffsetDeleteRequest()
		r.Group = "g"
		t := kmsg.NewOffsetDeleteRequestTopic()
		t.Topic = "t"
		t.Partitions = append(t.Partitions, kmsg.NewOffsetDeleteRequestTopicPartition())
		r.Topics = append(r.Topics, t)
		return r
	}
	return nil
}

// advertisedAPIs is how many API keys ApiVersions lists.
const advertisedAPIs = 28

// TestWalkAdvertisedVersions sends every API at every version ApiVersions
// advertises and decodes the answer with kmsg at that version.
func TestWalkAdvertisedVersions(t *testing.T) {
	s := startServer(t, nil, nil)
	c := dial(t, s.l.Addr())
	av := c.do(&kmsg.ApiVersionsRequest{Version: 3}).(*kmsg.ApiVersionsResponse)
	if av.ErrorCode != 0 || len(av.ApiKeys) != advertisedAPIs {
		t.Fatalf("ApiVersions: error %d, %d keys", av.ErrorCode, len(av.ApiKeys))
	}
	walked := 0
	for _, k := range av.ApiKeys {
		for v := k.MinVersion; v <= k.MaxVersion; v++ {
			req := sampleRequest(k.ApiKey, v)
			if req == nil {
				t.Fatalf("no sample for advertised api %d", k.ApiKey)
			}
			req.SetVersion(v)
			resp := c.do(req)
			checkAnswer(t, k.ApiKey, v, resp)
			walked++
		}
	}
	if walked < 120 {
		t.Fatalf("walked only %d api versions", walked)
	}
}

func checkAnswer(t *testing.T, key, v int16, resp kmsg.Response) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s v%d: %s", kmsg.NameForKey(key), v, fmt.Sprintf(format, args...))
	}
	switch r := resp.(type) {
	case *kmsg.ProduceResponse:
		if len(r.Topics) != 1 || r.Topics[0].Partitions[0].ErrorCode != kerr.InvalidRequest.Code {
			fail("want INVALID_REQUEST, got %+v", r.Topics)
		}
	case *kmsg.FetchResponse:
		p := r.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || p.HighWatermark != 5 || len(p.RecordBatches) != 0 {
			fail("partition %+v", p)
		}
	case *kmsg.ListOffsetsResponse:
		p := r.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || (v == 0 && (len(p.OldStyleOffsets) != 1 || p.OldStyleOffsets[0] != 0)) || (v > 0 && p.Offset != 0) {
			fail("partition %+v", p)
		}
	case *kmsg.MetadataResponse:
		if len(r.Brokers) != 1 || r.Brokers[0].NodeID != 1 || len(r.Topics) != 2 {
			fail("brokers %+v topics %d", r.Brokers, len(r.Topics))
			return
		}
		if r.Topics[0].ErrorCode != 0 || len(r.Topics[0].Partitions) != 3 || r.Topics[1].ErrorCode != 0 || len(r.Topics[1].Partitions) != 1 {
			fail("topics %+v", r.Topics)
		}
	case *kmsg.OffsetCommitResponse:
		ps := r.Topics[0].Partitions
		if len(ps) != 2 || ps[0].ErrorCode != 0 || ps[1].ErrorCode != kerr.UnknownTopicOrPartition.Code {
			fail("partitions %+v", ps)
		}
	case *kmsg.OffsetFetchResponse:
		var off int64
		if v >= 8 {
			off = r.Groups[0].Topics[0].Partitions[0].Offset
		} else {
			off = r.Topics[0].Partitions[0].Offset
		}
		if off != 7 {
			fail("offset %d", off)
		}
	case *kmsg.FindCoordinatorResponse:
		if v >= 4 {
			if len(r.Coordinators) != 2 || r.Coordinators[1].Key != "h" || r.Coordinators[1].NodeID != 1 {
				fail("coordinators %+v", r.Coordinators)
			}
		} else if r.ErrorCode != 0 || r.NodeID != 1 || r.Host != "127.0.0.1" {
			fail("%+v", r)
		}
	case *kmsg.JoinGroupResponse:
		if r.ErrorCode != 0 || r.Generation != 1 || r.MemberID != "m-1" {
			fail("%+v", r)
		}
	case *kmsg.HeartbeatResponse:
		if r.ErrorCode != 0 {
			fail("error %d", r.ErrorCode)
		}
	case *kmsg.LeaveGroupResponse:
		if r.ErrorCode != 0 || (v >= 3 && len(r.Members) != 1) {
			fail("%+v", r)
		}
	case *kmsg.SyncGroupResponse:
		if r.ErrorCode != 0 || len(r.MemberAssignment) != 2 {
			fail("%+v", r)
		}
	case *kmsg.DescribeGroupsResponse:
		if len(r.Groups) != 1 || r.Groups[0].State != "Stable" || len(r.Groups[0].Members) != 1 {
			fail("%+v", r.Groups)
		}
		if gen, ok := GenerationFromTags(r.Groups[0].UnknownTags); v >= 5 && (!ok || gen != 4) {
			fail("generation tag %d %v", gen, ok)
		}
	case *kmsg.ListGroupsResponse:
		if len(r.Groups) != 1 || r.Groups[0].Group != "g" {
			fail("%+v", r.Groups)
		}
	case *kmsg.ApiVersionsResponse:
		if r.ErrorCode != 0 || len(r.ApiKeys) != advertisedAPIs {
			fail("%d keys", len(r.ApiKeys))
		}
	case *kmsg.CreateTopicsResponse:
		if r.Topics[0].ErrorCode != 0 {
			fail("%+v", r.Topics)
		}
	case *kmsg.DeleteTopicsResponse:
		if r.Topics[0].ErrorCode != 0 {
			fail("%+v", r.Topics)
		}
	case *kmsg.CreatePartitionsResponse:
		if len(r.Topics) != 1 || r.Topics[0].Topic != "t" || r.Topics[0].ErrorCode != 0 || r.Topics[0].ErrorMessage != nil {
			fail("%+v", r.Topics)
		}
	case *kmsg.DeleteGroupsResponse:
		if len(r.Groups) != 1 || r.Groups[0].ErrorCode != 0 {
			fail("%+v", r.Groups)
		}
	case *kmsg.OffsetDeleteResponse:
		if r.ErrorCode != 0 || r.Topics[0].Partitions[0].ErrorCode != 0 {
			fail("%+v", r)
		}
	case *kmsg.ConsumerGroupHeartbeatResponse:
		if r.ErrorCode != 0 || r.MemberID == nil || *r.MemberID != "m-1" || r.MemberEpoch != 1 || r.Assignment == nil ||
			len(r.Assignment.Topics) != 1 || r.Assignment.Topics[0].TopicID == ([16]byte{}) {
			fail("%+v", r)
		}
	case *kmsg.ConsumerGroupDescribeResponse:
		wantType := int8(-1)
		if v >= 1 {
			wantType = 1
		}
		if len(r.Groups) != 1 || r.Groups[0].ErrorCode != 0 || r.Groups[0].State != "Stable" || len(r.Groups[0].Members) != 1 ||
			r.Groups[0].Members[0].MemberType != wantType {
			fail("%+v", r.Groups)
		}
	// Without SASL and an authorizer the security APIs refuse, as Kafka's do.
	case *kmsg.SASLHandshakeResponse:
		if r.ErrorCode != kerr.IllegalSaslState.Code {
			fail("%+v", r)
		}
	case *kmsg.SASLAuthenticateResponse:
		if r.ErrorCode != kerr.IllegalSaslState.Code {
			fail("%+v", r)
		}
	case *kmsg.DescribeACLsResponse:
		if r.ErrorCode != kerr.SecurityDisabled.Code {
			fail("%+v", r)
		}
	case *kmsg.CreateACLsResponse:
		if len(r.Results) != 1 || r.Results[0].ErrorCode != kerr.SecurityDisabled.Code {
			fail("%+v", r)
		}
	case *kmsg.DeleteACLsResponse:
		if len(r.Results) != 1 || r.Results[0].ErrorCode != kerr.SecurityDisabled.Code {
			fail("%+v", r)
		}
	case *kmsg.DescribeUserSCRAMCredentialsResponse:
		if r.ErrorCode != kerr.SecurityDisabled.Code {
			fail("%+v", r)
		}
	case *kmsg.AlterUserSCRAMCredentialsResponse:
		if len(r.Results) != 0 {
			fail("%+v", r)
		}
	default:
		fail("unexpected %T", resp)
	}
}

func TestApiVersionsUnsupportedVersionFallsBackToV0(t *testing.T) {
	s := startServer(t, nil, nil)
	c := dial(t, s.l.Addr())
	// The answer to an unknown ApiVersions version is a v0 answer.
	corr := c.send(&kmsg.ApiVersionsRequest{Version: 4})
	resp, err := c.recv(&kmsg.ApiVersionsRequest{Version: 0}, corr)
	if err != nil {
		t.Fatal(err)
	}
	r := resp.(*kmsg.ApiVersionsResponse)
	if r.ErrorCode != kerr.UnsupportedVersion.Code || len(r.ApiKeys) != advertisedAPIs {
		t.Fatalf("error %d, %d keys", r.ErrorCode, len(r.ApiKeys))
	}
	// The connection stays usable.
	if r := c.do(&kmsg.ApiVersionsRequest{Version: 0}).(*kmsg.ApiVersionsResponse); r.ErrorCode != 0 {
		t.Fatalf("error %d", r.ErrorCode)
	}
}

func TestUnsupportedVersionAndAPI(t *testing.T) {
	s := startServer(t, nil, nil)
	c := dial(t, s.l.Addr())
	// Fetch v13 is beyond what we serve: UNSUPPORTED_VERSION at top level.
	f := sampleRequest(1, 13)
	f.SetVersion(13)
	if r := c.do(f).(*kmsg.FetchResponse); r.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("fetch v13: error %d", r.ErrorCode)
	}
	// InitProducerID is not served at all.
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.SetVersion(1)
	if r := c.do(ip).(*kmsg.InitProducerIDResponse); r.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("init producer id: error %d", r.ErrorCode)
	}
	if s.l.Stats().UnsupportedVersions != 2 || s.l.Stats().BadConnections != 0 {
		t.Fatalf("stats %+v", s.l.Stats())
	}
	if r := c.do(&kmsg.ApiVersionsRequest{Version: 3}).(*kmsg.ApiVersionsResponse); r.ErrorCode != 0 {
		t.Fatal("connection unusable after UNSUPPORTED_VERSION")
	}
}

// The ownership guard is advertised as a supported feature from ApiVersions
// v3 on (the first version with the field), and only when it is on.
func TestApiVersionsAdvertisesExclusiveOwnership(t *testing.T) {
	for _, on := range []bool{true, false} {
		s := startServer(t, nil, func(c *Config) { c.ExclusiveOwnership, c.ConsumerProtocol = on, false })
		c := dial(t, s.l.Addr())
		for _, v := range []int16{0, 1, 2, 3} {
			r := c.do(&kmsg.ApiVersionsRequest{Version: v, ClientSoftwareName: "t", ClientSoftwareVersion: "1"}).(*kmsg.ApiVersionsResponse)
			var got []kmsg.ApiVersionsResponseSupportedFeature
			for _, f := range r.SupportedFeatures {
				got = append(got, kmsg.ApiVersionsResponseSupportedFeature{Name: f.Name, MinVersion: f.MinVersion, MaxVersion: f.MaxVersion})
			}
			var want []kmsg.ApiVersionsResponseSupportedFeature
			if on && v >= 3 {
				want = []kmsg.ApiVersionsResponseSupportedFeature{{Name: "cohort.exclusive-ownership", MinVersion: 1, MaxVersion: 1}}
			}
			if r.ErrorCode != 0 || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("guard %v, v%d: error %d, features %+v, want %+v", on, v, r.ErrorCode, got, want)
			}
		}
	}
}

// With the consumer group protocol on, ApiVersions v3+ finalizes Kafka's
// group.version feature at level 1, as a Kafka 4 broker does; off, it is
// not listed.
func TestApiVersionsGroupVersionFeature(t *testing.T) {
	for _, on := range []bool{true, false} {
		s := startServer(t, nil, func(c *Config) { c.ConsumerProtocol, c.ExclusiveOwnership = on, false })
		c := dial(t, s.l.Addr())
		for _, v := range []int16{2, 3} {
			r := c.do(&kmsg.ApiVersionsRequest{Version: v, ClientSoftwareName: "t", ClientSoftwareVersion: "1"}).(*kmsg.ApiVersionsResponse)
			finalized := ""
			for _, f := range r.FinalizedFeatures {
				finalized += fmt.Sprintf("%s=%d..%d ", f.Name, f.MinVersionLevel, f.MaxVersionLevel)
			}
			want := ""
			if on && v >= 3 {
				want = "group.version=1..1 "
			}
			if r.ErrorCode != 0 || finalized != want || (want != "" && r.FinalizedFeaturesEpoch < 0) {
				t.Fatalf("protocol %v, v%d: finalized %q epoch %d, want %q", on, v, finalized, r.FinalizedFeaturesEpoch, want)
			}
		}
	}
}
