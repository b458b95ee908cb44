package membership

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func TestJoinErrors(t *testing.T) {
	cases := []struct {
		code int16
		// what must follow
		rejoinNow   bool   // a JoinGroup right away
		backoff     bool   // a JoinGroup after the retry timer
		rediscover  bool   // FindCoordinator
		fatal       error  // stops with this error
		memberAfter string // member id in the next join
		lost        bool
	}{
		{code: kerr.UnknownMemberID.Code, rejoinNow: true, memberAfter: "", lost: true},
		{code: kerr.RebalanceInProgress.Code, rejoinNow: true, memberAfter: "m1"},
		{code: kerr.CoordinatorLoadInProgress.Code, backoff: true, memberAfter: "m1"},
		{code: kerr.CoordinatorNotAvailable.Code, rediscover: true, memberAfter: "m1"},
		{code: kerr.NotCoordinator.Code, rediscover: true, memberAfter: "m1"},
		{code: kerr.FencedInstanceID.Code, fatal: ErrFenced, lost: true},
		{code: kerr.InconsistentGroupProtocol.Code, fatal: kerr.InconsistentGroupProtocol, lost: true},
		{code: kerr.InvalidSessionTimeout.Code, fatal: kerr.InvalidSessionTimeout, lost: true},
		{code: kerr.InvalidGroupID.Code, fatal: kerr.InvalidGroupID, lost: true},
		{code: kerr.GroupAuthorizationFailed.Code, fatal: kerr.GroupAuthorizationFailed, lost: true},
		{code: kerr.GroupMaxSizeReached.Code, fatal: kerr.GroupMaxSizeReached, lost: true},
		{code: kerr.UnsupportedVersion.Code, fatal: kerr.UnsupportedVersion, lost: true},
	}
	for _, c := range cases {
		t.Run(kerr.ErrorForCode(c.code).Error(), func(t *testing.T) {
			d := newDrv(t, testConfig(coopOnly...))
			d.stable(true, 1, "cooperative-sticky", tp("t", 0, 1))
			wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
			d.collect()
			id, _ := take[*pb.JoinGroupRequest](d)
			d.respond(id, &pb.JoinGroupResponse{ErrorCode: int32(c.code)}, nil)
			if c.lost {
				cb := d.callback(Lost, "t[0 1]")
				d.done(cb)
			}
			d.noCallbacks()
			if c.fatal != nil {
				if !d.stopped || !errors.Is(d.err, c.fatal) || d.m.Phase() != Stopped {
					t.Fatalf("stopped %v err %v", d.stopped, d.err)
				}
				none[*pb.JoinGroupRequest](d)
				wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), ErrIllegalState)
				wantErr(t, d.m.Commit(d.now, 1, nil, &d.fx), ErrIllegalState)
				return
			}
			switch {
			case c.backoff:
				none[*pb.JoinGroupRequest](d)
				d.fire(TimerRetry)
			case c.rediscover:
				none[*pb.JoinGroupRequest](d)
				d.found(true)
			}
			_, req := take[*pb.JoinGroupRequest](d)
			if req.GetMemberId() != c.memberAfter {
				t.Fatalf("member id %q, want %q", req.GetMemberId(), c.memberAfter)
			}
			if c.lost {
				sub, _ := assignor.DecodeSubscription(req.GetProtocols()[0].GetMetadata())
				if sub.Generation != -1 || len(sub.OwnedPartitions) != 0 {
					t.Fatalf("after reset the join sends %+v", sub)
				}
			} else if got := ownedOf(t, req, "cooperative-sticky"); got != "t[0 1]" {
				t.Fatalf("owned %q", got)
			}
		})
	}
}

func TestJoinTransportErrorRediscovers(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.found(true)
	id, _ := take[*pb.JoinGroupRequest](d)
	d.respond(id, nil, errors.New("broken pipe"))
	none[*pb.JoinGroupRequest](d)
	fid, _ := take[*FindCoordinator](d)
	d.respond(fid, nil, errors.New("connection refused"))
	none[*FindCoordinator](d)
	d.fire(TimerRetry)
	d.found(true)
	take[*pb.JoinGroupRequest](d)
}

// KIP-568: each EnforceRebalance case.
func TestEnforceRebalance(t *testing.T) {
	t.Run("stable cooperative keeps partitions and sends the reason", func(t *testing.T) {
		d := newDrv(t, testConfig(coopOnly...))
		d.stable(true, 1, "cooperative-sticky", tp("t", 0))
		wantErr(t, d.m.EnforceRebalance(d.now, "scale", &d.fx), nil)
		d.collect()
		d.noCallbacks()
		_, req := take[*pb.JoinGroupRequest](d)
		if req.GetReason() != "scale" || ownedOf(t, req, "cooperative-sticky") != "t[0]" || req.GetMemberId() != "m1" {
			t.Fatalf("join %v", req)
		}
	})
	t.Run("rebalance in progress", func(t *testing.T) {
		d := newDrv(t, testConfig(coopOnly...))
		d.stable(true, 1, "cooperative-sticky", tp("t", 0))
		wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
		d.collect()
		wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), ErrRebalanceInProgress)
		d.joinAs("m1", 2, "cooperative-sticky")
		wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), ErrRebalanceInProgress)
		d.syncWith(tp("t", 0))
		wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil) // retry after it
	})
	t.Run("coordinator unknown", func(t *testing.T) {
		d := newDrv(t, testConfig(coopOnly...))
		d.stable(true, 1, "cooperative-sticky", tp("t", 0))
		d.advance(time.Second)
		id, _ := take[*pb.HeartbeatRequest](d)
		d.respond(id, &pb.HeartbeatResponse{ErrorCode: int32(kerr.NotCoordinator.Code)}, nil)
		wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), ErrCoordinatorNotAvailable)
	})
	t.Run("not in an active group is no error", func(t *testing.T) {
		d := newDrv(t, testConfig(coopOnly...))
		wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
		d.collect()
		if len(d.reqs) != 1 {
			t.Fatalf("requests %s", d.describeReqs())
		}
	})
	t.Run("after close", func(t *testing.T) {
		d := newDrv(t, testConfig(coopOnly...))
		d.stable(true, 1, "cooperative-sticky", tp("t", 0))
		d.m.Close(d.now, &d.fx)
		d.collect()
		wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), ErrIllegalState)
	})
	t.Run("eager revokes first", func(t *testing.T) {
		d := newDrv(t, testConfig(rangeOne...))
		d.stable(false, 1, "range", tp("t", 0))
		wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
		d.collect()
		d.callback(Revoked, "t[0]")
		none[*pb.JoinGroupRequest](d)
	})
}

// Static membership: a restarted instance joins with its instance id and no
// member id and gets its partitions back in the same generation; Close does
// not leave the group.
func TestStaticRestart(t *testing.T) {
	cfg := testConfig(coopOnly...)
	cfg.InstanceID = "i1"
	d := newDrv(t, cfg)
	d.found(true)
	id, req := take[*pb.JoinGroupRequest](d)
	if req.GetGroupInstanceId() != "i1" || req.GetMemberId() != "" {
		t.Fatalf("static join %v", req)
	}
	// The coordinator replaces the old member id and keeps generation 7.
	d.respond(id, joinOK("m9", 7, "cooperative-sticky", "other"), nil)
	sid, sync := take[*pb.SyncGroupRequest](d)
	if sync.GetGroupInstanceId() != "i1" || sync.GetGenerationId() != 7 || sync.GetMemberId() != "m9" {
		t.Fatalf("sync %v", sync)
	}
	d.respond(sid, &pb.SyncGroupResponse{Assignment: assignmentOf(tp("t", 1, 3))}, nil)
	d.callback(Assigned, "t[1 3]")
	d.advance(time.Second)
	_, hb := take[*pb.HeartbeatRequest](d)
	if hb.GetGroupInstanceId() != "i1" {
		t.Fatalf("heartbeat %v", hb)
	}
	d.m.Close(d.now, &d.fx)
	d.collect()
	d.done(d.callback(Revoked, "t[1 3]"))
	none[*pb.LeaveGroupRequest](d)
	if !d.stopped || d.err != nil {
		t.Fatalf("stopped %v err %v", d.stopped, d.err)
	}
}

func TestFencedStaticMemberStops(t *testing.T) {
	cfg := testConfig(coopOnly...)
	cfg.InstanceID = "i1"
	d := newDrv(t, cfg)
	d.stable(true, 2, "cooperative-sticky", tp("t", 0))
	d.advance(time.Second)
	id, _ := take[*pb.HeartbeatRequest](d)
	d.respond(id, &pb.HeartbeatResponse{ErrorCode: int32(kerr.FencedInstanceID.Code)}, nil)
	d.callback(Lost, "t[0]")
	if !d.stopped || !errors.Is(d.err, ErrFenced) || !errors.Is(d.err, kerr.FencedInstanceID) {
		t.Fatalf("stopped %v err %v", d.stopped, d.err)
	}
	d.advance(time.Minute)
	if len(d.reqs) != 0 {
		t.Fatalf("requests after fencing: %s", d.describeReqs())
	}
}
