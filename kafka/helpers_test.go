package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// fakeGroups is a test double of the group core: it records native requests
// and answers through fn (default: an empty success answer of the right type).
// A request sent (Send) is answered from a goroutine of its own, after delay
// (when set) and once hold (when set) is closed; fn's context then carries
// the listener's bound for the request, as CallWithin's did, and a request
// fn fails is not answered (the listener answers it at its bound), as the
// groups do not answer a request they could not take.
type fakeGroups struct {
	mu    sync.Mutex
	reqs  []proto.Message
	fn    func(ctx context.Context, req proto.Message) (proto.Message, error)
	hold  chan struct{}
	delay func() time.Duration
	sent  atomic.Int64
}

func (f *fakeGroups) Send(req proto.Message, to coordinator.Answerer) {
	f.sent.Add(1)
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if p, ok := to.(*pending); ok && !p.deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, p.deadline)
	}
	go func() {
		defer cancel()
		if f.hold != nil {
			<-f.hold
		}
		if f.delay != nil {
			time.Sleep(f.delay())
		}
		if m, err := f.CallWithin(ctx, req, 0); err == nil {
			to.Answer(m)
		}
	}()
}

func (f *fakeGroups) CallWithin(ctx context.Context, req proto.Message, timeout time.Duration) (proto.Message, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, proto.Clone(req))
	fn := f.fn
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx, req)
	}
	return emptyAnswer(req), nil
}

func (f *fakeGroups) last() proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		return nil
	}
	return f.reqs[len(f.reqs)-1]
}

func (f *fakeGroups) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

func emptyAnswer(req proto.Message) proto.Message {
	switch r := req.(type) {
	case *grouppb.JoinGroupRequest:
		return &grouppb.JoinGroupResponse{GenerationId: 1, MemberId: "m-1", Leader: "m-1", ProtocolType: proto.String(r.ProtocolType), ProtocolName: proto.String("range")}
	case *grouppb.SyncGroupRequest:
		return &grouppb.SyncGroupResponse{Assignment: []byte{0, 3}}
	case *grouppb.HeartbeatRequest:
		return &grouppb.HeartbeatResponse{}
	case *grouppb.LeaveGroupRequest:
		out := &grouppb.LeaveGroupResponse{}
		for _, m := range r.Members {
			out.Members = append(out.Members, &grouppb.LeaveGroupMemberResponse{MemberId: m.MemberId, GroupInstanceId: m.GroupInstanceId})
		}
		return out
	case *grouppb.OffsetCommitRequest:
		out := &grouppb.OffsetCommitResponse{}
		for _, t := range r.Topics {
			ot := &grouppb.TopicPartitionErrors{Name: t.Name}
			for _, p := range t.Partitions {
				ot.Partitions = append(ot.Partitions, &grouppb.PartitionError{Partition: p.Partition})
			}
			out.Topics = append(out.Topics, ot)
		}
		return out
	case *grouppb.OffsetFetchRequest:
		out := &grouppb.OffsetFetchResponse{}
		for _, t := range r.Topics {
			ot := &grouppb.OffsetFetchTopic{Name: t.Name}
			for _, p := range t.Partitions {
				ot.Partitions = append(ot.Partitions, &grouppb.OffsetFetchPartition{Partition: p, Offset: 7, LeaderEpoch: -1})
			}
			out.Topics = append(out.Topics, ot)
		}
		return out
	case *grouppb.OffsetDeleteRequest:
		out := &grouppb.OffsetDeleteResponse{}
		for _, t := range r.Topics {
			ot := &grouppb.TopicPartitionErrors{Name: t.Name}
			for _, p := range t.Partitions {
				ot.Partitions = append(ot.Partitions, &grouppb.PartitionError{Partition: p})
			}
			out.Topics = append(out.Topics, ot)
		}
		return out
	case *grouppb.DescribeGroupRequest:
		return &grouppb.DescribeGroupResponse{GroupId: r.GroupId, State: "Stable", ProtocolType: "consumer", ProtocolData: "range", GenerationId: 4,
			Members: []*grouppb.DescribedMember{{MemberId: "m-1", ClientId: "c", ClientHost: "/127.0.0.1", Metadata: []byte{0, 1}, Assignment: []byte{0, 2}}}}
	case *grouppb.ListGroupsRequest:
		return &grouppb.ListGroupsResponse{Groups: []*grouppb.ListedGroup{{GroupId: "g", ProtocolType: "consumer", State: "Stable", GroupType: "classic"}}}
	case *grouppb.DeleteGroupRequest:
		return &grouppb.DeleteGroupResponse{GroupId: r.GroupId}
	case *grouppb.ConsumerGroupHeartbeatRequest:
		// Epoch 1, and every subscribed topic's partition 0.
		out := &grouppb.ConsumerGroupHeartbeatResponse{MemberId: r.MemberId, MemberEpoch: 1, HeartbeatIntervalMs: 5000, HasAssignment: true}
		for _, name := range r.SubscribedTopicNames {
			out.Assignment = append(out.Assignment, &grouppb.TopicPartitions{Name: name, Partitions: []int32{0}})
		}
		return out
	case *grouppb.ConsumerGroupDescribeRequest:
		return &grouppb.ConsumerGroupDescribeResponse{GroupId: r.GroupId, State: "Stable", GroupEpoch: 2, AssignmentEpoch: 2, AssignorName: "uniform",
			Members: []*grouppb.ConsumerGroupDescribedMember{{MemberId: "m-1", MemberEpoch: 2, ClientId: "c", ClientHost: "/127.0.0.1",
				SubscribedTopicNames: []string{"t"}, Assignment: []*grouppb.TopicPartitions{{Name: "t", Partitions: []int32{0, 1}}},
				TargetAssignment: []*grouppb.TopicPartitions{{Name: "t", Partitions: []int32{0}}}}}}
	}
	panic(fmt.Sprintf("fake: unexpected %T", req))
}

type testServer struct {
	l      *Listener
	groups *fakeGroups
	topics *catalog.Catalog
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func startServer(t testing.TB, groups Groups, mod func(*Config)) *testServer {
	t.Helper()
	return startServerProposing(t, groups, mod, nil)
}

// startServerProposing is startServer with the catalog's proposer (nil:
// changes apply at once), set before the server starts.
func startServerProposing(t testing.TB, groups Groups, mod func(*Config), propose catalog.Proposer) *testServer {
	t.Helper()
	fg, _ := groups.(*fakeGroups)
	if groups == nil {
		fg = &fakeGroups{}
		groups = fg
	}
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.NodeID = 1
	if mod != nil {
		mod(&cfg)
	}
	topics := catalog.New()
	if err := topics.Apply(catalog.CreateTopic{Name: "t", ID: catalog.NewTopicID(), Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	if propose != nil {
		topics.SetProposer(propose)
	}
	l, err := New(cfg, groups, topics, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &testServer{l: l, groups: fg, topics: topics, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- l.Serve(ctx) }()
	t.Cleanup(s.stop)
	return s
}

func (s *testServer) stop() {
	s.once.Do(func() {
		s.cancel()
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			panic("Serve did not return")
		}
	})
}

// rawClient speaks the Kafka framing directly, so tests control versions,
// pipelining and malformed input.
type rawClient struct {
	t    testing.TB
	nc   net.Conn
	br   *bufio.Reader
	corr int32
	fmt  *kmsg.RequestFormatter
}

func dial(t testing.TB, addr net.Addr) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc, br: bufio.NewReader(nc), fmt: kmsg.NewRequestFormatter(kmsg.FormatterClientID("test-client"))}
}

// send writes a request and returns its correlation id.
func (c *rawClient) send(req kmsg.Request) int32 {
	c.corr++
	if _, err := c.nc.Write(c.fmt.AppendRequest(nil, req, c.corr)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
	return c.corr
}

// recv reads one answer and decodes it as the response to req.
func (c *rawClient) recv(req kmsg.Request, wantCorr int32) (kmsg.Response, error) {
	c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	frame, err := readFrame(c.br)
	if err != nil {
		return nil, err
	}
	if len(frame) < 4 {
		return nil, errors.New("short frame")
	}
	if corr := int32(binary.BigEndian.Uint32(frame)); corr != wantCorr {
		return nil, fmt.Errorf("correlation id %d, want %d", corr, wantCorr)
	}
	body := frame[4:]
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() && req.Key() != 18 {
		if len(body) == 0 || body[0] != 0 {
			return nil, errors.New("bad response header tags")
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decode %s v%d: %w", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp, nil
}

func (c *rawClient) do(req kmsg.Request) kmsg.Response {
	c.t.Helper()
	resp, err := c.recv(req, c.send(req))
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(r, b)
	return b, err
}

// expectClosed waits until the server closes the connection.
func (c *rawClient) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		if _, err := c.br.ReadByte(); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				c.t.Fatal("connection still open")
			}
			return
		}
	}
}
