package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/actors"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
	"github.com/cohort-coord/cohort/shard"
)

// startAt starts a single-node cluster on dir with shards shards (0: what
// the dir holds).
func startAt(t *testing.T, dir string, shards int) (*Node, error) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DataDir = dir
	cfg.RemoteAddr, cfg.Kafka.Addr, cfg.Raft.RaftAddr = "", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout, cfg.Raft.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	cfg.Raft.Shards = shards
	cfg.Group.InitialRebalanceDelay = 0
	cfg.Logger = quiet()
	n, err := Start(cfg)
	if err != nil {
		return nil, err
	}
	if err := n.WaitActive(10 * time.Second); err != nil {
		n.Close()
		t.Fatal(err)
	}
	return n, nil
}

func callGroups(t *testing.T, n *Node, req proto.Message) proto.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := n.Groups().CallWithin(ctx, req, 0)
	if err != nil {
		t.Fatalf("%T: %v", req, err)
	}
	return res
}

// formGroup forms a one-member group and commits offset 100+i for
// partition 0 of topic t; it returns the member's generation and id.
func formGroup(t *testing.T, n *Node, id string, offset int64) (int32, string) {
	t.Helper()
	j := callGroups(t, n, &pb.JoinGroupRequest{GroupId: id, ClientId: "c", ApiVersion: 3, SessionTimeoutMs: 30_000, RebalanceTimeoutMs: 10_000,
		ProtocolType: "consumer", Protocols: []*pb.Protocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 0}}}}).(*pb.JoinGroupResponse)
	if j.ErrorCode != 0 {
		t.Fatalf("%s: join: %v", id, j)
	}
	s := callGroups(t, n, &pb.SyncGroupRequest{GroupId: id, GenerationId: j.GenerationId, MemberId: j.MemberId,
		Assignments: []*pb.SyncGroupAssignment{{MemberId: j.MemberId, Assignment: []byte(id)}}}).(*pb.SyncGroupResponse)
	if s.ErrorCode != 0 {
		t.Fatalf("%s: sync: %v", id, s)
	}
	c := callGroups(t, n, &pb.OffsetCommitRequest{GroupId: id, GenerationId: j.GenerationId, MemberId: j.MemberId,
		Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: offset}}}}}).(*pb.OffsetCommitResponse)
	if c.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("%s: commit: %v", id, c)
	}
	return j.GenerationId, j.MemberId
}

// A node of a 4-shard cluster keeps each group in the replica of the
// group's shard, and only there; restarted without --shards it opens the 4
// shards it was created with, groups, generations and offsets kept; any
// other count is refused.
func TestShardedNodeKeepsGroupsInTheirShards(t *testing.T) {
	dir := t.TempDir()
	n, err := startAt(t, dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Raft().ShardCount(); got != 4 {
		t.Fatalf("shard count %d, want 4", got)
	}
	if n.cfg.Group.Partitions == nil {
		t.Fatal("the shards' group services have no topic catalog (mixed assignors and the takeover window need it)")
	}
	type member struct {
		gen int32
		id  string
	}
	members := map[string]member{}
	perShard := make([]int, 4)
	for i := range 16 {
		id := fmt.Sprintf("group-%d", i)
		gen, mid := formGroup(t, n, id, int64(100+i))
		members[id] = member{gen, mid}
		perShard[shard.Of(id, 4)]++
	}
	check := func(n *Node) {
		t.Helper()
		for id := range members {
			want := shard.Of(id, 4)
			for k, rep := range n.Raft().Shards() {
				rec, offsets, _ := rep.FSM.Load(id)
				held := rec != nil || len(offsets) > 0
				if held != (k == want) {
					t.Fatalf("%s (shard %d): held by shard %d's replica: %v", id, want, k, held)
				}
			}
			if rec, _, _ := n.Raft().FSM.Load(id); rec != nil {
				t.Fatalf("%s: in the meta group's state", id)
			}
		}
	}
	check(n)
	for k, c := range perShard {
		if c == 0 {
			t.Fatalf("shard %d holds none of 16 groups: %v", k, perShard)
		}
	}
	list := callGroups(t, n, &pb.ListGroupsRequest{}).(*pb.ListGroupsResponse)
	if list.ErrorCode != 0 || len(list.Groups) != 16 {
		t.Fatalf("ListGroups over 4 shards: %v", list)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	n, err = startAt(t, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Raft().ShardCount(); got != 4 {
		t.Fatalf("restarted without --shards: %d shards, want the 4 it was created with", got)
	}
	check(n)
	for id, m := range members {
		d := callGroups(t, n, &pb.DescribeGroupRequest{GroupId: id}).(*pb.DescribeGroupResponse)
		if d.State != "Stable" || d.GenerationId != m.gen || len(d.Members) != 1 || d.Members[0].MemberId != m.id {
			t.Fatalf("%s after restart: %v", id, d)
		}
		h := callGroups(t, n, &pb.HeartbeatRequest{GroupId: id, GenerationId: m.gen, MemberId: m.id}).(*pb.HeartbeatResponse)
		if h.ErrorCode != 0 {
			t.Fatalf("%s: heartbeat after restart: %v", id, h)
		}
		var i int
		fmt.Sscanf(id, "group-%d", &i)
		f := callGroups(t, n, &pb.OffsetFetchRequest{GroupId: id, Topics: []*pb.TopicPartitions{{Name: "t", Partitions: []int32{0}}}}).(*pb.OffsetFetchResponse)
		if p := f.Topics[0].Partitions[0]; p.Offset != int64(100+i) {
			t.Fatalf("%s: offset after restart: %v", id, f)
		}
	}
	n.Close()

	for _, k := range []int{1, 8} {
		if n, err := startAt(t, dir, k); !errors.Is(err, raftfsm.ErrShardCount) || !strings.Contains(err.Error(), "--shards 4") {
			if n != nil {
				n.Close()
			}
			t.Fatalf("--shards %d on a 4-shard data dir: %v", k, err)
		}
	}
}

// A data dir of one shard (the layout of every data dir written before
// shards existed: the meta group holds the groups) opens as one shard with
// its groups and offsets, and asking it for 16 shards is refused with an
// error that says why and what to do.
func TestOneShardDataDirStaysOneShard(t *testing.T) {
	dir := t.TempDir()
	n, err := startAt(t, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	gen, mid := formGroup(t, n, "kept", 42)
	n.Close()
	if n, err := startAt(t, dir, 16); !errors.Is(err, raftfsm.ErrShardCount) || !strings.Contains(err.Error(), "holds a cluster of 1 shard") {
		if n != nil {
			n.Close()
		}
		t.Fatalf("--shards 16 on a one-shard data dir: %v", err)
	}
	n, err = startAt(t, dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.Raft().ShardCount() != 1 || n.Raft().Shards()[0] != n.Raft().Replica {
		t.Fatal("a one-shard data dir's groups are not in its meta group")
	}
	d := callGroups(t, n, &pb.DescribeGroupRequest{GroupId: "kept"}).(*pb.DescribeGroupResponse)
	if d.GenerationId != gen || len(d.Members) != 1 || d.Members[0].MemberId != mid {
		t.Fatalf("after reopening: %v", d)
	}
	f := callGroups(t, n, &pb.OffsetFetchRequest{GroupId: "kept", Topics: []*pb.TopicPartitions{{Name: "t", Partitions: []int32{0}}}}).(*pb.OffsetFetchResponse)
	if f.Topics[0].Partitions[0].Offset != 42 {
		t.Fatalf("offset after reopening: %v", f)
	}
}

// A native API request routed to a shard is answered through answerers
// that keep the sender's address visible, so the group sees a request
// another node forwarded as one (actors.Addressed).
func TestRoutedRequestsKeepTheirSenderAddress(t *testing.T) {
	pid := actor.NewPID("127.0.0.1:7002", "future$1")
	to := pidAnswerer{to: pid}
	if got := actors.ReplyAddress(to); got != pid.Address {
		t.Fatalf("pidAnswerer: address %q, want %q", got, pid.Address)
	}
	settling := newSettlingAnswerer(nil, nil, nil, to)
	if got := actors.ReplyAddress(settling); got != pid.Address {
		t.Fatalf("settlingAnswerer: address %q, want %q", got, pid.Address)
	}
	if got := actors.ReplyAddress(newSettlingAnswerer(nil, nil, nil, nil)); got != "" {
		t.Fatalf("settlingAnswerer without a sender: address %q, want none", got)
	}
}
