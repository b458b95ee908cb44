package node

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/catalog"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// A grown topic keeps its id, and a consumer group subscribed to it is
// assigned the new partitions on its next heartbeats: groups assign from
// the catalog, whose version every grow moves.
func TestGrownTopicIsReassigned(t *testing.T) {
	n := startNode(t, false)
	waitLogFormat(t, n, raftfsm.LogFormat)
	ctx := context.Background()
	id := catalog.NewTopicID()
	if err := n.proposeTopic(ctx, catalog.CreateTopic{Name: "t", ID: id, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	j := nodeCall[*pb.ConsumerGroupHeartbeatResponse](t, n, consumerJoin("m1"))
	if j.ErrorCode != 0 || len(j.Assignment) != 1 || len(j.Assignment[0].Partitions) != 2 {
		t.Fatalf("join: %v", j)
	}
	if err := n.proposeTopic(ctx, catalog.GrowTopic{Name: "t", ID: id, Partitions: 5}); err != nil {
		t.Fatal(err)
	}
	if got, _ := n.raft.Catalog.Get("t"); got.Partitions != 5 || got.ID != id {
		t.Fatalf("grown topic %+v", got)
	}
	epoch := j.MemberEpoch
	deadline := time.Now().Add(10 * time.Second)
	for {
		hb := nodeCall[*pb.ConsumerGroupHeartbeatResponse](t, n, &pb.ConsumerGroupHeartbeatRequest{GroupId: "cg", MemberId: "m1",
			MemberEpoch: epoch, RebalanceTimeoutMs: -1, ApiVersion: 1, TopicsSet: true,
			Topics: []*pb.TopicPartitions{{Name: "t", Partitions: []int32{0, 1}}}})
		if hb.ErrorCode != 0 {
			t.Fatalf("heartbeat: %v", hb)
		}
		epoch = hb.MemberEpoch
		if hb.HasAssignment && len(hb.Assignment) == 1 && slices.Equal(hb.Assignment[0].Partitions, []int32{0, 1, 2, 3, 4}) {
			if epoch <= j.MemberEpoch {
				t.Fatalf("reassigned at epoch %d, joined at %d", epoch, j.MemberEpoch)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no assignment of the new partitions: %v", hb)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A node pinned below log format 5 (a rolling upgrade that keeps the
// option to roll back) refuses to grow a topic rather than write an entry
// the version before cannot apply.
func TestGrowNeedsLogFormat(t *testing.T) {
	n := startNode(t, false, func(c *Config) { c.Raft.LogFormat = raftfsm.LogFormatConsumer })
	ctx := context.Background()
	if err := n.proposeTopic(ctx, catalog.CreateTopic{Name: "t", ID: catalog.NewTopicID(), Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	err := n.proposeTopic(ctx, catalog.GrowTopic{Name: "t", Partitions: 3})
	if !errors.Is(err, catalog.ErrUnsupported) {
		t.Fatalf("grow at log format %d: %v", n.Raft().FSM.LogFormat(), err)
	}
	if got, _ := n.raft.Catalog.Get("t"); got.Partitions != 2 {
		t.Fatalf("topic after a refused grow: %+v", got)
	}
}
