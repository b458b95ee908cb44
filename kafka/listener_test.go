package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func TestJoinGroupTranslation(t *testing.T) {
	s := startServer(t, nil, nil)
	c := dial(t, s.l.Addr())

	// v0: no rebalance timeout on the wire; the session timeout bounds the call.
	j := sampleRequest(11, 0).(*kmsg.JoinGroupRequest)
	j.SetVersion(0)
	j.SessionTimeoutMillis = 6000
	if r := c.do(j).(*kmsg.JoinGroupResponse); r.ErrorCode != 0 || r.Protocol == nil || *r.Protocol != "range" {
		t.Fatalf("v0 answer %+v", r)
	}
	n := s.groups.last().(*grouppb.JoinGroupRequest)
	if n.ApiVersion != 0 || n.SessionTimeoutMs != 6000 || n.ClientHost != "/127.0.0.1" || n.ClientId != "test-client" || n.GroupInstanceId != nil {
		t.Fatalf("native %+v", n)
	}

	// v5: instance id travels; v8 reason travels.
	j = sampleRequest(11, 8).(*kmsg.JoinGroupRequest)
	j.SetVersion(8)
	j.InstanceID, j.Reason = kmsg.StringPtr("i-1"), kmsg.StringPtr("why")
	c.do(j)
	n = s.groups.last().(*grouppb.JoinGroupRequest)
	if n.GetGroupInstanceId() != "i-1" || n.GetReason() != "why" || n.ApiVersion != 8 || n.RebalanceTimeoutMs != 10000 || len(n.Protocols) != 1 {
		t.Fatalf("native %+v", n)
	}
}

func TestSyncGroupV5NullProtocolIsInconsistent(t *testing.T) {
	s := startServer(t, nil, nil)
	c := dial(t, s.l.Addr())
	sg := sampleRequest(14, 5).(*kmsg.SyncGroupRequest)
	sg.SetVersion(5)
	sg.Protocol = nil
	if r := c.do(sg).(*kmsg.SyncGroupResponse); r.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("error %d", r.ErrorCode)
	}
	if s.groups.count() != 0 {
		t.Fatal("request reached the group core")
	}
	// v4 has no protocol fields: null is fine.
	sg.SetVersion(4)
	if r := c.do(sg).(*kmsg.SyncGroupResponse); r.ErrorCode != 0 {
		t.Fatalf("v4 error %d", r.ErrorCode)
	}
}

func TestLeaveGroupOldVersionsAnswerTheMemberError(t *testing.T) {
	fg := &fakeGroups{fn: func(_ context.Context, req proto.Message) (proto.Message, error) {
		return &grouppb.LeaveGroupResponse{Members: []*grouppb.LeaveGroupMemberResponse{{MemberId: "m-1", ErrorCode: 25}}}, nil
	}}
	s := startServer(t, fg, nil)
	c := dial(t, s.l.Addr())
	for v := int16(0); v <= 5; v++ {
		lg := sampleRequest(13, v).(*kmsg.LeaveGroupRequest)
		lg.SetVersion(v)
		r := c.do(lg).(*kmsg.LeaveGroupResponse)
		if v < 3 && r.ErrorCode != 25 {
			t.Fatalf("v%d: top-level %d, want the member's 25", v, r.ErrorCode)
		}
		if v >= 3 && (r.ErrorCode != 0 || len(r.Members) != 1 || r.Members[0].ErrorCode != 25) {
			t.Fatalf("v%d: %+v", v, r)
		}
	}
	if n := fg.last().(*grouppb.LeaveGroupRequest); len(n.Members) != 1 || n.Members[0].MemberId != "m-1" {
		t.Fatalf("native %+v", n)
	}
}

func TestOffsetCommitUnknownPartitionsNeverReachTheCore(t *testing.T) {
	s := startServer(t, nil, nil)
	c := dial(t, s.l.Addr())
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.SetVersion(2)
	oc.Group, oc.Generation, oc.MemberID, oc.RetentionTimeMillis = "g", 3, "m", 60000
	for _, tn := range []string{"nope", "t"} {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = tn
		for _, p := range []int32{2, 3} {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.Metadata = p, 42, kmsg.StringPtr("md")
			rt.Partitions = append(rt.Partitions, rp)
		}
		oc.Topics = append(oc.Topics, rt)
	}
	r := c.do(oc).(*kmsg.OffsetCommitResponse)
	want := [][]int16{{3, 3}, {0, 3}}
	for i, rt := range r.Topics {
		for j, p := range rt.Partitions {
			if p.ErrorCode != want[i][j] {
				t.Fatalf("%s/%d: error %d, want %d", rt.Topic, p.Partition, p.ErrorCode, want[i][j])
			}
		}
	}
	n := s.groups.last().(*grouppb.OffsetCommitRequest)
	if len(n.Topics) != 1 || n.Topics[0].Name != "t" || len(n.Topics[0].Partitions) != 1 || n.Topics[0].Partitions[0].Partition != 2 ||
		n.RetentionTimeMs != 60000 || n.GenerationId != 3 || n.Topics[0].Partitions[0].GetMetadata() != "md" || n.Topics[0].Partitions[0].LeaderEpoch != -1 {
		t.Fatalf("native %+v", n)
	}

	// Only unknown partitions: no call at all.
	before := s.groups.count()
	oc.Topics = oc.Topics[:1]
	c.do(oc)
	if s.groups.count() != before {
		t.Fatal("call made for unknown partitions only")
	}
}

func TestCallErrorsBecomeRetriableCodes(t *testing.T) {
	// The groups do not answer a request sent to them that they fail:
	// the listener answers it at its bound.
	withAsyncBound(t, 50*time.Millisecond)
	fg := &fakeGroups{fn: func(ctx context.Context, req proto.Message) (proto.Message, error) {
		return nil, errors.New("coordinator unavailable")
	}}
	s := startServer(t, fg, nil)
	c := dial(t, s.l.Addr())
	for _, k := range []int16{8, 9, 11, 12, 13, 14, 15, 16, 42, 47} {
		for _, v := range []int16{0, 1, 2} {
			if k == 47 && v > 0 {
				continue
			}
			req := sampleRequest(k, v)
			req.SetVersion(v)
			code := int16(-2)
			switch r := c.do(req).(type) {
			case *kmsg.OffsetCommitResponse:
				code = r.Topics[0].Partitions[0].ErrorCode
			case *kmsg.OffsetFetchResponse:
				if v >= 2 {
					code = r.ErrorCode
				} else {
					code = r.Topics[0].Partitions[0].ErrorCode
				}
			case *kmsg.JoinGroupResponse:
				code = r.ErrorCode
				if r.Generation != -1 {
					t.Fatalf("join generation %d", r.Generation)
				}
			case *kmsg.HeartbeatResponse:
				code = r.ErrorCode
			case *kmsg.LeaveGroupResponse:
				code = r.ErrorCode
			case *kmsg.SyncGroupResponse:
				code = r.ErrorCode
			case *kmsg.DescribeGroupsResponse:
				code = r.Groups[0].ErrorCode
			case *kmsg.ListGroupsResponse:
				code = r.ErrorCode
			case *kmsg.DeleteGroupsResponse:
				code = r.Groups[0].ErrorCode
			case *kmsg.OffsetDeleteResponse:
				code = r.ErrorCode
			}
			if code != kerr.CoordinatorNotAvailable.Code {
				t.Fatalf("%s v%d: error %d, want COORDINATOR_NOT_AVAILABLE", kmsg.NameForKey(k), v, code)
			}
		}
	}
	if s.l.Stats().CallErrors == 0 || s.l.Stats().BadConnections != 0 {
		t.Fatalf("stats %+v", s.l.Stats())
	}
}

func TestJoinGroupDeadlineIsRebalanceTimeoutPlusMargin(t *testing.T) {
	got := make(chan time.Duration, 1)
	fg := &fakeGroups{fn: func(ctx context.Context, req proto.Message) (proto.Message, error) {
		d, _ := ctx.Deadline()
		got <- time.Until(d)
		return emptyAnswer(req), nil
	}}
	s := startServer(t, fg, nil)
	c := dial(t, s.l.Addr())
	j := sampleRequest(11, 4).(*kmsg.JoinGroupRequest)
	j.SetVersion(4)
	j.RebalanceTimeoutMillis = 120000
	c.do(j)
	if d := <-got; d < 120*time.Second || d > 120*time.Second+parkMargin {
		t.Fatalf("deadline in %v", d)
	}
	// A SyncGroup on the same connection gets the same bound.
	sg := sampleRequest(14, 4)
	sg.SetVersion(4)
	c.do(sg)
	if d := <-got; d < 120*time.Second || d > 120*time.Second+parkMargin {
		t.Fatalf("sync deadline in %v", d)
	}
}

func TestOffsetFetchMultiGroup(t *testing.T) {
	s := startServer(t, nil, nil)
	c := dial(t, s.l.Addr())
	of := kmsg.NewPtrOffsetFetchRequest()
	of.SetVersion(8)
	for _, g := range []string{"a", "b", "c"} {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = g
		if g != "c" { // c asks for all topics
			rt := kmsg.NewOffsetFetchRequestGroupTopic()
			rt.Topic, rt.Partitions = "t", []int32{0, 1}
			rg.Topics = append(rg.Topics, rt)
		}
		of.Groups = append(of.Groups, rg)
	}
	r := c.do(of).(*kmsg.OffsetFetchResponse)
	if len(r.Groups) != 3 || r.Groups[0].Group != "a" || r.Groups[2].Group != "c" || len(r.Groups[1].Topics[0].Partitions) != 2 || len(r.Groups[2].Topics) != 0 {
		t.Fatalf("%+v", r.Groups)
	}
	if s.groups.count() != 3 {
		t.Fatalf("%d calls", s.groups.count())
	}
	var all int
	s.groups.mu.Lock()
	for _, m := range s.groups.reqs {
		if m.(*grouppb.OffsetFetchRequest).AllTopics {
			all++
		}
	}
	s.groups.mu.Unlock()
	if all != 1 {
		t.Fatalf("%d all-topics requests", all)
	}
}

func TestMetadataAutoCreate(t *testing.T) {
	md := sampleRequest(3, 4).(*kmsg.MetadataRequest)
	md.SetVersion(4)
	// By default a request that does not allow creation creates too (what
	// librdkafka consumers send for the topics they subscribe to).
	s0 := startServer(t, nil, func(c *Config) { c.DefaultPartitions = 2 })
	md.AllowAutoTopicCreation = false
	r := dial(t, s0.l.Addr()).do(md).(*kmsg.MetadataResponse)
	if r.Topics[1].ErrorCode != 0 || len(r.Topics[1].Partitions) != 2 {
		t.Fatalf("default auto-create: %+v", r.Topics[1])
	}
	// Kafka's rule on request: only requests that allow it create.
	s := startServer(t, nil, func(c *Config) { c.DefaultPartitions = 4; c.AutoCreateOnlyWhenAllowed = true })
	c := dial(t, s.l.Addr())
	r = c.do(md).(*kmsg.MetadataResponse)
	if r.Topics[1].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("no auto-create: %+v", r.Topics[1])
	}
	md.AllowAutoTopicCreation = true
	r = c.do(md).(*kmsg.MetadataResponse)
	if r.Topics[1].ErrorCode != 0 || len(r.Topics[1].Partitions) != 4 {
		t.Fatalf("auto-create: %+v", r.Topics[1])
	}
	// Disabled in the config: never created.
	s2 := startServer(t, nil, func(c *Config) { c.AutoCreateTopics = false })
	c2 := dial(t, s2.l.Addr())
	md.SetVersion(1)
	r = c2.do(md).(*kmsg.MetadataResponse)
	if r.Topics[1].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("disabled: %+v", r.Topics[1])
	}
	// All topics (null list).
	md.Topics = nil
	if r = c2.do(md).(*kmsg.MetadataResponse); len(r.Topics) != 1 || *r.Topics[0].Topic != "t" {
		t.Fatalf("all topics: %+v", r.Topics)
	}
}

func TestCoordinatorFunc(t *testing.T) {
	s := startServer(t, nil, func(c *Config) {
		c.Coordinator = func(key string) (Broker, int16) {
			if key == "none" {
				return Broker{}, kerr.CoordinatorNotAvailable.Code
			}
			return Broker{NodeID: 7, Host: "leader", Port: 9999}, 0
		}
	})
	c := dial(t, s.l.Addr())
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.SetVersion(4)
	fc.CoordinatorKeys = []string{"g", "none"}
	r := c.do(fc).(*kmsg.FindCoordinatorResponse)
	if r.Coordinators[0].NodeID != 7 || r.Coordinators[0].Host != "leader" || r.Coordinators[1].ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("%+v", r.Coordinators)
	}
}

// TestPipelining sends many requests at once: a slow first request must not
// keep later ones from being processed, and answers come back in order.
// (DescribeGroups, answered by workers: heartbeats are answered on the
// reader, as the groups answer them without waiting.)
func TestPipelining(t *testing.T) {
	const n = 40
	release := make(chan struct{})
	var fast atomic.Int32
	fg := &fakeGroups{fn: func(ctx context.Context, req proto.Message) (proto.Message, error) {
		d := req.(*grouppb.DescribeGroupRequest)
		var i int32
		if _, err := fmt.Sscanf(d.GroupId, "g-%d", &i); err != nil {
			return nil, err
		}
		if i == 0 {
			// Held until every later request has been processed: only
			// possible if they are processed while this one is pending.
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		} else if fast.Add(1) == n-1 {
			close(release)
		}
		return &grouppb.DescribeGroupResponse{GroupId: d.GroupId, ErrorCode: i}, nil
	}}
	s := startServer(t, fg, nil)
	c := dial(t, s.l.Addr())
	var corrs []int32
	describe := func(i int) *kmsg.DescribeGroupsRequest {
		r := kmsg.NewPtrDescribeGroupsRequest()
		r.SetVersion(int16(i % 6))
		r.Groups = []string{fmt.Sprintf("g-%d", i)}
		return r
	}
	start := time.Now()
	for i := range n {
		corrs = append(corrs, c.send(describe(i)))
	}
	for i, corr := range corrs {
		resp, err := c.recv(describe(i), corr)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode; code != int16(i) {
			t.Fatalf("answer %d carries %d", i, code)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v: requests were not processed concurrently", d)
	}
}

func TestBadInputClosesOnlyThatConnection(t *testing.T) {
	s := startServer(t, nil, func(c *Config) { c.MaxRequestBytes = 1 << 16 })
	good := dial(t, s.l.Addr())
	cases := map[string][]byte{
		"garbage":    []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"oversized":  binary.BigEndian.AppendUint32(nil, 1<<20),
		"negative":   binary.BigEndian.AppendUint32(nil, 0xffffffff),
		"short":      {0, 0, 0, 2, 0, 18},
		"unknownKey": append(frame(0x7f00, 0, 1), 1, 2, 3),
		"badBody":    append(frame(11, 5, 1), 0xff, 0xff, 0xff),
		"badClient":  {0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0x7f, 0xff},
	}
	n := 0
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			c := dial(t, s.l.Addr())
			if _, err := c.nc.Write(b); err != nil {
				t.Fatal(err)
			}
			c.expectClosed()
			n++
		})
		// The other connection still works.
		if r := good.do(&kmsg.ApiVersionsRequest{Version: 3}).(*kmsg.ApiVersionsResponse); r.ErrorCode != 0 {
			t.Fatal("good connection broken")
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.l.Stats().BadConnections < uint64(n-1) && time.Now().Before(deadline) { // "garbage" may read as a huge frame: counted too
		time.Sleep(10 * time.Millisecond)
	}
	if got := s.l.Stats().BadConnections; got < uint64(n-1) {
		t.Fatalf("bad connections %d, want >= %d", got, n-1)
	}
}

// frame builds a request frame with a header only (empty client id) and
// room for a body to be appended; the size covers what follows later.
func frame(key, version int16, corr int32) []byte {
	b := binary.BigEndian.AppendUint32(nil, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 0)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4+3)) // 3 body bytes follow in the tests that use it
	return b
}

func TestServeStopsAndClosesConnections(t *testing.T) {
	parked := make(chan struct{})
	fg := &fakeGroups{fn: func(ctx context.Context, req proto.Message) (proto.Message, error) {
		close(parked)
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	s := startServer(t, fg, nil)
	c := dial(t, s.l.Addr())
	c.send(sampleRequest(11, 5))
	<-parked
	s.stop()
	c.expectClosed()
	if _, err := s.l.ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("listener not closed: Accept returned %v", err)
	}
}

// TestInlineHeartbeatsKeepAnswerOrder: heartbeats answered on the reader
// goroutine go straight to the output while nothing is queued ahead of them,
// and queue behind a parked JoinGroup otherwise; answers stay in request order.
func TestInlineHeartbeatsKeepAnswerOrder(t *testing.T) {
	const behind = 20
	release := make(chan struct{})
	var hbs atomic.Int32
	fg := &fakeGroups{fn: func(ctx context.Context, req proto.Message) (proto.Message, error) {
		switch r := req.(type) {
		case *grouppb.JoinGroupRequest:
			select { // parked until the heartbeats behind it were answered
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return emptyAnswer(r), nil
		case *grouppb.HeartbeatRequest:
			if hbs.Add(1) == behind+1 {
				close(release)
			}
			return &grouppb.HeartbeatResponse{ErrorCode: r.GenerationId}, nil
		}
		return emptyAnswer(req), nil
	}}
	s := startServer(t, fg, nil)
	c := dial(t, s.l.Addr())
	hb := func(gen int32) kmsg.Request {
		r := kmsg.NewPtrHeartbeatRequest()
		r.SetVersion(4)
		r.Group, r.Generation, r.MemberID = "g", gen, "m"
		return r
	}
	// Nothing ahead: answered directly.
	if code := c.do(hb(100)).(*kmsg.HeartbeatResponse).ErrorCode; code != 100 {
		t.Fatalf("first heartbeat answered %d", code)
	}
	join := kmsg.NewPtrJoinGroupRequest()
	join.SetVersion(7)
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = "g", "consumer", 10000, 10000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	reqs := []kmsg.Request{join}
	corrs := []int32{c.send(join)}
	for i := range behind + 1 {
		r := hb(int32(i))
		reqs, corrs = append(reqs, r), append(corrs, c.send(r))
	}
	for i, corr := range corrs {
		resp, err := c.recv(reqs[i], corr)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if i == 0 {
			if r := resp.(*kmsg.JoinGroupResponse); r.ErrorCode != 0 || r.MemberID != "m-1" {
				t.Fatalf("join answered %+v", r)
			}
		} else if code := resp.(*kmsg.HeartbeatResponse).ErrorCode; code != int16(i-1) {
			t.Fatalf("heartbeat %d answered %d", i-1, code)
		}
	}
	// The queue drained: answered directly again.
	if code := c.do(hb(7)).(*kmsg.HeartbeatResponse).ErrorCode; code != 7 {
		t.Fatalf("last heartbeat answered %d", code)
	}
}

// TestInlineHandlerPanicClosesOnlyThatConnection: a panic while answering a
// heartbeat on the reader goroutine is contained like any handler panic.
func TestInlineHandlerPanicClosesOnlyThatConnection(t *testing.T) {
	fg := &fakeGroups{fn: func(ctx context.Context, req proto.Message) (proto.Message, error) {
		if hb, ok := req.(*grouppb.HeartbeatRequest); ok && hb.MemberId == "boom" {
			panic("boom")
		}
		return emptyAnswer(req), nil
	}}
	s := startServer(t, fg, nil)
	var panics atomic.Int32
	s.l.onPanic = func(any) { panics.Add(1) }
	good, bad := dial(t, s.l.Addr()), dial(t, s.l.Addr())
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	hb.Group, hb.MemberID = "g", "boom"
	bad.send(hb)
	bad.expectClosed()
	if panics.Load() != 1 {
		t.Fatalf("%d panics seen", panics.Load())
	}
	hb.MemberID = "fine"
	if code := good.do(hb).(*kmsg.HeartbeatResponse).ErrorCode; code != 0 {
		t.Fatalf("other connection answered %d", code)
	}
}

// timedGroups is fakeGroups that takes call timeouts through CallWithin, and
// reports the bound of each request sent (Send) as the time left to its
// deadline.
type timedGroups struct {
	*fakeGroups
	timeouts chan time.Duration
}

func (g timedGroups) Send(req proto.Message, to coordinator.Answerer) {
	g.timeouts <- time.Until(to.(*pending).deadline)
	g.fakeGroups.Send(req, to)
}

func (g timedGroups) CallWithin(ctx context.Context, req proto.Message, timeout time.Duration) (proto.Message, error) {
	if _, ok := ctx.Deadline(); ok {
		return nil, errors.New("derived context passed along with a timeout")
	}
	g.timeouts <- timeout
	return g.fakeGroups.CallWithin(ctx, req, timeout)
}

// TestTimedGroupsGetTheCallBound: a request sent to the groups is bounded by
// its call's bound (the pending's deadline is that far off when it is sent).
func TestTimedGroupsGetTheCallBound(t *testing.T) {
	near := func(d, bound time.Duration) bool { return d <= bound && d > bound-5*time.Second }
	g := timedGroups{&fakeGroups{}, make(chan time.Duration, 1)}
	s := startServer(t, g, nil)
	c := dial(t, s.l.Addr())
	j := sampleRequest(11, 4).(*kmsg.JoinGroupRequest)
	j.SetVersion(4)
	j.RebalanceTimeoutMillis = 120000
	if r := c.do(j).(*kmsg.JoinGroupResponse); r.ErrorCode != 0 {
		t.Fatalf("join answered %d", r.ErrorCode)
	}
	if d := <-g.timeouts; !near(d, 120*time.Second+parkMargin) {
		t.Fatalf("join bound %v", d)
	}
	oc := sampleRequest(8, 8)
	oc.SetVersion(8)
	c.do(oc)
	if d := <-g.timeouts; !near(d, callTimeout) {
		t.Fatalf("commit bound %v", d)
	}
}

// TestCatalogChangesWithoutLeader: topic changes that find no Raft leader
// answer NOT_CONTROLLER (CreateTopics, DeleteTopics) and LEADER_NOT_AVAILABLE
// (Metadata auto-creation), which clients retry; one whose outcome is
// unknown answers REQUEST_TIMED_OUT.
func TestCatalogChangesWithoutLeader(t *testing.T) {
	cases := []struct {
		err                error
		create, deleteCode int16
	}{
		{fmt.Errorf("no leader: %w", coordinator.ErrStoreNotLeader), kerr.NotController.Code, kerr.NotController.Code},
		{fmt.Errorf("slow: %w", coordinator.ErrStoreTimeout), kerr.RequestTimedOut.Code, kerr.RequestTimedOut.Code},
	}
	for _, tc := range cases {
		s := startServerProposing(t, nil, nil, func(context.Context, catalog.Command) error { return tc.err })
		c := dial(t, s.l.Addr())
		ct := kmsg.NewPtrCreateTopicsRequest()
		ct.SetVersion(4)
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "new", 3, 1
		ct.Topics = append(ct.Topics, rt)
		if got := c.do(ct).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; got != tc.create {
			t.Errorf("%v: CreateTopics answered %d, want %d", tc.err, got, tc.create)
		}
		dt := kmsg.NewPtrDeleteTopicsRequest()
		dt.SetVersion(4)
		dt.TopicNames = []string{"t"}
		if got := c.do(dt).(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode; got != tc.deleteCode {
			t.Errorf("%v: DeleteTopics answered %d, want %d", tc.err, got, tc.deleteCode)
		}
		md := kmsg.NewPtrMetadataRequest()
		md.SetVersion(9)
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr("auto")
		md.Topics = append(md.Topics, mt)
		if got := c.do(md).(*kmsg.MetadataResponse).Topics[0].ErrorCode; got != kerr.LeaderNotAvailable.Code {
			t.Errorf("%v: Metadata auto-create answered %d, want %d", tc.err, got, kerr.LeaderNotAvailable.Code)
		}
	}
}
