package actors

import (
	"testing"
	"testing/synctest"

	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// answers is a coordinator.Answerer that keeps what it is given.
type answers chan proto.Message

func (a answers) Answer(m proto.Message) { a <- m }

// Send answers through the Answerer: a commit to a group with no actor yet
// (through the groups actor, which starts it), one to the group's own actor,
// and a request for a group that does not exist. Each is answered once, and
// the commits are stored.
func TestSendAnswersThroughAnswerer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := raftfsm.NewMemoryStore()
		svc := startService(t, store)
		commit := func(offset int64) *pb.OffsetCommitRequest {
			return &pb.OffsetCommitRequest{GroupId: "g", GenerationId: -1,
				Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 1, Offset: offset}}}}}
		}
		for _, offset := range []int64{5, 9} {
			got := make(answers, 2)
			svc.Send(commit(offset), got)
			synctest.Wait()
			if len(got) != 1 {
				t.Fatalf("commit %d: %d answers", offset, len(got))
			}
			r, ok := (<-got).(*pb.OffsetCommitResponse)
			if !ok || r.Topics[0].Partitions[0].ErrorCode != coordinator.ErrNone {
				t.Fatalf("commit %d answered %v", offset, r)
			}
			f := ask[*pb.OffsetFetchResponse](t, svc, &pb.OffsetFetchRequest{GroupId: "g", Topics: []*pb.TopicPartitions{{Name: "t", Partitions: []int32{1}}}})
			if f.Topics[0].Partitions[0].Offset != offset {
				t.Fatalf("stored offset %d, want %d", f.Topics[0].Partitions[0].Offset, offset)
			}
		}
		got := make(answers, 2)
		svc.Send(&pb.HeartbeatRequest{GroupId: "nobody", MemberId: "m", GenerationId: 1}, got)
		synctest.Wait()
		if len(got) != 1 {
			t.Fatalf("heartbeat: %d answers", len(got))
		}
		if r, ok := (<-got).(*pb.HeartbeatResponse); !ok || r.ErrorCode != coordinator.ErrUnknownMemberID {
			t.Fatalf("heartbeat to an absent group answered %v", r)
		}
	})
}
