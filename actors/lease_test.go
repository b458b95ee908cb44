package actors

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// Without the lease a group actor answers nothing from its state: every
// request, also those a Stable group answers without a write (heartbeat,
// offset fetch, describe), gets NOT_COORDINATOR, and the state is kept for
// when the lease holds again.
func TestLeaseFencesAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var held atomic.Bool
		held.Store(true)
		system := actor.NewActorSystem(quietLogs())
		svc, err := Start(system, Options{Config: testConfig(), Store: raftfsm.NewMemoryStore(), Logger: quietLogger(), Lease: func(time.Time) bool { return held.Load() }})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { svc.Stop(); system.Shutdown() }()
		ids, gen := formGroup(t, svc, "g1", 2)
		commit := &pb.OffsetCommitRequest{GroupId: "g1", GenerationId: gen, MemberId: ids[0],
			Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 7}}}}}
		if r := ask[*pb.OffsetCommitResponse](t, svc, commit); r.GetTopics()[0].GetPartitions()[0].GetErrorCode() != coordinator.ErrNone {
			t.Fatalf("commit: %v", r)
		}
		fetch := &pb.OffsetFetchRequest{GroupId: "g1", Topics: []*pb.TopicPartitions{{Name: "t", Partitions: []int32{0}}}}

		held.Store(false)
		if r := ask[*pb.HeartbeatResponse](t, svc, &pb.HeartbeatRequest{GroupId: "g1", GenerationId: gen, MemberId: ids[0]}); r.GetErrorCode() != coordinator.ErrNotCoordinator {
			t.Fatalf("heartbeat without the lease: %v", r)
		}
		if r := ask[*pb.OffsetFetchResponse](t, svc, fetch); r.GetErrorCode() != coordinator.ErrNotCoordinator {
			t.Fatalf("fetch without the lease: %v", r)
		}
		if r := ask[*pb.DescribeGroupResponse](t, svc, &pb.DescribeGroupRequest{GroupId: "g1"}); r.GetErrorCode() != coordinator.ErrNotCoordinator {
			t.Fatalf("describe without the lease: %v", r)
		}
		if r := ask[*pb.SyncGroupResponse](t, svc, &pb.SyncGroupRequest{GroupId: "g1", GenerationId: gen, MemberId: ids[1]}); r.GetErrorCode() != coordinator.ErrNotCoordinator {
			t.Fatalf("sync without the lease: %v", r)
		}

		held.Store(true)
		if r := ask[*pb.HeartbeatResponse](t, svc, &pb.HeartbeatRequest{GroupId: "g1", GenerationId: gen, MemberId: ids[0]}); r.GetErrorCode() != coordinator.ErrNone {
			t.Fatalf("heartbeat with the lease back: %v", r)
		}
		r := ask[*pb.OffsetFetchResponse](t, svc, fetch)
		if got := r.GetTopics()[0].GetPartitions()[0].GetOffset(); got != 7 {
			t.Fatalf("fetched offset %d, want 7 (%v)", got, r)
		}
	})
}
