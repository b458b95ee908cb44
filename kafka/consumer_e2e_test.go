package kafka

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/actors"
	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/raftfsm"
	"github.com/cohort-coord/cohort/security"
)

// consumerServer is a listener on 127.0.0.1 over a real group service
// (actors, in memory) whose consumer groups assign from the listener's
// catalog: topic "orders" with 4 partitions and "audit" with 2.
type consumerServer struct {
	l      *Listener
	topics *catalog.Catalog
	orders [16]byte // topic ids
	audit  [16]byte
}

func startConsumerServer(t *testing.T, mod func(*Config)) *consumerServer {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	cat := catalog.New()
	s := &consumerServer{topics: cat, orders: catalog.NewTopicID(), audit: catalog.NewTopicID()}
	for _, c := range []catalog.CreateTopic{{Name: "orders", ID: s.orders, Partitions: 4}, {Name: "audit", ID: s.audit, Partitions: 2}} {
		if err := cat.Apply(c); err != nil {
			t.Fatal(err)
		}
	}
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	gcfg := coordinator.DefaultConfig()
	gcfg.InitialRebalanceDelay = 0 // a classic join completes at once
	svc, err := actors.Start(system, actors.Options{Config: gcfg, Store: raftfsm.NewMemoryStore(), Logger: quiet, Topics: cat.Partitions})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Addr, cfg.NodeID = "127.0.0.1:0", 1
	if mod != nil {
		mod(&cfg)
	}
	l, err := New(cfg, svc, cat, quiet)
	if err != nil {
		t.Fatal(err)
	}
	s.l = l
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		svc.Stop()
		system.Shutdown()
	})
	return s
}

// kafkaMember is a consumer-protocol member as a client keeps it, over its
// own connection.
type kafkaMember struct {
	t     *testing.T
	c     *rawClient
	group string
	id    string
	epoch int32
	owned map[[16]byte][]int32 // by topic id
}

func (s *consumerServer) member(t *testing.T, group, id string) *kafkaMember {
	return &kafkaMember{t: t, c: dial(t, s.l.Addr()), group: group, id: id}
}

// authed is a connection authenticated (SASL PLAIN) as user.
func (s *consumerServer) authed(t *testing.T, user, pass string) *rawClient {
	t.Helper()
	c := dial(t, s.l.Addr())
	handshake(t, c, 1, security.MechanismPlain)
	if r := c.do(&kmsg.SASLAuthenticateRequest{Version: 2, SASLAuthBytes: plainToken(user, pass)}).(*kmsg.SASLAuthenticateResponse); r.ErrorCode != 0 {
		t.Fatalf("authenticate %s: %+v", user, r)
	}
	return c
}

// beat sends the member's heartbeat (a full join at epoch 0, else its epoch
// and what it owns) and adopts the answer as a client does.
func (m *kafkaMember) beat() *kmsg.ConsumerGroupHeartbeatResponse {
	m.t.Helper()
	r := m.send(m.epoch)
	if r.ErrorCode != 0 {
		m.t.Fatalf("%s at epoch %d: error %d %v", m.id, m.epoch, r.ErrorCode, r.ErrorMessage)
	}
	if r.MemberID == nil || *r.MemberID != m.id {
		m.t.Fatalf("%s: answered member id %v", m.id, r.MemberID)
	}
	m.epoch = r.MemberEpoch
	if r.Assignment != nil {
		m.owned = map[[16]byte][]int32{}
		for _, tp := range r.Assignment.Topics {
			m.owned[tp.TopicID] = slices.Sorted(slices.Values(tp.Partitions))
		}
	}
	return r
}

func (m *kafkaMember) send(epoch int32) *kmsg.ConsumerGroupHeartbeatResponse {
	m.t.Helper()
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.SetVersion(1)
	req.Group, req.MemberID, req.MemberEpoch = m.group, m.id, epoch
	if epoch == 0 {
		req.RebalanceTimeoutMillis, req.SubscribedTopicNames = 30_000, []string{"orders", "audit"}
	}
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	for id, parts := range m.owned {
		req.Topics = append(req.Topics, owned(id, parts...))
	}
	if epoch < 0 {
		req.Topics = nil
	}
	return m.c.do(req).(*kmsg.ConsumerGroupHeartbeatResponse)
}

func (s *consumerServer) describe(t *testing.T, c *rawClient, v int16, groups ...string) []kmsg.ConsumerGroupDescribeResponseGroup {
	t.Helper()
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.SetVersion(v)
	req.Groups = groups
	r := c.do(req).(*kmsg.ConsumerGroupDescribeResponse)
	if len(r.Groups) != len(groups) {
		t.Fatalf("described %d groups, asked %d", len(r.Groups), len(groups))
	}
	return r.Groups
}

// A consumer group formed over Kafka's wire: epochs, assignments named by
// topic id, one owner per partition at every answer, the description, the
// listing by type, commits at the member epoch, and a leave.
func TestConsumerGroupOverTheWire(t *testing.T) {
	s := startConsumerServer(t, nil)
	a, b := s.member(t, "billing", "member-a"), s.member(t, "billing", "member-b")
	ra := a.beat()
	if a.epoch != 1 || ra.HeartbeatIntervalMillis != 5000 || ra.Assignment == nil {
		t.Fatalf("first join: %+v", ra)
	}
	all := map[[16]byte][]int32{s.orders: {0, 1, 2, 3}, s.audit: {0, 1}}
	if !ownsExactly(a.owned, all) {
		t.Fatalf("first member owns %v, want every partition (orders %x, audit %x)", a.owned, s.orders, s.audit)
	}
	members := []*kafkaMember{a, b}
	for round := 0; ; round++ {
		if round == 10 {
			t.Fatal("the group did not become Stable in 10 rounds of heartbeats")
		}
		for _, m := range members {
			m.beat()
			checkOneOwner(t, members, all)
		}
		if g := s.describe(t, a.c, 1, "billing")[0]; g.State == "Stable" {
			break
		}
	}
	if a.epoch != 2 || b.epoch != 2 || len(a.owned[s.orders])+len(a.owned[s.audit]) != 3 || len(b.owned[s.orders])+len(b.owned[s.audit]) != 3 {
		t.Fatalf("stable: a at %d owns %v, b at %d owns %v", a.epoch, a.owned, b.epoch, b.owned)
	}
	merged := map[[16]byte][]int32{}
	for _, m := range members {
		for id, parts := range m.owned {
			merged[id] = slices.Sorted(slices.Values(append(merged[id], parts...)))
		}
	}
	if !ownsExactly(merged, all) {
		t.Fatalf("the members own %v together, want %v", merged, all)
	}

	for _, v := range []int16{0, 1} {
		g := s.describe(t, a.c, v, "billing")[0]
		wantType := int8(-1)
		if v >= 1 {
			wantType = 1
		}
		if g.ErrorCode != 0 || g.Epoch != 2 || g.AssignmentEpoch != 2 || g.AssignorName != "uniform" || len(g.Members) != 2 || g.AuthorizedOperations != -1<<31 {
			t.Fatalf("v%d describe: %+v", v, g)
		}
		for _, dm := range g.Members {
			m := a
			if dm.MemberID == b.id {
				m = b
			}
			if dm.MemberEpoch != 2 || dm.MemberType != wantType || dm.ClientID != "test-client" || dm.ClientHost != "/127.0.0.1" ||
				!slices.Equal(dm.SubscribedTopics, []string{"audit", "orders"}) && !slices.Equal(dm.SubscribedTopics, []string{"orders", "audit"}) {
				t.Fatalf("v%d member %+v", v, dm)
			}
			got := map[[16]byte][]int32{}
			for _, tp := range dm.Assignment.TopicPartitions {
				if want := map[[16]byte]string{s.orders: "orders", s.audit: "audit"}[tp.TopicID]; tp.Topic != want {
					t.Fatalf("v%d member %s: topic %q with id %x", v, dm.MemberID, tp.Topic, tp.TopicID)
				}
				got[tp.TopicID] = slices.Sorted(slices.Values(tp.Partitions))
			}
			if !ownsExactly(got, m.owned) {
				t.Fatalf("v%d member %s described with %v, owns %v", v, dm.MemberID, got, m.owned)
			}
		}
	}

	// ListGroups v5 filters by type and reports it.
	for filter, want := range map[string]int{"consumer": 1, "classic": 0} {
		r := a.c.do(&kmsg.ListGroupsRequest{Version: 5, TypesFilter: []string{filter}}).(*kmsg.ListGroupsResponse)
		if len(r.Groups) != want || want == 1 && (r.Groups[0].Group != "billing" || r.Groups[0].GroupType != "consumer" || r.Groups[0].GroupState != "Stable") {
			t.Fatalf("groups of type %s: %+v", filter, r.Groups)
		}
	}

	// OffsetCommit v9 carries the member epoch: the member's own commits,
	// and a commit at an epoch the member is not at.
	var part int32 = -1
	for _, p := range a.owned[s.orders] {
		part = p
	}
	if part < 0 {
		t.Fatalf("a owns no partition of orders: %v", a.owned)
	}
	commit := func(epoch int32) int16 {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.SetVersion(9)
		req.Group, req.Generation, req.MemberID = "billing", epoch, a.id
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "orders"
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = part, 42
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return a.c.do(req).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
	}
	if code := commit(a.epoch); code != 0 {
		t.Fatalf("commit at the member epoch: %d", code)
	}
	if code := commit(a.epoch + 1); code != kerr.StaleMemberEpoch.Code {
		t.Fatalf("commit at a later epoch: %d, want STALE_MEMBER_EPOCH", code)
	}

	// OffsetFetch v9 names the member and its epoch (the native request
	// does not carry them yet: the group does not check them).
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.SetVersion(9)
	fg := kmsg.NewOffsetFetchRequestGroup()
	fg.Group, fg.MemberID, fg.MemberEpoch = "billing", kmsg.StringPtr(a.id), a.epoch
	ft := kmsg.NewOffsetFetchRequestGroupTopic()
	ft.Topic, ft.Partitions = "orders", []int32{part}
	fg.Topics = append(fg.Topics, ft)
	fetch.Groups = append(fetch.Groups, fg)
	if r := a.c.do(fetch).(*kmsg.OffsetFetchResponse); len(r.Groups) != 1 || r.Groups[0].ErrorCode != 0 || r.Groups[0].Topics[0].Partitions[0].Offset != 42 {
		t.Fatalf("offset fetch v9: %+v", r.Groups)
	}

	// a leaves: b is given everything, at a new epoch.
	if r := a.send(-1); r.ErrorCode != 0 || r.MemberID == nil || *r.MemberID != a.id || r.MemberEpoch != -1 || r.Assignment != nil {
		t.Fatalf("leave: %+v", r)
	}
	for range 3 {
		b.beat()
	}
	if b.epoch != 3 || !ownsExactly(b.owned, all) {
		t.Fatalf("after a left: b at %d owns %v", b.epoch, b.owned)
	}
	if g := s.describe(t, b.c, 1, "billing")[0]; g.Epoch != 3 || len(g.Members) != 1 || g.Members[0].MemberID != b.id {
		t.Fatalf("after a left: %+v", g)
	}
}

// The group's refusals reach the client with Kafka's codes and messages.
func TestConsumerGroupErrorsOverTheWire(t *testing.T) {
	s := startConsumerServer(t, nil)
	a := s.member(t, "payments", "member-a")
	if r := a.send(3); r.ErrorCode != kerr.GroupIDNotFound.Code || r.ErrorMessage == nil || r.MemberID != nil || r.MemberEpoch != 0 {
		t.Fatalf("heartbeat to a group nobody joined: %+v", r)
	}
	a.beat()
	if r := a.send(a.epoch + 1); r.ErrorCode != kerr.FencedMemberEpoch.Code || r.Assignment != nil {
		t.Fatalf("heartbeat ahead of the member's epoch: %+v", r)
	}
	x := s.member(t, "payments", "member-x")
	if r := x.send(1); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("heartbeat of an unknown member: %+v", r)
	}
	x.id = ""
	if r := x.send(0); r.ErrorCode != kerr.InvalidRequest.Code || r.ErrorMessage == nil || *r.ErrorMessage != "MemberId can't be empty." {
		t.Fatalf("v1 join without a member id: %+v", r)
	}
	gs := s.describe(t, a.c, 1, "payments", "nobody", "")
	if gs[0].ErrorCode != 0 || gs[0].Group != "payments" || gs[1].ErrorCode != kerr.GroupIDNotFound.Code || gs[1].Group != "nobody" ||
		gs[2].ErrorCode != kerr.InvalidGroupID.Code {
		t.Fatalf("describe: %+v", gs)
	}
	// A classic group is not a consumer group.
	join := kmsg.NewPtrJoinGroupRequest()
	join.SetVersion(3)
	join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis, join.ProtocolType = "classic-g", 10_000, 10_000, "consumer"
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", []byte{0, 0, 0, 0, 0, 0}
	join.Protocols = append(join.Protocols, p)
	if r := a.c.do(join).(*kmsg.JoinGroupResponse); r.ErrorCode != 0 {
		t.Fatalf("classic join: %+v", r)
	}
	if g := s.describe(t, a.c, 1, "classic-g")[0]; g.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("describe of a classic group: %+v", g)
	}
}

// ownsExactly reports whether got and want hold the same partitions of the
// same topics.
func ownsExactly(got, want map[[16]byte][]int32) bool {
	n := 0
	for id, parts := range got {
		if len(parts) == 0 {
			continue
		}
		n++
		if !slices.Equal(slices.Sorted(slices.Values(parts)), want[id]) {
			return false
		}
	}
	for _, parts := range want {
		if len(parts) > 0 {
			n--
		}
	}
	return n == 0
}

// checkOneOwner fails when two members own one partition, or a member owns
// one that does not exist.
func checkOneOwner(t *testing.T, members []*kafkaMember, all map[[16]byte][]int32) {
	t.Helper()
	type tp struct {
		id [16]byte
		p  int32
	}
	owner := map[tp]string{}
	for _, m := range members {
		for id, parts := range m.owned {
			for _, p := range parts {
				if !slices.Contains(all[id], p) {
					t.Fatalf("%s owns partition %d of topic id %x", m.id, p, id)
				}
				if prev, ok := owner[tp{id, p}]; ok {
					t.Fatalf("partition %d of topic id %x owned by %s and %s", p, id, prev, m.id)
				}
				owner[tp{id, p}] = m.id
			}
		}
	}
}

// Bad first heartbeats each get Kafka's error code, change nothing, and the
// node keeps serving on the same connection: an invalid regular
// expression, an unknown server assignor, a join without a rebalance
// timeout, a join that claims partitions, an epoch below -2, and a regular
// expression of 100,000 characters (INVALID_REGULAR_EXPRESSION: a regex
// costs every topic match time in proportion to its size).
func TestConsumerGroupBadHeartbeats(t *testing.T) {
	s := startConsumerServer(t, nil)
	c := dial(t, s.l.Addr())
	join := func() *kmsg.ConsumerGroupHeartbeatRequest {
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.SetVersion(1)
		req.Group, req.MemberID, req.RebalanceTimeoutMillis = "bad", "m1", 30_000
		req.SubscribedTopicNames = []string{"orders"}
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		return req
	}
	huge := strings.Repeat("(orders)|", 11_111) + "x"
	cases := []struct {
		name string
		mod  func(*kmsg.ConsumerGroupHeartbeatRequest)
		code int16
	}{
		{"invalid regex", func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.SubscribedTopicNames, r.SubscribedTopicRegex = nil, kmsg.StringPtr("orders(")
		}, kerr.InvalidRegularExpression.Code},
		{"unknown assignor", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = kmsg.StringPtr("sticky") }, kerr.UnsupportedAssignor.Code},
		{"no rebalance timeout", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.RebalanceTimeoutMillis = -1 }, kerr.InvalidRequest.Code},
		{"join claiming partitions", func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{owned(s.orders, 0)}
		}, kerr.InvalidRequest.Code},
		{"null owned partitions", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.Topics = nil }, kerr.InvalidRequest.Code},
		{"epoch -3", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = -3 }, kerr.InvalidRequest.Code},
		{"blank instance id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.InstanceID = kmsg.StringPtr(" ") }, kerr.InvalidRequest.Code},
	}
	for _, tc := range cases {
		req := join()
		tc.mod(req)
		r := c.do(req).(*kmsg.ConsumerGroupHeartbeatResponse)
		if r.ErrorCode != tc.code || r.ErrorMessage == nil || r.MemberEpoch != 0 || r.Assignment != nil {
			t.Errorf("%s: error %d %v epoch %d, want %d", tc.name, r.ErrorCode, r.ErrorMessage, r.MemberEpoch, tc.code)
		}
	}
	req := join()
	req.SubscribedTopicNames, req.SubscribedTopicRegex = nil, &huge
	if r := c.do(req).(*kmsg.ConsumerGroupHeartbeatResponse); r.ErrorCode != kerr.InvalidRegularExpression.Code || len(*r.ErrorMessage) > 300 {
		t.Errorf("a 100,000-character regex: error %d %v", r.ErrorCode, r.ErrorMessage)
	}
	// None of them changed the group: a valid join is its first member.
	ok := join()
	ok.MemberID = "m2"
	r := c.do(ok).(*kmsg.ConsumerGroupHeartbeatResponse)
	if r.ErrorCode != 0 || r.MemberEpoch != 1 {
		t.Fatalf("valid join after the bad ones: error %d %v epoch %d", r.ErrorCode, r.ErrorMessage, r.MemberEpoch)
	}
}
