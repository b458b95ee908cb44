package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// nodeCall runs one native request on n.
func nodeCall[T proto.Message](t *testing.T, n *Node, req proto.Message) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := n.Service().Call(ctx, req)
	if err != nil {
		t.Fatalf("%T: %v", req, err)
	}
	r, ok := res.(T)
	if !ok {
		t.Fatalf("%T: answer %T", req, res)
	}
	return r
}

// waitLogFormat waits until the cluster's log format is want.
func waitLogFormat(t *testing.T, n *Node, want uint32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.Raft().FSM.LogFormat() != want {
		if time.Now().After(deadline) {
			t.Fatalf("log format %d, want %d", n.Raft().FSM.LogFormat(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func consumerJoin(member string) *pb.ConsumerGroupHeartbeatRequest {
	return &pb.ConsumerGroupHeartbeatRequest{GroupId: "cg", MemberId: member, RebalanceTimeoutMs: 30_000, ApiVersion: 1,
		SubscribedTopicNamesSet: true, SubscribedTopicNames: []string{"t"}, TopicsSet: true}
}

// A consumer group formed on a node's Raft log (raft-boltdb) is served
// again after a restart: its epochs and assignment, and its member
// heartbeats on at its epoch. The topic catalog sizes its assignment.
func TestConsumerGroupSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, false, func(c *Config) { c.DataDir = dir })
	waitLogFormat(t, n, raftfsm.LogFormat)
	if err := n.proposeTopic(context.Background(), catalog.CreateTopic{Name: "t", ID: catalog.NewTopicID(), Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	j := nodeCall[*pb.ConsumerGroupHeartbeatResponse](t, n, consumerJoin("m1"))
	if j.ErrorCode != 0 || j.MemberEpoch != 1 || !j.HasAssignment || len(j.Assignment) != 1 || len(j.Assignment[0].Partitions) != 4 {
		t.Fatalf("join: %v", j)
	}
	c := nodeCall[*pb.OffsetCommitResponse](t, n, &pb.OffsetCommitRequest{GroupId: "cg", GenerationId: 1, MemberId: "m1",
		Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 3, Offset: 77}}}}})
	if c.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("commit: %v", c)
	}
	before := nodeCall[*pb.ConsumerGroupDescribeResponse](t, n, &pb.ConsumerGroupDescribeRequest{GroupId: "cg"})
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	n = startNode(t, false, func(c *Config) { c.DataDir = dir })
	after := nodeCall[*pb.ConsumerGroupDescribeResponse](t, n, &pb.ConsumerGroupDescribeRequest{GroupId: "cg"})
	if !proto.Equal(before, after) || after.GroupEpoch != 1 || after.State != "Stable" {
		t.Fatalf("after restart:\n%v\nbefore:\n%v", after, before)
	}
	hb := nodeCall[*pb.ConsumerGroupHeartbeatResponse](t, n, &pb.ConsumerGroupHeartbeatRequest{GroupId: "cg", MemberId: "m1", MemberEpoch: 1, RebalanceTimeoutMs: -1, ApiVersion: 1})
	if hb.ErrorCode != 0 || hb.MemberEpoch != 1 {
		t.Fatalf("heartbeat after restart: %v", hb)
	}
	f := nodeCall[*pb.OffsetFetchResponse](t, n, &pb.OffsetFetchRequest{GroupId: "cg", AllTopics: true})
	if len(f.Topics) != 1 || f.Topics[0].Partitions[0].Offset != 77 {
		t.Fatalf("offsets after restart: %v", f)
	}
	l := nodeCall[*pb.ListGroupsResponse](t, n, &pb.ListGroupsRequest{})
	if len(l.Groups) != 1 || l.Groups[0].GroupType != "consumer" {
		t.Fatalf("groups after restart: %v", l.Groups)
	}
}

// A node pinned below the log format that carries consumer group records
// answers a consumer-protocol join UNSUPPORTED_VERSION, saying why: clients
// then use the classic protocol.
func TestConsumerGroupNeedsLogFormat(t *testing.T) {
	n := startNode(t, false, func(c *Config) { c.Raft.LogFormat = raftfsm.LogFormatPlain })
	time.Sleep(200 * time.Millisecond) // the node registers its pin
	if f := n.Raft().FSM.LogFormat(); f >= raftfsm.LogFormatConsumer {
		t.Fatalf("pinned node's log format is %d", f)
	}
	j := nodeCall[*pb.ConsumerGroupHeartbeatResponse](t, n, consumerJoin("m1"))
	if j.ErrorCode != coordinator.ErrUnsupportedVersion || !strings.Contains(j.ErrorMessage, "log format") {
		t.Fatalf("join below the log format: %v", j)
	}
	if l := nodeCall[*pb.ListGroupsResponse](t, n, &pb.ListGroupsRequest{}); len(l.Groups) != 0 {
		t.Fatalf("groups: %v", l.Groups)
	}
}
