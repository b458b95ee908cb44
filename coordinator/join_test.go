package coordinator

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// rawJoin sends a JoinGroup exactly as given (no defaults filled in).
func (h *harness) rawJoin(req *pb.JoinGroupRequest) int {
	id := h.handle()
	h.g.Join(h.now, req, h.newID(), id, &h.fx)
	h.apply()
	return id
}

func validJoin() *pb.JoinGroupRequest {
	return &pb.JoinGroupRequest{
		GroupId: "g", ClientId: "c", ApiVersion: 3, SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 60_000,
		ProtocolType: "consumer", Protocols: []*pb.Protocol{{Name: "range", Metadata: []byte{1}}},
	}
}

// Pre-checks of §2.3/§2.4 in their order; error answers echo the member id
// with generation -1 and no leader, protocol or members.
func TestJoinPreChecks(t *testing.T) {
	cases := []struct {
		name string
		edit func(*pb.JoinGroupRequest)
		want *pb.JoinGroupResponse
	}{
		{"empty group id", func(r *pb.JoinGroupRequest) { r.GroupId = "" },
			&pb.JoinGroupResponse{ErrorCode: ErrInvalidGroupID, GenerationId: -1}},
		{"group id checked before session timeout", func(r *pb.JoinGroupRequest) { r.GroupId, r.SessionTimeoutMs, r.MemberId = "", 1, "m" },
			&pb.JoinGroupResponse{ErrorCode: ErrInvalidGroupID, GenerationId: -1, MemberId: "m"}},
		{"session below min", func(r *pb.JoinGroupRequest) { r.SessionTimeoutMs = 5_999 },
			&pb.JoinGroupResponse{ErrorCode: ErrInvalidSessionTimeout, GenerationId: -1}},
		{"session above max", func(r *pb.JoinGroupRequest) { r.SessionTimeoutMs = 1_800_001 },
			&pb.JoinGroupResponse{ErrorCode: ErrInvalidSessionTimeout, GenerationId: -1}},
		{"negative session", func(r *pb.JoinGroupRequest) { r.SessionTimeoutMs = -1 },
			&pb.JoinGroupResponse{ErrorCode: ErrInvalidSessionTimeout, GenerationId: -1}},
		{"negative rebalance timeout", func(r *pb.JoinGroupRequest) { r.RebalanceTimeoutMs = -5 },
			&pb.JoinGroupResponse{ErrorCode: ErrInvalidSessionTimeout, GenerationId: -1}},
		{"session checked before member id", func(r *pb.JoinGroupRequest) { r.SessionTimeoutMs, r.MemberId = 0, "unknown" },
			&pb.JoinGroupResponse{ErrorCode: ErrInvalidSessionTimeout, GenerationId: -1, MemberId: "unknown"}},
		{"unknown member id", func(r *pb.JoinGroupRequest) { r.MemberId = "unknown" },
			&pb.JoinGroupResponse{ErrorCode: ErrUnknownMemberID, GenerationId: -1, MemberId: "unknown"}},
		{"empty protocol type", func(r *pb.JoinGroupRequest) { r.ProtocolType = "" },
			&pb.JoinGroupResponse{ErrorCode: ErrInconsistentGroupProto, GenerationId: -1}},
		{"empty protocol list", func(r *pb.JoinGroupRequest) { r.Protocols = nil },
			&pb.JoinGroupResponse{ErrorCode: ErrInconsistentGroupProto, GenerationId: -1}},
		{"empty protocol list v4", func(r *pb.JoinGroupRequest) { r.Protocols, r.ApiVersion = nil, 4 },
			&pb.JoinGroupResponse{ErrorCode: ErrInconsistentGroupProto, GenerationId: -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			req := validJoin()
			tc.edit(req)
			hd := h.rawJoin(req)
			checkMsg(t, "join answer", tc.want, answer[*pb.JoinGroupResponse](h, hd))
			h.wantState(Empty, 0)
		})
	}
}

// The session timeout bounds are inclusive.
func TestJoinSessionTimeoutBoundsInclusive(t *testing.T) {
	for _, ms := range []int32{6_000, 1_800_000} {
		h := newHarness(t)
		req := validJoin()
		req.SessionTimeoutMs = ms
		hd := h.rawJoin(req)
		h.wantParked(hd)
		h.wantState(PreparingRebalance, 0, "c-id1")
	}
}

// Absent answers requests for a group that does not exist.
func TestAbsentGroup(t *testing.T) {
	cfg := DefaultConfig()
	cases := []struct {
		name   string
		req    proto.Message
		want   proto.Message
		create bool
	}{
		{"join without member id creates", validJoin(), nil, true},
		{"join with member id", func() *pb.JoinGroupRequest { r := validJoin(); r.MemberId = "m"; return r }(),
			&pb.JoinGroupResponse{ErrorCode: ErrUnknownMemberID, GenerationId: -1, MemberId: "m"}, false},
		{"join empty group id", func() *pb.JoinGroupRequest { r := validJoin(); r.GroupId = ""; return r }(),
			&pb.JoinGroupResponse{ErrorCode: ErrInvalidGroupID, GenerationId: -1}, false},
		{"join bad session", func() *pb.JoinGroupRequest { r := validJoin(); r.SessionTimeoutMs = 10; return r }(),
			&pb.JoinGroupResponse{ErrorCode: ErrInvalidSessionTimeout, GenerationId: -1}, false},
		{"sync", &pb.SyncGroupRequest{GroupId: "g", MemberId: "m"}, &pb.SyncGroupResponse{ErrorCode: ErrUnknownMemberID, Assignment: []byte{}}, false},
		{"sync empty group id", &pb.SyncGroupRequest{MemberId: "m"}, &pb.SyncGroupResponse{ErrorCode: ErrInvalidGroupID, Assignment: []byte{}}, false},
		{"heartbeat", &pb.HeartbeatRequest{GroupId: "g", MemberId: "m"}, &pb.HeartbeatResponse{ErrorCode: ErrUnknownMemberID}, false},
		{"heartbeat empty group id", &pb.HeartbeatRequest{MemberId: "m"}, &pb.HeartbeatResponse{ErrorCode: ErrInvalidGroupID}, false},
		{"leave", &pb.LeaveGroupRequest{GroupId: "g", Members: []*pb.MemberIdentity{{MemberId: "a"}, {GroupInstanceId: strp("i")}}},
			&pb.LeaveGroupResponse{Members: []*pb.LeaveGroupMemberResponse{{MemberId: "a", ErrorCode: ErrUnknownMemberID}, {GroupInstanceId: strp("i"), ErrorCode: ErrUnknownMemberID}}}, false},
		{"leave empty group id", &pb.LeaveGroupRequest{}, &pb.LeaveGroupResponse{ErrorCode: ErrInvalidGroupID}, false},
		{"commit generation -1 creates", &pb.OffsetCommitRequest{GroupId: "g", GenerationId: -1}, nil, true},
		{"commit generation 0", &pb.OffsetCommitRequest{GroupId: "g", Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 1}}}}},
			&pb.OffsetCommitResponse{Topics: []*pb.TopicPartitionErrors{{Name: "t", Partitions: []*pb.PartitionError{{Partition: 1, ErrorCode: ErrIllegalGeneration}}}}}, false},
		{"fetch", &pb.OffsetFetchRequest{GroupId: "g", Topics: []*pb.TopicPartitions{{Name: "t", Partitions: []int32{0, 3}}}},
			&pb.OffsetFetchResponse{Topics: []*pb.OffsetFetchTopic{{Name: "t", Partitions: []*pb.OffsetFetchPartition{{Partition: 0, Offset: -1, LeaderEpoch: -1}, {Partition: 3, Offset: -1, LeaderEpoch: -1}}}}}, false},
		{"fetch all", &pb.OffsetFetchRequest{GroupId: "g", AllTopics: true}, &pb.OffsetFetchResponse{}, false},
		{"offset delete", &pb.OffsetDeleteRequest{GroupId: "g"}, &pb.OffsetDeleteResponse{ErrorCode: ErrGroupIDNotFound}, false},
		{"describe", &pb.DescribeGroupRequest{GroupId: "g"}, &pb.DescribeGroupResponse{GroupId: "g", State: "Dead"}, false},
		{"delete", &pb.DeleteGroupRequest{GroupId: "g"}, &pb.DeleteGroupResponse{GroupId: "g", ErrorCode: ErrGroupIDNotFound}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, create := Absent(&cfg, tc.req)
			if create != tc.create {
				t.Fatalf("create = %v, want %v", create, tc.create)
			}
			if tc.want == nil {
				if resp != nil {
					t.Fatalf("answer %v, want none", resp)
				}
				return
			}
			checkMsg(t, "answer", tc.want, resp)
		})
	}
}

// JoinGroup v0 has no rebalance timeout: the session timeout is used (KAFKA-8653).
func TestJoinV0UsesSessionTimeoutAsRebalanceTimeout(t *testing.T) {
	h := newHarness(t)
	a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 0, SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 60_000})
	b := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 1, SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 20_000})
	// Initial delay: remaining = max(10s (a's rebalance timeout) - 3s, 0).
	if h.g.initial.remaining != 7*time.Second {
		t.Fatalf("initial delay remaining %v, want 7s", h.g.initial.remaining)
	}
	h.advance(6 * time.Second)
	ra, rb := h.joinOK(a), h.joinOK(b)
	h.takeWritten()
	h.syncGroup(1, ra.MemberId, ra.MemberId, rb.MemberId)
	recs := groupRecords(h.takeWritten())
	if len(recs) != 1 {
		t.Fatalf("want one group record, got %d", len(recs))
	}
	if got := recs[0].Members[0].RebalanceTimeoutMs; got != 10_000 {
		t.Fatalf("v0 member rebalance timeout %d, want the session timeout 10000", got)
	}
	if got := recs[0].Members[1].RebalanceTimeoutMs; got != 20_000 {
		t.Fatalf("v1 member rebalance timeout %d, want 20000", got)
	}
	// A rebalance now waits max(10s, 20s).
	h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 0, MemberId: ra.MemberId, SessionTimeoutMs: 10_000})
	h.wantDeadline(joinKey, h.elapsed()+20*time.Second)
}

// v0-v3: an unknown-id join adds the member at once (parked), the group
// starts its initial delay and the join completes with generation 1.
func TestJoinV3NewMemberFlow(t *testing.T) {
	for v := int32(0); v <= 3; v++ {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			h := newHarness(t)
			meta := consumerMeta("t1")
			hd := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: v, Protocols: []*pb.Protocol{{Name: "range", Metadata: meta}}})
			h.wantParked(hd)
			h.wantState(PreparingRebalance, 0, "c0-id1")
			h.wantDeadline(memberKey("c0-id1"), 5*time.Minute)
			h.wantDeadline(joinKey, 3*time.Second)
			h.advance(3*time.Second - ms)
			h.wantParked(hd)
			h.advance(ms)
			checkMsg(t, "join answer", &pb.JoinGroupResponse{
				GenerationId: 1, ProtocolType: strp("consumer"), ProtocolName: strp("range"),
				Leader: "c0-id1", MemberId: "c0-id1",
				Members: []*pb.JoinGroupMember{{MemberId: "c0-id1", Metadata: meta}},
			}, answer[*pb.JoinGroupResponse](h, hd))
			h.wantState(CompletingRebalance, 1, "c0-id1")
			h.wantDeadline(memberKey("c0-id1"), 13*time.Second) // session timeout from join completion
			rebalance := 60 * time.Second
			if v == 0 {
				rebalance = 10 * time.Second // the session timeout
			}
			h.wantDeadline(syncKey, 3*time.Second+rebalance) // rebalance timeout from join completion
			if h.g.members.get("c0-id1").isNew {
				t.Fatal("member still new after join completion")
			}
		})
	}
}

// v4+: a dynamic unknown-id join gets MEMBER_ID_REQUIRED with a new id which
// becomes pending (KIP-394); the group does not change state.
func TestJoinV4MemberIDRequired(t *testing.T) {
	for v := int32(4); v <= 9; v++ {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			h := newHarness(t)
			first := h.join(&pb.JoinGroupRequest{ClientId: "c", ApiVersion: v, SessionTimeoutMs: 7_000})
			checkMsg(t, "first join", &pb.JoinGroupResponse{ErrorCode: ErrMemberIDRequired, GenerationId: -1, MemberId: "c-id1"},
				answer[*pb.JoinGroupResponse](h, first))
			h.wantState(Empty, 0)
			if !h.g.HasPending("c-id1") {
				t.Fatal("id not pending")
			}
			h.wantDeadline(memberKey("c-id1"), 7*time.Second) // the request's session timeout
			h.advance(time.Second)
			second := h.join(&pb.JoinGroupRequest{ClientId: "c", ApiVersion: v, MemberId: "c-id1", SessionTimeoutMs: 7_000})
			h.wantParked(second)
			if h.g.HasPending("c-id1") {
				t.Fatal("id still pending after second join")
			}
			h.wantState(PreparingRebalance, 0, "c-id1")
			h.wantDeadline(memberKey("c-id1"), time.Second+5*time.Minute)
			h.advance(3 * time.Second)
			r := h.joinOK(second)
			if r.MemberId != "c-id1" || r.Leader != "c-id1" || r.GenerationId != 1 {
				t.Fatalf("answer %v", r)
			}
		})
	}
}

// A v4+ pending member expires after its session timeout; until then it
// blocks join completion (testJoinGroupCompletionWhenPendingMemberTimesOut).
func TestPendingMemberBlocksJoinUntilItExpires(t *testing.T) {
	h := newHarness(t)
	ids := h.stableGroup(1) // c0-id1, gen 1, at t=6s
	first := h.join(&pb.JoinGroupRequest{ClientId: "p", ApiVersion: 4, SessionTimeoutMs: 8_000})
	pid := answer[*pb.JoinGroupResponse](h, first).MemberId
	h.wantState(Stable, 1, ids[0]) // MEMBER_ID_REQUIRED changes nothing
	// The leader re-joins: every member has joined but the pending one has not.
	rejoin := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 4, MemberId: ids[0]})
	h.wantParked(rejoin)
	h.wantState(PreparingRebalance, 1, ids[0])
	h.advance(8*time.Second - ms)
	h.wantParked(rejoin)
	h.advance(ms)
	if h.g.HasPending(pid) {
		t.Fatal("pending member did not expire")
	}
	r := h.joinOK(rejoin)
	if r.GenerationId != 2 || len(r.Members) != 1 {
		t.Fatalf("answer %v", r)
	}
	h.wantState(CompletingRebalance, 2, ids[0])
	// The expired id is now unknown.
	late := h.join(&pb.JoinGroupRequest{ClientId: "p", ApiVersion: 4, MemberId: pid})
	checkMsg(t, "late join", joinError(pid, ErrUnknownMemberID), answer[*pb.JoinGroupResponse](h, late))
}

// A pending member that joins in time is part of the next generation.
func TestPendingMemberJoinsRebalance(t *testing.T) {
	h := newHarness(t)
	ids := h.stableGroup(1)
	first := h.join(&pb.JoinGroupRequest{ClientId: "p", ApiVersion: 4})
	pid := answer[*pb.JoinGroupResponse](h, first).MemberId
	rejoin := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 4, MemberId: ids[0]})
	h.advance(time.Second)
	second := h.join(&pb.JoinGroupRequest{ClientId: "p", ApiVersion: 4, MemberId: pid})
	// Everybody joined: completes at once, without waiting for the rebalance timeout.
	r0, r1 := h.joinOK(rejoin), h.joinOK(second)
	if r0.GenerationId != 2 || r0.Leader != ids[0] || len(r0.Members) != 2 || r1.Leader != ids[0] || len(r1.Members) != 0 {
		t.Fatalf("answers %v / %v", r0, r1)
	}
	h.wantState(CompletingRebalance, 2, ids[0], pid)
}

// KIP-800 (v8): the reason is accepted and changes nothing.
func TestJoinV8ReasonAccepted(t *testing.T) {
	h := newHarness(t)
	ids := h.stableGroup(2)
	hd := h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 8, MemberId: ids[1], Reason: strp("rebalance requested by user")})
	checkMsg(t, "answer", &pb.JoinGroupResponse{GenerationId: 1, ProtocolType: strp("consumer"), ProtocolName: strp("range"), Leader: ids[0], MemberId: ids[1]},
		answer[*pb.JoinGroupResponse](h, hd))
	h.wantState(Stable, 1, ids...)
	hd = h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 8, MemberId: ids[0], Reason: strp("")})
	h.wantParked(hd)
	h.wantState(PreparingRebalance, 1, ids...)
}

// §2.4 step 6: a known member's JoinGroup by group state.
func TestJoinExistingMemberByState(t *testing.T) {
	changed := []*pb.Protocol{{Name: "range", Metadata: consumerMeta("other")}}
	t.Run("stable follower unchanged: immediate answer, no rebalance", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(2)
		hd := h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 5, MemberId: ids[1]})
		checkMsg(t, "answer", &pb.JoinGroupResponse{GenerationId: 1, ProtocolType: strp("consumer"), ProtocolName: strp("range"), Leader: ids[0], MemberId: ids[1]},
			answer[*pb.JoinGroupResponse](h, hd))
		h.wantState(Stable, 1, ids...)
	})
	t.Run("stable follower changed: rebalance", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(2)
		hd := h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 5, MemberId: ids[1], Protocols: changed})
		h.wantParked(hd)
		h.wantState(PreparingRebalance, 1, ids...)
		h.wantDeadline(joinKey, h.elapsed()+60*time.Second)
		if code := h.heartbeat(ids[0], 1); code != ErrRebalanceInProgress {
			t.Fatalf("leader heartbeat %d", code)
		}
		l := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 5, MemberId: ids[0]})
		rl, rf := h.joinOK(l), h.joinOK(hd)
		if rl.GenerationId != 2 || len(rl.Members) != 2 || string(rl.Members[1].Metadata) != string(consumerMeta("other")) || rf.GenerationId != 2 {
			t.Fatalf("answers %v / %v", rl, rf)
		}
		h.wantNoTimer(joinKey)
	})
	t.Run("stable leader unchanged: rebalance", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(2)
		hd := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 5, MemberId: ids[0]})
		h.wantParked(hd)
		h.wantState(PreparingRebalance, 1, ids...)
	})
	t.Run("completing unchanged: immediate answer, member list only to leader", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(2)
		l := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 5, MemberId: ids[0]})
		f := h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 5, MemberId: ids[1]})
		h.joinOK(l)
		h.joinOK(f)
		h.wantState(CompletingRebalance, 2, ids...)
		// Lost JoinGroup responses: the members ask again.
		f2 := h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 5, MemberId: ids[1]})
		checkMsg(t, "follower", &pb.JoinGroupResponse{GenerationId: 2, ProtocolType: strp("consumer"), ProtocolName: strp("range"), Leader: ids[0], MemberId: ids[1]},
			answer[*pb.JoinGroupResponse](h, f2))
		l2 := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 5, MemberId: ids[0]})
		meta := []byte{0, 0, 0, 0, 0, 0}
		checkMsg(t, "leader", &pb.JoinGroupResponse{GenerationId: 2, ProtocolType: strp("consumer"), ProtocolName: strp("range"), Leader: ids[0], MemberId: ids[0],
			Members: []*pb.JoinGroupMember{{MemberId: ids[0], Metadata: meta}, {MemberId: ids[1], Metadata: meta}}},
			answer[*pb.JoinGroupResponse](h, l2))
		h.wantState(CompletingRebalance, 2, ids...)
	})
	t.Run("completing changed: rebalance, parked syncs get REBALANCE_IN_PROGRESS", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(2)
		l := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 5, MemberId: ids[0]})
		h.joinOK(h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 5, MemberId: ids[1]}))
		h.joinOK(l)
		s := h.sync(&pb.SyncGroupRequest{MemberId: ids[1], GenerationId: 2})
		h.wantParked(s)
		j := h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 5, MemberId: ids[1], Protocols: changed})
		checkMsg(t, "parked sync", syncError(ErrRebalanceInProgress), answer[*pb.SyncGroupResponse](h, s))
		h.wantParked(j)
		h.wantState(PreparingRebalance, 2, ids...)
		h.wantNoTimer(syncKey)
		for _, id := range ids {
			if h.g.members.get(id).assignment != nil {
				t.Fatalf("assignment of %s not cleared", id)
			}
		}
	})
	t.Run("preparing: update and park; a superseded JoinGroup is answered NOT_COORDINATOR", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(2)
		first := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 5, MemberId: ids[0]})
		second := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 5, MemberId: ids[0], SessionTimeoutMs: 20_000, Protocols: changed})
		checkMsg(t, "superseded", joinError(ids[0], ErrNotCoordinator), answer[*pb.JoinGroupResponse](h, first))
		h.wantParked(second)
		if m := h.g.members.get(ids[0]); m.sessionTimeout() != 20*time.Second || !m.matches(changed) {
			t.Fatalf("member not updated: %v %v", m.sessionTimeout(), m.protocols)
		}
		h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 5, MemberId: ids[1]})
		if r := h.joinOK(second); r.GenerationId != 2 {
			t.Fatalf("answer %v", r)
		}
		h.wantDeadline(memberKey(ids[0]), h.elapsed()+20*time.Second)
	})
	t.Run("empty: UNKNOWN_MEMBER_ID", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(1)
		h.leave(&pb.MemberIdentity{MemberId: ids[0]})
		h.wantState(Empty, 2)
		hd := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 5, MemberId: ids[0]})
		checkMsg(t, "answer", joinError(ids[0], ErrUnknownMemberID), answer[*pb.JoinGroupResponse](h, hd))
		h.wantState(Empty, 2)
	})
	t.Run("dead: COORDINATOR_NOT_AVAILABLE", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(1)
		h.g.Unload(h.now, &h.fx)
		h.apply()
		hd := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 5, MemberId: ids[0]})
		checkMsg(t, "known", joinError(ids[0], ErrCoordinatorNotAvailable), answer[*pb.JoinGroupResponse](h, hd))
		hd = h.join(&pb.JoinGroupRequest{ClientId: "c9", ApiVersion: 3})
		checkMsg(t, "unknown", joinError("", ErrCoordinatorNotAvailable), answer[*pb.JoinGroupResponse](h, hd))
		hd = h.join(&pb.JoinGroupRequest{ClientId: "c9", ApiVersion: 4})
		checkMsg(t, "unknown v4", joinError("", ErrCoordinatorNotAvailable), answer[*pb.JoinGroupResponse](h, hd))
	})
}

// §5.1: protocol type and protocol admission.
func TestJoinProtocolAdmission(t *testing.T) {
	cases := []struct {
		name string
		req  *pb.JoinGroupRequest
		want int32
	}{
		{"different protocol type", &pb.JoinGroupRequest{ClientId: "x", ApiVersion: 3, ProtocolType: "connect"}, ErrInconsistentGroupProto},
		{"no common protocol", &pb.JoinGroupRequest{ClientId: "x", ApiVersion: 3, Protocols: protos("roundrobin")}, ErrInconsistentGroupProto},
		{"empty protocol list", &pb.JoinGroupRequest{ClientId: "x", ApiVersion: 3, Protocols: []*pb.Protocol{}}, ErrInconsistentGroupProto},
		{"one common protocol is enough", &pb.JoinGroupRequest{ClientId: "x", ApiVersion: 3, Protocols: protos("roundrobin", "range")}, ErrNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			ids := h.stableGroup(2)
			hd := h.join(tc.req)
			if tc.want == ErrNone {
				h.wantParked(hd)
				h.wantState(PreparingRebalance, 1, append(ids, "x-id3")...)
				return
			}
			checkMsg(t, "answer", joinError("", tc.want), answer[*pb.JoinGroupResponse](h, hd))
			h.wantState(Stable, 1, ids...)
		})
	}
	t.Run("existing member cannot switch to a disjoint set", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(2)
		hd := h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 3, MemberId: ids[1], Protocols: protos("roundrobin")})
		checkMsg(t, "answer", joinError(ids[1], ErrInconsistentGroupProto), answer[*pb.JoinGroupResponse](h, hd))
		h.wantState(Stable, 1, ids...)
	})
	t.Run("a group keeps its protocol type when it becomes Empty", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(1)
		h.leave(&pb.MemberIdentity{MemberId: ids[0]})
		h.wantState(Empty, 2)
		if h.g.ProtocolType() != "consumer" {
			t.Fatalf("protocol type %q", h.g.ProtocolType())
		}
		// An Empty group accepts any non-empty type again (supportsProtocols).
		hd := h.join(&pb.JoinGroupRequest{ClientId: "k", ApiVersion: 3, ProtocolType: "connect"})
		h.wantParked(hd)
		if h.g.ProtocolType() != "connect" {
			t.Fatalf("protocol type %q", h.g.ProtocolType())
		}
	})
}

// §5.2: each member votes for its first protocol every member supports; most
// votes win; ties go to the protocol the leader lists first (doc.go).
func TestProtocolVote(t *testing.T) {
	cases := []struct {
		name    string
		members [][]string
		want    string
	}{
		{"single member takes its first", [][]string{{"rr", "range"}}, "rr"},
		{"majority beats leader preference", [][]string{{"rr", "range"}, {"range", "rr"}, {"range", "rr"}}, "range"},
		{"tie goes to the leader's first", [][]string{{"rr", "range"}, {"range", "rr"}}, "rr"},
		{"tie goes to the leader's order, not the name", [][]string{{"b", "a"}, {"a", "b"}}, "b"},
		{"only protocols everybody supports count", [][]string{{"range", "rr"}, {"range", "rr"}, {"rr"}}, "rr"},
		{"votes skip unsupported preferences", [][]string{{"sticky", "range", "rr"}, {"rr", "range"}, {"range", "rr"}}, "range"},
		{"three-way tie, leader order", [][]string{{"x", "y", "z"}, {"y", "z", "x"}, {"z", "x", "y"}}, "x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			var hds []int
			for i, ps := range tc.members {
				hds = append(hds, h.join(&pb.JoinGroupRequest{ClientId: fmt.Sprintf("c%d", i), ApiVersion: 3, Protocols: protos(ps...)}))
			}
			h.advance(6 * time.Second)
			for i, hd := range hds {
				r := h.joinOK(hd)
				if r.GetProtocolName() != tc.want {
					t.Fatalf("member %d: protocol %q, want %q", i, r.GetProtocolName(), tc.want)
				}
				if i == 0 {
					// The leader gets each member's metadata for the chosen protocol.
					for j, m := range r.Members {
						if string(m.Metadata) != tc.want {
							t.Fatalf("member %d metadata %q", j, m.Metadata)
						}
					}
				}
			}
		})
	}
}

// group.max.size (KAFKA-9885 acceptJoiningMember).
func TestGroupMaxSize(t *testing.T) {
	max2 := func(c *Config) { c.MaxSize = 2 }
	t.Run("preparing: beyond the limit of awaiting members is refused", func(t *testing.T) {
		h := newHarness(t, max2)
		a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3})
		b := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 3})
		c := h.join(&pb.JoinGroupRequest{ClientId: "c", ApiVersion: 3})
		checkMsg(t, "third", joinError("", ErrGroupMaxSizeReached), answer[*pb.JoinGroupResponse](h, c))
		h.wantParked(a, b)
		h.wantState(PreparingRebalance, 0, "a-id1", "b-id2")
		// v4 first joins are refused too (no pending id is handed out).
		d := h.join(&pb.JoinGroupRequest{ClientId: "d", ApiVersion: 4})
		checkMsg(t, "v4", joinError("", ErrGroupMaxSizeReached), answer[*pb.JoinGroupResponse](h, d))
		if len(h.g.pending) != 0 {
			t.Fatal("pending id handed out")
		}
		// A member already awaiting join may send its JoinGroup again.
		a2 := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3, MemberId: "a-id1"})
		if h.joinCode(a) != ErrNotCoordinator {
			t.Fatal("superseded join not answered NOT_COORDINATOR")
		}
		h.wantParked(a2)
	})
	t.Run("stable: new members refused, existing members accepted", func(t *testing.T) {
		h := newHarness(t, max2)
		ids := h.stableGroup(2)
		c := h.join(&pb.JoinGroupRequest{ClientId: "c", ApiVersion: 3})
		checkMsg(t, "new", joinError("", ErrGroupMaxSizeReached), answer[*pb.JoinGroupResponse](h, c))
		s := h.join(&pb.JoinGroupRequest{ClientId: "s", ApiVersion: 5, GroupInstanceId: strp("s")})
		checkMsg(t, "new static", joinError("", ErrGroupMaxSizeReached), answer[*pb.JoinGroupResponse](h, s))
		h.wantState(Stable, 1, ids...)
		l := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
		h.wantParked(l)
	})
	t.Run("preparing after load: the last re-joiners beyond the limit are evicted", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.MaxSize = 2
		h := restoredHarness(t, cfg, stableRecord(3))
		// Loaded with 3 > 2 members: a rebalance starts at once.
		h.wantState(PreparingRebalance, 5, "m0", "m1", "m2")
		a := h.join(&pb.JoinGroupRequest{ClientId: "c", ApiVersion: 3, MemberId: "m2"})
		b := h.join(&pb.JoinGroupRequest{ClientId: "c", ApiVersion: 3, MemberId: "m0"})
		c := h.join(&pb.JoinGroupRequest{ClientId: "c", ApiVersion: 3, MemberId: "m1"})
		checkMsg(t, "third", joinError("", ErrGroupMaxSizeReached), answer[*pb.JoinGroupResponse](h, c))
		// m1 was removed, so everybody left has joined: the phase completes.
		ra, rb := h.joinOK(a), h.joinOK(b)
		h.wantState(CompletingRebalance, 6, "m0", "m2")
		if ra.Leader != "m0" || rb.Leader != "m0" || len(rb.Members) != 2 {
			t.Fatalf("answers %v / %v", ra, rb)
		}
	})
}

// Members that send the same protocols share one copy; a member whose
// protocols differ keeps its own, and changing one member's protocols
// leaves the others' as they were.
func TestMembersShareEqualProtocols(t *testing.T) {
	h := newHarness(t)
	meta := func(b byte) []*pb.Protocol {
		return []*pb.Protocol{{Name: "range", Metadata: []byte{0, 1, b}}, {Name: "roundrobin", Metadata: []byte{0, 1, b}}}
	}
	for i := range 3 {
		h.join(&pb.JoinGroupRequest{ClientId: fmt.Sprintf("c%d", i), Protocols: meta(1)})
	}
	h.join(&pb.JoinGroupRequest{ClientId: "odd", Protocols: meta(2)})
	ms := h.g.order
	if len(ms) != 4 {
		t.Fatalf("%d members, want 4", len(ms))
	}
	same := func(a, b *member) bool { return &a.protocols[0] == &b.protocols[0] }
	if !same(ms[0], ms[1]) || !same(ms[0], ms[2]) {
		t.Fatal("members with equal protocols hold copies of their own")
	}
	if same(ms[0], ms[3]) || ms[3].protocols[0].GetMetadata()[2] != 2 {
		t.Fatalf("the member with other protocols shares: %v", ms[3].protocols)
	}
	// The first member rejoins with new metadata: the others keep theirs.
	h.join(&pb.JoinGroupRequest{ClientId: "c0", MemberId: ms[0].id, Protocols: meta(3)})
	if got := ms[0].protocols[0].GetMetadata()[2]; got != 3 {
		t.Fatalf("rejoined member's metadata ends in %d, want 3", got)
	}
	for _, m := range ms[1:3] {
		if got := m.protocols[0].GetMetadata()[2]; got != 1 || len(m.protocols) != 2 {
			t.Fatalf("member %s's protocols changed with another's: %v", m.id, m.protocols)
		}
	}
	if got := h.g.protoCount["range"]; got != 4 {
		t.Fatalf("protocol count %d, want 4", got)
	}
}
