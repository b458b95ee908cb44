package membership

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func TestCommit(t *testing.T) {
	offsets := map[string]map[int32]int64{"t": {0: 10, 1: 20}}
	t.Run("ok", func(t *testing.T) {
		d := newDrv(t, testConfig(coopOnly...))
		d.stable(true, 4, "cooperative-sticky", tp("t", 0, 1))
		wantErr(t, d.m.Commit(d.now, 9, offsets, &d.fx), nil)
		d.collect()
		id, req := take[*pb.OffsetCommitRequest](d)
		if req.GetGenerationId() != 4 || req.GetMemberId() != "m1" || len(req.GetTopics()[0].GetPartitions()) != 2 {
			t.Fatalf("commit %v", req)
		}
		d.respond(id, &pb.OffsetCommitResponse{Topics: []*pb.TopicPartitionErrors{{Name: "t", Partitions: []*pb.PartitionError{{Partition: 0}, {Partition: 1}}}}}, nil)
		if len(d.commits) != 1 || d.commits[0].Token != 9 || d.commits[0].Err != nil {
			t.Fatalf("results %v", d.commits)
		}
	})
	errs := []struct {
		code   int16
		want   error
		after  func(d *drv)
		stops  bool
		losing bool
	}{
		{code: kerr.RebalanceInProgress.Code, want: ErrRebalanceInProgress, after: func(d *drv) { take[*pb.JoinGroupRequest](d) }},
		{code: kerr.IllegalGeneration.Code, want: ErrCommitFailed, losing: true},
		{code: kerr.UnknownMemberID.Code, want: ErrCommitFailed, losing: true},
		{code: kerr.FencedInstanceID.Code, want: ErrFenced, stops: true, losing: true},
		{code: kerr.NotCoordinator.Code, want: ErrCoordinatorNotAvailable, after: func(d *drv) { take[*FindCoordinator](d) }},
		{code: kerr.CoordinatorLoadInProgress.Code, want: kerr.CoordinatorLoadInProgress},
		{code: kerr.UnknownTopicOrPartition.Code, want: kerr.UnknownTopicOrPartition},
	}
	for _, c := range errs {
		t.Run(kerr.ErrorForCode(c.code).Error(), func(t *testing.T) {
			d := newDrv(t, testConfig(coopOnly...))
			d.stable(true, 4, "cooperative-sticky", tp("t", 0, 1))
			wantErr(t, d.m.Commit(d.now, 9, offsets, &d.fx), nil)
			d.collect()
			id, _ := take[*pb.OffsetCommitRequest](d)
			d.respond(id, &pb.OffsetCommitResponse{Topics: []*pb.TopicPartitionErrors{{Name: "t", Partitions: []*pb.PartitionError{{Partition: 0, ErrorCode: int32(c.code)}}}}}, nil)
			if len(d.commits) != 1 || !errors.Is(d.commits[0].Err, c.want) {
				t.Fatalf("results %v, want %v", d.commits, c.want)
			}
			if c.losing {
				d.callback(Lost, "t[0 1]")
			}
			if d.stopped != c.stops {
				t.Fatalf("stopped %v", d.stopped)
			}
			if c.after != nil {
				c.after(d)
			}
		})
	}
	t.Run("refused while joining", func(t *testing.T) {
		d := newDrv(t, testConfig(coopOnly...))
		wantErr(t, d.m.Commit(d.now, 1, offsets, &d.fx), ErrRebalanceInProgress)
		d.stable(true, 1, "cooperative-sticky", tp("t", 0))
		wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
		d.collect()
		wantErr(t, d.m.Commit(d.now, 1, offsets, &d.fx), ErrRebalanceInProgress)
		d.joinAs("m1", 2, "cooperative-sticky")
		wantErr(t, d.m.Commit(d.now, 1, offsets, &d.fx), ErrRebalanceInProgress)
		d.collect()
		none[*pb.OffsetCommitRequest](d)
		d.syncWith(tp("t", 0))
		wantErr(t, d.m.Commit(d.now, 1, offsets, &d.fx), nil)
		d.collect()
		_, req := take[*pb.OffsetCommitRequest](d)
		if req.GetGenerationId() != 2 {
			t.Fatalf("commit generation %d", req.GetGenerationId())
		}
	})
	t.Run("allowed while an eager revoke runs", func(t *testing.T) {
		d := newDrv(t, testConfig(rangeOne...))
		d.stable(false, 1, "range", tp("t", 0))
		wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
		d.collect()
		cb := d.callback(Revoked, "t[0]")
		wantErr(t, d.m.Commit(d.now, 1, offsets, &d.fx), nil) // committing from the revoke callback
		d.collect()
		_, req := take[*pb.OffsetCommitRequest](d)
		if req.GetGenerationId() != 1 {
			t.Fatalf("gen %d", req.GetGenerationId())
		}
		d.done(cb)
		take[*pb.JoinGroupRequest](d)
	})
}
