package membership

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func TestCloseRevokesCommitsAndLeaves(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.stable(true, 2, "cooperative-sticky", tp("t", 0, 1))
	d.m.Mark("t", 0, 42)
	d.m.Close(d.now, &d.fx)
	d.collect()
	cb := d.callback(Revoked, "t[0 1]")
	none[*pb.OffsetCommitRequest](d)
	d.done(cb)
	id, c := take[*pb.OffsetCommitRequest](d)
	if c.GetGenerationId() != 2 || c.GetTopics()[0].GetPartitions()[0].GetOffset() != 42 {
		t.Fatalf("close commit %v", c)
	}
	none[*pb.LeaveGroupRequest](d)
	d.respond(id, &pb.OffsetCommitResponse{}, nil)
	id, l := take[*pb.LeaveGroupRequest](d)
	if l.GetMembers()[0].GetMemberId() != "m1" {
		t.Fatalf("leave %v", l)
	}
	if d.stopped {
		t.Fatal("stopped before the leave was answered")
	}
	d.respond(id, &pb.LeaveGroupResponse{}, nil)
	if !d.stopped || d.err != nil {
		t.Fatalf("stopped %v err %v", d.stopped, d.err)
	}
}

func TestCloseWhileRevokeRunsWaitsForIt(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.stable(true, 1, "cooperative-sticky", tp("t", 0, 1))
	wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
	d.collect()
	d.joinAs("m1", 2, "cooperative-sticky")
	d.syncWith(tp("t", 0))
	cb := d.callback(Revoked, "t[1]")
	d.callback(Assigned, "")
	d.m.Close(d.now, &d.fx)
	d.collect()
	d.noCallbacks()
	d.done(cb)
	d.done(d.callback(Revoked, "t[0]"))
	take[*pb.LeaveGroupRequest](d)
}

// A slow revoke at Close keeps the session alive with heartbeats; an error
// answer to one does not make a closing member join again.
func TestCloseHeartbeatsWhileRevoking(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.stable(true, 2, "cooperative-sticky", tp("t", 0))
	d.m.Close(d.now, &d.fx)
	d.collect()
	cb := d.callback(Revoked, "t[0]")
	d.idle(16 * time.Second) // 1.6 session timeouts, within the revoke limit (18s)
	d.noCallbacks()
	d.advance(time.Second)
	id, _ := take[*pb.HeartbeatRequest](d)
	d.respond(id, &pb.HeartbeatResponse{ErrorCode: int32(kerr.IllegalGeneration.Code)}, nil)
	none[*pb.JoinGroupRequest](d)
	d.noCallbacks()
	d.done(cb)
	take[*pb.LeaveGroupRequest](d)
	d.advance(10 * time.Second)
	none[*pb.HeartbeatRequest](d)
}
