package member

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

var (
	coopOnly = []assignor.Balancer{assignor.CooperativeSticky()}
	rangeOne = []assignor.Balancer{assignor.Range()}
)

func TestLeaderEagerRound(t *testing.T) {
	d := newDrv(t, testConfig(rangeOne...))
	if d.m.Phase() != Discovering {
		t.Fatalf("phase %v", d.m.Phase())
	}
	d.found(false)
	id, req := take[*pb.JoinGroupRequest](d)
	if req.GetMemberId() != "" || req.GetProtocolType() != "consumer" || len(req.GetProtocols()) != 1 || req.GetProtocols()[0].GetName() != "range" {
		t.Fatalf("first join %v", req)
	}
	d.respond(id, &pb.JoinGroupResponse{ErrorCode: int32(kerr.MemberIDRequired.Code), MemberId: "m1"}, nil)
	id, req = take[*pb.JoinGroupRequest](d)
	if req.GetMemberId() != "m1" {
		t.Fatalf("second join member id %q", req.GetMemberId())
	}
	other := &pb.JoinGroupMember{MemberId: "m2", Metadata: req.GetProtocols()[0].GetMetadata()}
	self := &pb.JoinGroupMember{MemberId: "m1", Metadata: req.GetProtocols()[0].GetMetadata()}
	d.respond(id, joinOK("m1", 1, "range", "m1", self, other), nil)
	if !d.m.Leader() {
		t.Fatal("not leader")
	}
	id, sync := take[*pb.SyncGroupRequest](d)
	if sync.GetGenerationId() != 1 || len(sync.GetAssignments()) != 2 {
		t.Fatalf("sync %v", sync)
	}
	got := map[string]string{}
	for _, a := range sync.GetAssignments() {
		as, err := assignor.DecodeAssignment(a.GetAssignment())
		if err != nil {
			t.Fatal(err)
		}
		got[a.GetMemberId()] = tpString(as.Topics)
	}
	if got["m1"] != "t[0 1]" || got["m2"] != "t[2 3]" {
		t.Fatalf("range plan %v", got)
	}
	d.respond(id, &pb.SyncGroupResponse{Assignment: assignmentOf(tp("t", 0, 1))}, nil)
	d.callback(Assigned, "t[0 1]")
	if d.m.Phase() != Stable || d.m.Generation() != 1 {
		t.Fatalf("phase %v gen %d", d.m.Phase(), d.m.Generation())
	}

	// Heartbeats on the interval.
	d.advance(time.Second)
	hb, h := take[*pb.HeartbeatRequest](d)
	if h.GetGenerationId() != 1 || h.GetMemberId() != "m1" {
		t.Fatalf("heartbeat %v", h)
	}
	// A rebalance: eager revokes everything and does not join before the
	// callback returned.
	d.respond(hb, &pb.HeartbeatResponse{ErrorCode: int32(kerr.RebalanceInProgress.Code)}, nil)
	cb := d.callback(Revoked, "t[0 1]")
	if !cb.Wait {
		t.Fatal("eager revoke does not block")
	}
	none[*pb.JoinGroupRequest](d)
	d.advance(5 * time.Second)
	none[*pb.JoinGroupRequest](d)
	d.done(cb)
	_, req = take[*pb.JoinGroupRequest](d)
	if req.GetMemberId() != "m1" {
		t.Fatalf("rejoin %v", req)
	}
	sub, _ := assignor.DecodeSubscription(req.GetProtocols()[0].GetMetadata())
	if sub.Generation != 1 || len(sub.OwnedPartitions) != 0 {
		t.Fatalf("rejoin subscription %+v", sub)
	}
}

func TestLeaderAsksMetadataForUnsizedTopics(t *testing.T) {
	cfg := testConfig(rangeOne...)
	cfg.Partitions = nil
	d := newDrv(t, cfg)
	d.found(false)
	id, req := take[*pb.JoinGroupRequest](d)
	self := &pb.JoinGroupMember{MemberId: "m1", Metadata: req.GetProtocols()[0].GetMetadata()}
	d.respond(id, joinOK("m1", 1, "range", "m1", self), nil)
	id, meta := take[*MetadataRequest](d)
	if len(meta.Topics) != 1 || meta.Topics[0] != "t" {
		t.Fatalf("metadata %v", meta)
	}
	none[*pb.SyncGroupRequest](d)
	d.respond(id, nil, errors.New("connection refused"))
	d.fire(TimerRetry)
	id, _ = take[*MetadataRequest](d)
	d.respond(id, &MetadataResponse{Partitions: map[string]int32{"t": 3}}, nil)
	_, sync := take[*pb.SyncGroupRequest](d)
	as, _ := assignor.DecodeAssignment(sync.GetAssignments()[0].GetAssignment())
	if tpString(as.Topics) != "t[0 1 2]" {
		t.Fatalf("assignment %v", tpString(as.Topics))
	}
}

func TestCooperativeRound(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.stable(true, 1, "cooperative-sticky", tp("t", 0, 1, 2, 3))
	d.advance(time.Second)
	hb, _ := take[*pb.HeartbeatRequest](d)
	d.respond(hb, &pb.HeartbeatResponse{ErrorCode: int32(kerr.RebalanceInProgress.Code)}, nil)
	d.noCallbacks() // cooperative: nothing revoked before the join
	req := d.joinAs("m1", 2, "cooperative-sticky")
	if got := ownedOf(t, req, "cooperative-sticky"); got != "t[0 1 2 3]" {
		t.Fatalf("owned in join %q", got)
	}
	// Commits are refused while the sync is in flight.
	wantErr(t, d.m.Commit(d.now, 7, map[string]map[int32]int64{"t": {0: 5}}, &d.fx), ErrRebalanceInProgress)
	d.syncWith(tp("t", 0, 1))
	cb := d.callback(Revoked, "t[2 3]")
	if !cb.Wait {
		t.Fatal("cooperative revoke does not block the follow-up")
	}
	d.callback(Assigned, "")
	none[*pb.JoinGroupRequest](d)
	wantErr(t, d.m.EnforceRebalance(d.now, "x", &d.fx), ErrRebalanceInProgress)
	d.done(cb)
	req = d.joinAs("m1", 3, "cooperative-sticky")
	if got := ownedOf(t, req, "cooperative-sticky"); got != "t[0 1]" {
		t.Fatalf("owned in follow-up join %q", got)
	}
	d.syncWith(tp("t", 0, 1))
	d.callback(Assigned, "")
	d.noCallbacks()
	none[*pb.JoinGroupRequest](d)
	if d.m.Phase() != Stable || tpString(d.m.Owned()) != "t[0 1]" {
		t.Fatalf("phase %v owned %v", d.m.Phase(), d.m.Owned())
	}
	// After the follow-up round the member may ask for a rebalance again.
	wantErr(t, d.m.EnforceRebalance(d.now, "again", &d.fx), nil)
}

func TestCooperativeGainsWithoutRevoking(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.stable(true, 1, "cooperative-sticky", tp("t", 0))
	wantErr(t, d.m.EnforceRebalance(d.now, "grow", &d.fx), nil)
	d.collect()
	d.noCallbacks()
	req := d.joinAs("m1", 2, "cooperative-sticky")
	if req.GetReason() != "grow" {
		t.Fatalf("reason %q", req.GetReason())
	}
	d.syncWith(tp("t", 0, 1))
	d.callback(Assigned, "t[1]")
	d.noCallbacks()
	none[*pb.JoinGroupRequest](d)
}

// Java's rule without an exclusive-ownership coordinator: [cooperative-sticky,
// range] runs eager even when the group selected cooperative-sticky.
func TestProtocolRuleWithoutExclusiveOwnership(t *testing.T) {
	d := newDrv(t, testConfig())
	d.stable(false, 1, "cooperative-sticky", tp("t", 0, 1))
	if d.m.Cooperative("cooperative-sticky") {
		t.Fatal("cooperative against a coordinator without exclusive ownership")
	}
	wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
	d.collect()
	cb := d.callback(Revoked, "t[0 1]")
	none[*pb.JoinGroupRequest](d)
	d.done(cb)
	req, _ := take[*pb.JoinGroupRequest](d)
	_ = req
}

// Against cohort the member follows the selected assignor.
func TestProtocolRuleWithExclusiveOwnership(t *testing.T) {
	d := newDrv(t, testConfig())
	d.stable(true, 1, "cooperative-sticky", tp("t", 0, 1))
	if !d.m.Cooperative("cooperative-sticky") || d.m.Cooperative("range") {
		t.Fatal("protocol does not follow the selected assignor")
	}
	wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
	d.collect()
	d.noCallbacks()
	req := d.joinAs("m1", 2, "cooperative-sticky")
	if got := ownedOf(t, req, "cooperative-sticky"); got != "t[0 1]" {
		t.Fatalf("owned %q", got)
	}
}

// Downgrade: the member kept its partitions through JoinGroup, the group
// selected an eager assignor: everything is revoked before SyncGroup.
func TestDowngradeRevokesBeforeSync(t *testing.T) {
	d := newDrv(t, testConfig())
	d.stable(true, 1, "cooperative-sticky", tp("t", 0, 1))
	wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
	d.collect()
	d.joinAs("m1", 2, "range")
	cb := d.callback(Revoked, "t[0 1]")
	if !cb.Wait || d.m.Phase() != Downgrading {
		t.Fatalf("wait %v phase %v", cb.Wait, d.m.Phase())
	}
	none[*pb.SyncGroupRequest](d)
	wantErr(t, d.m.Commit(d.now, 1, nil, &d.fx), ErrRebalanceInProgress)
	d.done(cb)
	d.syncWith(tp("t", 0))
	d.callback(Assigned, "t[0]")
	// The next rebalance in this eager generation revokes first.
	wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
	d.collect()
	cb = d.callback(Revoked, "t[0]")
	none[*pb.JoinGroupRequest](d)
	d.done(cb)
	_, req := take[*pb.JoinGroupRequest](d)
	if got := ownedOf(t, req, "cooperative-sticky"); got != "" {
		t.Fatalf("eager join sends owned %q", got)
	}
}

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

func TestSyncErrors(t *testing.T) {
	cases := []struct {
		code        int16
		rejoinNow   bool
		backoff     bool
		rediscover  bool
		fatal       error
		memberAfter string
		lost        bool
	}{
		{code: kerr.RebalanceInProgress.Code, rejoinNow: true, memberAfter: "m1"},
		{code: kerr.UnknownMemberID.Code, rejoinNow: true, memberAfter: "", lost: true},
		{code: kerr.IllegalGeneration.Code, rejoinNow: true, memberAfter: "m1", lost: true},
		{code: kerr.CoordinatorNotAvailable.Code, rediscover: true, memberAfter: "m1"},
		{code: kerr.NotCoordinator.Code, rediscover: true, memberAfter: "m1"},
		{code: kerr.CoordinatorLoadInProgress.Code, backoff: true, memberAfter: "m1"},
		{code: kerr.FencedInstanceID.Code, fatal: ErrFenced, lost: true},
	}
	for _, c := range cases {
		t.Run(kerr.ErrorForCode(c.code).Error(), func(t *testing.T) {
			d := newDrv(t, testConfig(coopOnly...))
			d.stable(true, 1, "cooperative-sticky", tp("t", 0, 1))
			wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
			d.collect()
			d.joinAs("m1", 2, "cooperative-sticky")
			id, _ := take[*pb.SyncGroupRequest](d)
			d.respond(id, &pb.SyncGroupResponse{ErrorCode: int32(c.code)}, nil)
			if c.lost {
				d.done(d.callback(Lost, "t[0 1]"))
			}
			d.noCallbacks()
			if c.fatal != nil {
				if !d.stopped || !errors.Is(d.err, c.fatal) {
					t.Fatalf("stopped %v err %v", d.stopped, d.err)
				}
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
			want := "t[0 1]"
			if c.lost {
				want = ""
			}
			if got := ownedOf(t, req, "cooperative-sticky"); got != want {
				t.Fatalf("owned %q, want %q", got, want)
			}
		})
	}
}

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

func TestAssignmentOfUnsubscribedTopicIgnored(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.found(true)
	d.joinAs("m1", 1, "cooperative-sticky")
	d.syncWith(tp("other", 0), tp("t", 1))
	d.callback(Assigned, "t[1]")
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{Topics: []string{"t"}},
		{Group: "g"},
		{Group: "g", Topics: []string{""}},
		{Group: "g", Topics: []string{"t"}, Balancers: []assignor.Balancer{assignor.Range(), assignor.Range()}},
		{Group: "g", Topics: []string{"t"}, SessionTimeout: time.Second, HeartbeatInterval: 2 * time.Second},
		{Group: "g", Topics: []string{"t"}, SessionTimeout: -1},
		{Group: "g", Topics: []string{"t"}, Partitions: map[string]int32{"t": 0}},
	}
	for i, c := range bad {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%d: %v", i, err)
		}
	}
	var c = Config{Group: "g", Topics: []string{"t"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.SessionTimeout != DefaultSessionTimeout || len(c.Balancers) != 2 || c.Balancers[0].ProtocolName() != "cooperative-sticky" {
		t.Fatalf("defaults %+v", c)
	}
}

// The leader looks at the partition counts it assigned from Metadata every
// MetadataMaxAge and rejoins when one changed.
func TestLeaderRejoinsWhenPartitionsChange(t *testing.T) {
	cfg := testConfig(coopOnly...)
	cfg.Partitions = nil
	cfg.MetadataMaxAge = time.Minute
	d := newDrv(t, cfg)
	d.found(true)
	id, req := take[*pb.JoinGroupRequest](d)
	self := &pb.JoinGroupMember{MemberId: "m1", Metadata: req.GetProtocols()[0].GetMetadata()}
	d.respond(id, joinOK("m1", 1, "cooperative-sticky", "m1", self), nil)
	id, _ = take[*MetadataRequest](d)
	d.respond(id, &MetadataResponse{Partitions: map[string]int32{"t": 2}}, nil)
	d.syncWith(tp("t", 0, 1))
	d.callback(Assigned, "t[0 1]")
	// Unchanged: nothing happens, the check comes again.
	d.idle(time.Minute)
	id, meta := take[*MetadataRequest](d)
	if len(meta.Topics) != 1 || meta.Topics[0] != "t" {
		t.Fatalf("metadata check %v", meta)
	}
	d.respond(id, &MetadataResponse{Partitions: map[string]int32{"t": 2}}, nil)
	none[*pb.JoinGroupRequest](d)
	d.idle(time.Minute)
	id, _ = take[*MetadataRequest](d)
	d.respond(id, &MetadataResponse{Partitions: map[string]int32{"t": 3}}, nil)
	_, join := take[*pb.JoinGroupRequest](d)
	if join.GetReason() == "" || ownedOf(t, join, "cooperative-sticky") != "t[0 1]" {
		t.Fatalf("rejoin %v", join)
	}
	d.noCallbacks()
}

// A follower never checks metadata.
func TestFollowerDoesNotCheckMetadata(t *testing.T) {
	cfg := testConfig(coopOnly...)
	cfg.Partitions = nil
	cfg.MetadataMaxAge = time.Second
	d := newDrv(t, cfg)
	d.stable(true, 1, "cooperative-sticky", tp("t", 0))
	d.idle(10 * time.Second)
	none[*MetadataRequest](d)
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
