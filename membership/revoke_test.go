package membership

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// answerHeartbeats advances virtual time by dt in steps, answering every
// heartbeat with code, and counts them.
func (d *drv) answerHeartbeats(dt time.Duration, code int16) int {
	n := 0
	end := d.now.Add(dt)
	for d.now.Before(end) {
		d.advance(min(100*time.Millisecond, end.Sub(d.now)))
		for i := 0; i < len(d.reqs); {
			if _, ok := d.reqs[i].Msg.(*pb.HeartbeatRequest); ok {
				id := d.reqs[i].ID
				d.reqs = slices.Delete(d.reqs, i, i+1)
				d.respond(id, &pb.HeartbeatResponse{ErrorCode: int32(code)}, nil)
				n++
				continue
			}
			i++
		}
	}
	return n
}

// An eager member whose revoke callback runs longer than its session timeout
// (but less than its rebalance timeout) keeps heartbeating, so the
// coordinator keeps it; a commit from inside the callback goes out at the
// current generation; JoinGroup follows the callback with the same member id.
func TestEagerRevokeKeepsHeartbeating(t *testing.T) {
	d := newDrv(t, testConfig(rangeOne...)) // session 10s, rebalance 20s, heartbeat 1s
	d.stable(true, 2, "range", tp("t", 0, 1))
	d.advance(time.Second)
	id, _ := take[*pb.HeartbeatRequest](d)
	d.respond(id, &pb.HeartbeatResponse{ErrorCode: int32(kerr.RebalanceInProgress.Code)}, nil)
	cb := d.callback(Revoked, "t[0 1]")
	if d.m.Phase() != Preparing {
		t.Fatalf("phase %v, want Preparing", d.m.Phase())
	}
	n := d.answerHeartbeats(15*time.Second, kerr.RebalanceInProgress.Code) // 1.5 session timeouts
	if n < 13 {
		t.Fatalf("%d heartbeats in 15s of revoke, want one a second", n)
	}
	d.noCallbacks()
	none[*pb.JoinGroupRequest](d)
	if d.m.Generation() != 2 || d.m.MemberID() != "m1" {
		t.Fatalf("generation %d member %q during the revoke", d.m.Generation(), d.m.MemberID())
	}
	// A commit from inside the callback is sent at the current generation.
	if err := d.m.Commit(d.now, 7, map[string]map[int32]int64{"t": {0: 5}}, &d.fx); err != nil {
		t.Fatal(err)
	}
	d.collect()
	cid, creq := take[*pb.OffsetCommitRequest](d)
	if creq.GetGenerationId() != 2 || creq.GetMemberId() != "m1" {
		t.Fatalf("commit at generation %d member %q", creq.GetGenerationId(), creq.GetMemberId())
	}
	d.respond(cid, &pb.OffsetCommitResponse{Topics: []*pb.TopicPartitionErrors{{Name: "t", Partitions: []*pb.PartitionError{{Partition: 0}}}}}, nil)
	if len(d.commits) != 1 || d.commits[0].Token != 7 || d.commits[0].Err != nil {
		t.Fatalf("commit results %+v", d.commits)
	}
	d.done(cb)
	_, req := take[*pb.JoinGroupRequest](d)
	if req.GetMemberId() != "m1" || ownedOf(t, req, "range") != "" {
		t.Fatalf("join member %q owned %q", req.GetMemberId(), ownedOf(t, req, "range"))
	}
	d.reqs = nil
	d.advance(5 * time.Second)
	none[*pb.HeartbeatRequest](d) // no heartbeats once JoinGroup is sent
}

// A revoke callback that outlives the rebalance timeout ends as a lost
// generation: the member stops heartbeating, commits are refused, and it
// joins again as a new member once the callback returns.
func TestEagerRevokePastRebalanceTimeoutLosesGeneration(t *testing.T) {
	d := newDrv(t, testConfig(rangeOne...))
	d.stable(true, 2, "range", tp("t", 0, 1))
	if err := d.m.EnforceRebalance(d.now, "", &d.fx); err != nil {
		t.Fatal(err)
	}
	d.collect()
	cb := d.callback(Revoked, "t[0 1]")
	// The limit is the rebalance timeout (20s) less two heartbeat
	// intervals (1s): the coordinator's rebalance may have begun that much
	// before the member heard of it.
	d.answerHeartbeats(18*time.Second-50*time.Millisecond, kerr.RebalanceInProgress.Code)
	if d.m.Generation() != 2 {
		t.Fatalf("generation %d before the revoke limit", d.m.Generation())
	}
	d.answerHeartbeats(200*time.Millisecond, kerr.RebalanceInProgress.Code)
	if d.m.Generation() != -1 || d.m.MemberID() != "" {
		t.Fatalf("generation %d member %q after the rebalance timeout", d.m.Generation(), d.m.MemberID())
	}
	if n := d.answerHeartbeats(5*time.Second, 0); n != 0 {
		t.Fatalf("%d heartbeats after the generation was given up", n)
	}
	wantErr(t, d.m.Commit(d.now, 1, map[string]map[int32]int64{"t": {0: 5}}, &d.fx), ErrRebalanceInProgress)
	d.collect()
	d.noCallbacks() // the revoked partitions are not reported twice
	none[*pb.JoinGroupRequest](d)
	d.done(cb)
	_, req := take[*pb.JoinGroupRequest](d)
	if req.GetMemberId() != "" {
		t.Fatalf("join member %q, want a new member", req.GetMemberId())
	}
}

// A cooperative revoke past the rebalance timeout loses what the member kept.
func TestCooperativeRevokePastRebalanceTimeoutLosesKept(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.stable(true, 2, "cooperative-sticky", tp("t", 0, 1))
	d.advance(time.Second)
	id, _ := take[*pb.HeartbeatRequest](d)
	d.respond(id, &pb.HeartbeatResponse{ErrorCode: int32(kerr.RebalanceInProgress.Code)}, nil)
	d.joinAs("m1", 3, "cooperative-sticky")
	d.syncWith(tp("t", 0))
	cb := d.callback(Revoked, "t[1]")
	d.callback(Assigned, "")
	d.answerHeartbeats(25*time.Second, 0)
	lost := d.callback(Lost, "t[0]")
	if d.m.Generation() != -1 {
		t.Fatalf("generation %d after the rebalance timeout", d.m.Generation())
	}
	d.done(cb)
	none[*pb.JoinGroupRequest](d) // the lost callback first
	d.done(lost)
	take[*pb.JoinGroupRequest](d)
}
