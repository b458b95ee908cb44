package coordinator

import (
	"testing"
	"time"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// §2.6: SyncGroup checks in order, on a Stable generation-1 group.
func TestSyncChecks(t *testing.T) {
	ok := func(id string) *pb.SyncGroupResponse {
		return &pb.SyncGroupResponse{ProtocolType: strp("consumer"), ProtocolName: strp("range"), Assignment: []byte("a-" + id)}
	}
	cases := []struct {
		name string
		req  func(ids []string) *pb.SyncGroupRequest
		want func(ids []string) *pb.SyncGroupResponse
	}{
		{"v0-v4 without protocol fields", func(ids []string) *pb.SyncGroupRequest {
			return &pb.SyncGroupRequest{GroupId: "g", MemberId: ids[1], GenerationId: 1}
		}, func(ids []string) *pb.SyncGroupResponse { return ok(ids[1]) }},
		{"v5 matching protocol type and name", func(ids []string) *pb.SyncGroupRequest {
			return &pb.SyncGroupRequest{GroupId: "g", MemberId: ids[1], GenerationId: 1, ProtocolType: strp("consumer"), ProtocolName: strp("range"), ApiVersion: 5}
		}, func(ids []string) *pb.SyncGroupResponse { return ok(ids[1]) }},
		{"absent protocol name is not checked", func(ids []string) *pb.SyncGroupRequest {
			return &pb.SyncGroupRequest{GroupId: "g", MemberId: ids[1], GenerationId: 1, ProtocolType: strp("consumer")}
		}, func(ids []string) *pb.SyncGroupResponse { return ok(ids[1]) }},
		{"protocol type mismatch", func(ids []string) *pb.SyncGroupRequest {
			return &pb.SyncGroupRequest{GroupId: "g", MemberId: ids[1], GenerationId: 1, ProtocolType: strp("connect"), ProtocolName: strp("range")}
		}, func([]string) *pb.SyncGroupResponse { return syncError(ErrInconsistentGroupProto) }},
		{"protocol name mismatch", func(ids []string) *pb.SyncGroupRequest {
			return &pb.SyncGroupRequest{GroupId: "g", MemberId: ids[1], GenerationId: 1, ProtocolType: strp("consumer"), ProtocolName: strp("roundrobin")}
		}, func([]string) *pb.SyncGroupResponse { return syncError(ErrInconsistentGroupProto) }},
		{"empty protocol type", func(ids []string) *pb.SyncGroupRequest {
			return &pb.SyncGroupRequest{GroupId: "g", MemberId: ids[1], GenerationId: 1, ProtocolType: strp("")}
		}, func([]string) *pb.SyncGroupResponse { return syncError(ErrInconsistentGroupProto) }},
		{"generation checked before protocol", func(ids []string) *pb.SyncGroupRequest {
			return &pb.SyncGroupRequest{GroupId: "g", MemberId: ids[1], GenerationId: 2, ProtocolType: strp("connect")}
		}, func([]string) *pb.SyncGroupResponse { return syncError(ErrIllegalGeneration) }},
		{"older generation", func(ids []string) *pb.SyncGroupRequest {
			return &pb.SyncGroupRequest{GroupId: "g", MemberId: ids[1], GenerationId: 0}
		}, func([]string) *pb.SyncGroupResponse { return syncError(ErrIllegalGeneration) }},
		{"member checked before generation", func([]string) *pb.SyncGroupRequest {
			return &pb.SyncGroupRequest{GroupId: "g", MemberId: "stranger", GenerationId: 9}
		}, func([]string) *pb.SyncGroupResponse { return syncError(ErrUnknownMemberID) }},
		{"instance id of a dynamic member", func(ids []string) *pb.SyncGroupRequest {
			return &pb.SyncGroupRequest{GroupId: "g", MemberId: ids[1], GroupInstanceId: strp("nope"), GenerationId: 1}
		}, func([]string) *pb.SyncGroupResponse { return syncError(ErrUnknownMemberID) }},
		{"empty group id first", func([]string) *pb.SyncGroupRequest {
			return &pb.SyncGroupRequest{MemberId: "stranger", GenerationId: 9}
		}, func([]string) *pb.SyncGroupResponse { return syncError(ErrInvalidGroupID) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			ids := h.stableGroup(2)
			hd := h.handle()
			h.g.Sync(h.now, tc.req(ids), hd, &h.fx)
			h.apply()
			checkMsg(t, "answer", tc.want(ids), answer[*pb.SyncGroupResponse](h, hd))
			h.wantState(Stable, 1, ids...)
		})
	}
}

// §2.12 SyncGroup row: Empty, PreparingRebalance and Dead.
func TestSyncByState(t *testing.T) {
	t.Run("preparing: REBALANCE_IN_PROGRESS", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(2)
		h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
		checkMsg(t, "answer", syncError(ErrRebalanceInProgress), answer[*pb.SyncGroupResponse](h, h.sync(&pb.SyncGroupRequest{MemberId: ids[1], GenerationId: 1})))
	})
	t.Run("empty: UNKNOWN_MEMBER_ID", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(1)
		h.leave(&pb.MemberIdentity{MemberId: ids[0]})
		checkMsg(t, "answer", syncError(ErrUnknownMemberID), answer[*pb.SyncGroupResponse](h, h.sync(&pb.SyncGroupRequest{MemberId: ids[0], GenerationId: 2})))
	})
	t.Run("dead: COORDINATOR_NOT_AVAILABLE", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(1)
		h.g.Unload(h.now, &h.fx)
		h.apply()
		checkMsg(t, "answer", syncError(ErrCoordinatorNotAvailable), answer[*pb.SyncGroupResponse](h, h.sync(&pb.SyncGroupRequest{MemberId: ids[0], GenerationId: 1})))
	})
}

// §2.6 CompletingRebalance: followers wait for the leader; the leader's map
// is applied (non-members ignored, missing members get an empty assignment)
// and everyone is answered once it is written.
func TestSyncCompletingFlow(t *testing.T) {
	h := newHarness(t)
	var hds []int
	for _, c := range []string{"a", "b", "c"} {
		hds = append(hds, h.join(&pb.JoinGroupRequest{ClientId: c, ApiVersion: 3}))
	}
	h.advance(6 * time.Second)
	ia, ib, ic := h.joinOK(hds[0]).MemberId, h.joinOK(hds[1]).MemberId, h.joinOK(hds[2]).MemberId
	sb := h.sync(&pb.SyncGroupRequest{MemberId: ib, GenerationId: 1, Assignments: []*pb.SyncGroupAssignment{{MemberId: ib, Assignment: []byte("ignored: not the leader")}}})
	h.wantParked(sb)
	if _, pending := h.g.pendSync[ib]; pending {
		t.Fatal("syncing member still pending sync")
	}
	h.hold = true
	sa := h.sync(&pb.SyncGroupRequest{MemberId: ia, GenerationId: 1, Assignments: []*pb.SyncGroupAssignment{
		{MemberId: ia, Assignment: []byte("A")}, {MemberId: ib, Assignment: []byte("B")}, {MemberId: "stranger", Assignment: []byte("X")}}})
	h.wantParked(sa, sb)
	h.wantState(CompletingRebalance, 1, ia, ib, ic)
	// A second SyncGroup from the same follower supersedes the parked one.
	sb2 := h.sync(&pb.SyncGroupRequest{MemberId: ib, GenerationId: 1})
	checkMsg(t, "superseded", syncError(ErrNotCoordinator), answer[*pb.SyncGroupResponse](h, sb))
	h.release(nil)
	h.wantState(Stable, 1, ia, ib, ic)
	checkMsg(t, "leader", &pb.SyncGroupResponse{ProtocolType: strp("consumer"), ProtocolName: strp("range"), Assignment: []byte("A")}, answer[*pb.SyncGroupResponse](h, sa))
	checkMsg(t, "follower", &pb.SyncGroupResponse{ProtocolType: strp("consumer"), ProtocolName: strp("range"), Assignment: []byte("B")}, answer[*pb.SyncGroupResponse](h, sb2))
	// c was missing from the leader's map: empty assignment; it syncs late, in Stable.
	sc := h.sync(&pb.SyncGroupRequest{MemberId: ic, GenerationId: 1})
	checkMsg(t, "late follower", &pb.SyncGroupResponse{ProtocolType: strp("consumer"), ProtocolName: strp("range"), Assignment: []byte{}}, answer[*pb.SyncGroupResponse](h, sc))
	h.wantNoTimer(syncKey)
	rec := groupRecords(h.written)[0]
	if len(rec.Members) != 3 || string(rec.Members[2].Assignment) != "" || string(rec.Members[1].Assignment) != "B" {
		t.Fatalf("record %v", rec)
	}
}

// A leader may give a member an empty assignment, which arrives as nil.
func TestSyncEmptyAssignmentEntry(t *testing.T) {
	h := newHarness(t)
	a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3})
	b := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 3})
	h.advance(6 * time.Second)
	ia, ib := h.joinOK(a).MemberId, h.joinOK(b).MemberId
	h.sync(&pb.SyncGroupRequest{MemberId: ia, GenerationId: 1, Assignments: []*pb.SyncGroupAssignment{{MemberId: ia, Assignment: []byte("A")}, {MemberId: ib, Assignment: nil}}})
	h.wantState(Stable, 1, ia, ib)
	if h.g.members.get(ib).assignment == nil {
		t.Fatal("nil assignment stored")
	}
	checkMsg(t, "follower", &pb.SyncGroupResponse{ProtocolType: strp("consumer"), ProtocolName: strp("range"), Assignment: []byte{}},
		answer[*pb.SyncGroupResponse](h, h.sync(&pb.SyncGroupRequest{MemberId: ib, GenerationId: 1})))
}

// A group record larger than MaxRecordBytes (subscription metadata or
// assignments) is not written: the leader's SyncGroup and the parked ones
// get UNKNOWN_SERVER_ERROR (Kafka's MESSAGE_TOO_LARGE mapping) and the group
// rebalances.
func TestSyncOversizeGroupRecord(t *testing.T) {
	small := func(c *Config) { c.MaxRecordBytes = 2048 }
	t.Run("metadata", func(t *testing.T) {
		h := newHarness(t, small)
		a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3, Protocols: []*pb.Protocol{{Name: "range", Metadata: make([]byte, 2100)}}})
		b := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 3})
		h.advance(6 * time.Second)
		ia, ib := h.joinOK(a).MemberId, h.joinOK(b).MemberId // joining itself is fine
		sb := h.sync(&pb.SyncGroupRequest{MemberId: ib, GenerationId: 1})
		sa := h.sync(&pb.SyncGroupRequest{MemberId: ia, GenerationId: 1, Assignments: []*pb.SyncGroupAssignment{{MemberId: ia, Assignment: []byte("A")}}})
		checkMsg(t, "leader", syncError(ErrUnknownServerError), answer[*pb.SyncGroupResponse](h, sa))
		checkMsg(t, "follower", syncError(ErrUnknownServerError), answer[*pb.SyncGroupResponse](h, sb))
		h.wantState(PreparingRebalance, 1, ia, ib)
		for _, r := range h.written {
			if r.GetGroup() != nil {
				t.Fatalf("wrote a group record: %v", h.written)
			}
		}
	})
	t.Run("assignment", func(t *testing.T) {
		h := newHarness(t, small)
		a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3})
		h.advance(3 * time.Second)
		ia := h.joinOK(a).MemberId
		sa := h.sync(&pb.SyncGroupRequest{MemberId: ia, GenerationId: 1, Assignments: []*pb.SyncGroupAssignment{{MemberId: ia, Assignment: make([]byte, 3000)}}})
		checkMsg(t, "leader", syncError(ErrUnknownServerError), answer[*pb.SyncGroupResponse](h, sa))
		h.wantState(PreparingRebalance, 1, ia)
	})
}

// §2.7: Heartbeat checks and per-state answers.
func TestHeartbeat(t *testing.T) {
	h := newHarness(t)
	ids := h.stableGroup(2)
	hb := func(r *pb.HeartbeatRequest) int32 {
		code := h.g.Heartbeat(h.now, r, &h.fx)
		h.apply()
		return code
	}
	checks := []struct {
		name string
		req  *pb.HeartbeatRequest
		want int32
	}{
		{"stable", &pb.HeartbeatRequest{GroupId: "g", MemberId: ids[1], GenerationId: 1}, ErrNone},
		{"empty group id", &pb.HeartbeatRequest{MemberId: ids[1], GenerationId: 1}, ErrInvalidGroupID},
		{"unknown member before generation", &pb.HeartbeatRequest{GroupId: "g", MemberId: "x", GenerationId: 5}, ErrUnknownMemberID},
		{"instance of a dynamic member", &pb.HeartbeatRequest{GroupId: "g", MemberId: ids[1], GroupInstanceId: strp("i"), GenerationId: 1}, ErrUnknownMemberID},
		{"wrong generation", &pb.HeartbeatRequest{GroupId: "g", MemberId: ids[1], GenerationId: 2}, ErrIllegalGeneration},
		{"generation -1", &pb.HeartbeatRequest{GroupId: "g", MemberId: ids[1], GenerationId: -1}, ErrIllegalGeneration},
	}
	for _, c := range checks {
		if got := hb(c.req); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
	if got := hb(&pb.HeartbeatRequest{GroupId: "g", MemberId: ids[1], GenerationId: 1}); got != ErrRebalanceInProgress {
		t.Errorf("preparing: %d", got)
	}
	h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 3, MemberId: ids[1]})
	h.wantState(CompletingRebalance, 2, ids...)
	if got := hb(&pb.HeartbeatRequest{GroupId: "g", MemberId: ids[1], GenerationId: 2}); got != ErrNone {
		t.Errorf("completing: %d", got)
	}
	if got := hb(&pb.HeartbeatRequest{GroupId: "g", MemberId: ids[1], GenerationId: 1}); got != ErrIllegalGeneration {
		t.Errorf("completing, old generation: %d", got)
	}
	h.leave(&pb.MemberIdentity{MemberId: ids[0]}, &pb.MemberIdentity{MemberId: ids[1]})
	h.wantState(Empty, 3)
	if got := hb(&pb.HeartbeatRequest{GroupId: "g", MemberId: ids[1], GenerationId: 3}); got != ErrUnknownMemberID {
		t.Errorf("empty: %d", got)
	}
	h.g.Unload(h.now, &h.fx)
	h.apply()
	if got := hb(&pb.HeartbeatRequest{GroupId: "g", MemberId: ids[1], GenerationId: 3}); got != ErrCoordinatorNotAvailable {
		t.Errorf("dead: %d", got)
	}
}

// §2.8: LeaveGroup, single (v0-v2) and batch (v3+) with admin removal.
func TestLeaveGroup(t *testing.T) {
	t.Run("single member (v0-v2)", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(2)
		r := h.leave(&pb.MemberIdentity{MemberId: ids[1]})
		checkMsg(t, "answer", &pb.LeaveGroupResponse{Members: []*pb.LeaveGroupMemberResponse{{MemberId: ids[1]}}}, r)
		h.wantState(PreparingRebalance, 1, ids[0])
		r = h.leave(&pb.MemberIdentity{MemberId: ids[1]})
		checkMsg(t, "again", &pb.LeaveGroupResponse{Members: []*pb.LeaveGroupMemberResponse{{MemberId: ids[1], ErrorCode: ErrUnknownMemberID}}}, r)
	})
	t.Run("batch: per-member results in request order", func(t *testing.T) {
		h := newHarness(t)
		a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3})
		s := h.join(staticJoin("is", 5, ""))
		f := h.join(staticJoin("if", 5, ""))
		h.advance(6 * time.Second)
		ia, is, ifd := h.joinOK(a).MemberId, h.joinOK(s).MemberId, h.joinOK(f).MemberId
		h.syncGroup(1, ia, ia, is, ifd)
		p := answer[*pb.JoinGroupResponse](h, h.join(&pb.JoinGroupRequest{ClientId: "p", ApiVersion: 4})).MemberId
		r := h.leave(
			&pb.MemberIdentity{MemberId: "", GroupInstanceId: strp("is"), Reason: strp("admin")}, // admin removal by instance
			&pb.MemberIdentity{MemberId: "stranger"},
			&pb.MemberIdentity{MemberId: p},                                 // pending member
			&pb.MemberIdentity{MemberId: "", GroupInstanceId: strp("none")}, // unknown instance
			&pb.MemberIdentity{MemberId: ia, GroupInstanceId: strp("if")},   // fenced
			&pb.MemberIdentity{MemberId: ""},                                // neither
			&pb.MemberIdentity{MemberId: ia},
		)
		checkMsg(t, "answer", &pb.LeaveGroupResponse{Members: []*pb.LeaveGroupMemberResponse{
			{GroupInstanceId: strp("is")},
			{MemberId: "stranger", ErrorCode: ErrUnknownMemberID},
			{MemberId: p},
			{GroupInstanceId: strp("none"), ErrorCode: ErrUnknownMemberID},
			{MemberId: ia, GroupInstanceId: strp("if"), ErrorCode: ErrFencedInstanceID},
			{ErrorCode: ErrUnknownMemberID},
			{MemberId: ia},
		}}, r)
		h.wantState(PreparingRebalance, 1, ifd)
		if h.g.HasPending(p) || h.g.Leader() != ifd {
			t.Fatalf("pending %v leader %q", h.g.HasPending(p), h.g.Leader())
		}
		h.wantNoTimer(memberKey(p))
	})
	t.Run("dead: top-level COORDINATOR_NOT_AVAILABLE; empty group id: INVALID_GROUP_ID", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(1)
		r := h.leaveReq(&pb.LeaveGroupRequest{Members: []*pb.MemberIdentity{{MemberId: ids[0]}}})
		checkMsg(t, "empty id", &pb.LeaveGroupResponse{ErrorCode: ErrInvalidGroupID}, r)
		h.g.Unload(h.now, &h.fx)
		h.apply()
		checkMsg(t, "dead", &pb.LeaveGroupResponse{ErrorCode: ErrCoordinatorNotAvailable}, h.leave(&pb.MemberIdentity{MemberId: ids[0]}))
	})
	t.Run("preparing: the leaver's parked join is answered and the phase completes", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(3)
		j0 := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
		j1 := h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 3, MemberId: ids[1]})
		h.leave(&pb.MemberIdentity{MemberId: ids[0]})
		checkMsg(t, "leaver", joinError("", ErrUnknownMemberID), answer[*pb.JoinGroupResponse](h, j0))
		h.wantParked(j1)
		h.leave(&pb.MemberIdentity{MemberId: ids[2]})
		r := h.joinOK(j1)
		if r.GenerationId != 2 || r.Leader != ids[1] {
			t.Fatalf("answer %v", r)
		}
	})
	t.Run("completing: parked syncs get REBALANCE_IN_PROGRESS", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(2)
		j0 := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
		h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 3, MemberId: ids[1]})
		h.joinOK(j0)
		s := h.sync(&pb.SyncGroupRequest{MemberId: ids[1], GenerationId: 2})
		h.leave(&pb.MemberIdentity{MemberId: ids[0]})
		checkMsg(t, "sync", syncError(ErrRebalanceInProgress), answer[*pb.SyncGroupResponse](h, s))
		h.wantState(PreparingRebalance, 2, ids[1])
		if h.g.Leader() != ids[1] {
			t.Fatalf("leader %q", h.g.Leader())
		}
	})
	t.Run("last member of a Stable group: Empty at the next generation", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(1)
		h.leave(&pb.MemberIdentity{MemberId: ids[0]})
		h.wantState(Empty, 2)
		if h.g.Leader() != "" || h.g.protocolName != nil {
			t.Fatalf("leader %q protocol %v", h.g.Leader(), h.g.protocolName)
		}
		h.wantNoTimer(joinKey)
		h.wantNoTimer(memberKey(ids[0]))
	})
}
