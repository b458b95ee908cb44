package membership

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func TestHeartbeatErrors(t *testing.T) {
	cases := []struct {
		code        int16
		rejoin      bool
		rediscover  bool
		backoff     bool
		fatal       error
		lost        bool
		memberAfter string
	}{
		{code: kerr.RebalanceInProgress.Code, rejoin: true, memberAfter: "m1"},
		{code: kerr.IllegalGeneration.Code, rejoin: true, lost: true, memberAfter: "m1"},
		{code: kerr.UnknownMemberID.Code, rejoin: true, lost: true, memberAfter: ""},
		{code: kerr.FencedInstanceID.Code, fatal: ErrFenced, lost: true},
		{code: kerr.NotCoordinator.Code, rediscover: true},
		{code: kerr.CoordinatorNotAvailable.Code, rediscover: true},
		{code: kerr.CoordinatorLoadInProgress.Code, backoff: true},
		{code: kerr.GroupAuthorizationFailed.Code, fatal: kerr.GroupAuthorizationFailed, lost: true},
	}
	for _, c := range cases {
		t.Run(kerr.ErrorForCode(c.code).Error(), func(t *testing.T) {
			d := newDrv(t, testConfig(coopOnly...))
			d.stable(true, 3, "cooperative-sticky", tp("t", 2))
			d.advance(time.Second)
			id, _ := take[*pb.HeartbeatRequest](d)
			d.respond(id, &pb.HeartbeatResponse{ErrorCode: int32(c.code)}, nil)
			if c.lost {
				d.done(d.callback(Lost, "t[2]"))
			}
			d.noCallbacks()
			switch {
			case c.fatal != nil:
				if !d.stopped || !errors.Is(d.err, c.fatal) {
					t.Fatalf("stopped %v err %v", d.stopped, d.err)
				}
			case c.rejoin:
				_, req := take[*pb.JoinGroupRequest](d)
				if req.GetMemberId() != c.memberAfter {
					t.Fatalf("member id %q", req.GetMemberId())
				}
			case c.rediscover:
				none[*pb.HeartbeatRequest](d)
				none[*pb.JoinGroupRequest](d)
				d.found(true)
				// Back in the same generation with the same partitions.
				_, h := take[*pb.HeartbeatRequest](d)
				if h.GetGenerationId() != 3 || tpString(d.m.Owned()) != "t[2]" {
					t.Fatalf("heartbeat gen %d owned %v", h.GetGenerationId(), d.m.Owned())
				}
			case c.backoff:
				none[*pb.HeartbeatRequest](d)
				d.fire(TimerRetry)
				take[*pb.HeartbeatRequest](d)
			}
		})
	}
}

// A heartbeat answer about an older generation is ignored.
func TestHeartbeatStaleGenerationIgnored(t *testing.T) {
	for _, code := range []int16{kerr.IllegalGeneration.Code, kerr.UnknownMemberID.Code, kerr.FencedInstanceID.Code} {
		d := newDrv(t, testConfig(coopOnly...))
		d.stable(true, 1, "cooperative-sticky", tp("t", 0))
		d.advance(time.Second)
		hb, _ := take[*pb.HeartbeatRequest](d)
		d.respond(hb, &pb.HeartbeatResponse{ErrorCode: int32(kerr.RebalanceInProgress.Code)}, nil)
		d.joinAs("m1", 2, "cooperative-sticky")
		d.syncWith(tp("t", 0))
		d.callback(Assigned, "")
		// An earlier heartbeat of generation 1 answered late.
		d.m.hbID, d.m.hbGeneration = 99, 1
		d.respond(99, &pb.HeartbeatResponse{ErrorCode: int32(code)}, nil)
		d.noCallbacks()
		if d.stopped || d.m.Generation() != 2 || d.m.Phase() != Stable {
			t.Fatalf("%v: stopped %v gen %d phase %v", code, d.stopped, d.m.Generation(), d.m.Phase())
		}
	}
}

// During a rebalance REBALANCE_IN_PROGRESS from a heartbeat is ignored.
func TestHeartbeatRebalanceInProgressDuringSync(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.stable(true, 1, "cooperative-sticky", tp("t", 0))
	wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
	d.collect()
	d.joinAs("m1", 2, "cooperative-sticky")
	d.advance(time.Second)
	hb, h := take[*pb.HeartbeatRequest](d)
	if h.GetGenerationId() != 2 {
		t.Fatalf("gen %d", h.GetGenerationId())
	}
	d.respond(hb, &pb.HeartbeatResponse{ErrorCode: int32(kerr.RebalanceInProgress.Code)}, nil)
	none[*pb.JoinGroupRequest](d)
	d.syncWith(tp("t", 0))
	d.callback(Assigned, "")
	none[*pb.JoinGroupRequest](d)
}

func TestHeartbeatTransportErrorKeepsGeneration(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.stable(true, 5, "cooperative-sticky", tp("t", 1))
	for range 3 { // a failover: a few failed rounds, shorter than the session
		d.advance(time.Second)
		id, _ := take[*pb.HeartbeatRequest](d)
		d.respond(id, nil, errors.New("connection reset"))
		id, _ = take[*FindCoordinator](d)
		d.respond(id, nil, errors.New("connection refused"))
		d.fire(TimerRetry)
		d.found(true)
	}
	id, h := take[*pb.HeartbeatRequest](d)
	d.respond(id, &pb.HeartbeatResponse{}, nil)
	d.noCallbacks()
	if h.GetGenerationId() != 5 || d.m.Generation() != 5 || tpString(d.m.Owned()) != "t[1]" {
		t.Fatalf("gen %d owned %v", d.m.Generation(), d.m.Owned())
	}
}

// No answer for a session timeout: the partitions are lost.
func TestSessionExpiryLoses(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.stable(true, 1, "cooperative-sticky", tp("t", 0, 1))
	for d.now.Before(t0.Add(9 * time.Second)) {
		d.advance(500 * time.Millisecond)
		if len(d.reqs) > 0 {
			d.reqs = nil // nothing answers
		}
		d.noCallbacks()
	}
	d.advance(2 * time.Second)
	cb := d.callback(Lost, "t[0 1]")
	d.reqs = nil
	d.done(cb)
	if d.m.Generation() != -1 || len(d.m.Owned()) != 0 {
		t.Fatalf("gen %d owned %v", d.m.Generation(), d.m.Owned())
	}
	_, req := take[*pb.JoinGroupRequest](d)
	if req.GetMemberId() != "" {
		t.Fatalf("member id %q after session expiry", req.GetMemberId())
	}
}

// A JoinGroup waiting for its answer keeps the session (the coordinator keeps
// a member parked in join).
func TestSessionNotExpiredWhileJoinInFlight(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.stable(true, 1, "cooperative-sticky", tp("t", 0))
	wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
	d.collect()
	id, _ := take[*pb.JoinGroupRequest](d)
	d.advance(15 * time.Second)
	d.noCallbacks()
	d.respond(id, joinOK("m1", 2, "cooperative-sticky", "x"), nil)
	d.syncWith(tp("t", 0))
	d.callback(Assigned, "")
	d.noCallbacks()
}
