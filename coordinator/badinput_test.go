package coordinator

import (
	"testing"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Bad input with the exact Kafka codes. (Empty protocol lists, unknown
// protocol types and bad session timeouts on JoinGroup: TestJoinPreChecks
// and TestJoinProtocolAdmission; an oversize group record:
// TestSyncOversizeGroupRecord.)
func TestBadInputEmptyGroupID(t *testing.T) {
	h := newHarness(t)
	ids := h.stableGroup(1)
	j := h.rawJoin(&pb.JoinGroupRequest{MemberId: ids[0], ApiVersion: 3, SessionTimeoutMs: 10_000, ProtocolType: "consumer", Protocols: protos("range")})
	checkMsg(t, "join", joinError(ids[0], ErrInvalidGroupID), answer[*pb.JoinGroupResponse](h, j))
	s := h.handle()
	h.g.Sync(h.now, &pb.SyncGroupRequest{MemberId: ids[0], GenerationId: 1}, s, &h.fx)
	h.apply()
	checkMsg(t, "sync", syncError(ErrInvalidGroupID), answer[*pb.SyncGroupResponse](h, s))
	if code := h.g.Heartbeat(h.now, &pb.HeartbeatRequest{MemberId: ids[0], GenerationId: 1}, &h.fx); code != ErrInvalidGroupID {
		t.Fatalf("heartbeat %d", code)
	}
	checkMsg(t, "leave", &pb.LeaveGroupResponse{ErrorCode: ErrInvalidGroupID}, h.leaveReq(&pb.LeaveGroupRequest{Members: []*pb.MemberIdentity{{MemberId: ids[0]}}}))
	h.apply()
	h.wantState(Stable, 1, ids...)
}

// The empty group id is a valid group for OffsetCommit, OffsetFetch,
// DescribeGroups and DeleteGroups (§2.3).
func TestEmptyGroupIDAllowedForOffsetsAndAdmin(t *testing.T) {
	h := newHarness(t)
	h.g = New("", &h.cfg, h.now)
	c := h.handle()
	h.g.Commit(h.now, &pb.OffsetCommitRequest{GenerationId: -1, Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 3}}}}}, c, &h.fx)
	h.apply()
	if h.commitCode(c, "t", 0) != ErrNone {
		t.Fatal("commit refused")
	}
	if rec := h.written[0].GetOffset(); rec.GetGroupId() != "" || rec.GetOffset() != 3 {
		t.Fatalf("record %v", rec)
	}
	if o := h.g.Fetch(&pb.OffsetFetchRequest{Topics: []*pb.TopicPartitions{{Name: "t", Partitions: []int32{0}}}}).Topics[0].Partitions[0]; o.Offset != 3 {
		t.Fatalf("fetch %v", o)
	}
	checkMsg(t, "describe", &pb.DescribeGroupResponse{State: "Empty"}, h.g.Describe())
	d := h.handle()
	h.g.Delete(h.now, d, &h.fx)
	h.apply()
	checkMsg(t, "delete", &pb.DeleteGroupResponse{}, answer[*pb.DeleteGroupResponse](h, d))
}

// The rebalance timeout is not validated beyond being non-negative: the
// largest int32 value is accepted and used.
func TestHugeRebalanceTimeoutAccepted(t *testing.T) {
	h := newHarness(t)
	ids := h.stableGroup(2)
	j := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0], RebalanceTimeoutMs: 1<<31 - 1})
	h.wantParked(j)
	h.wantDeadline(joinKey, h.elapsed()+(1<<31-1)*ms)
	h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 3, MemberId: ids[1]})
	h.joinOK(j)
	h.wantState(CompletingRebalance, 2, ids...)
	h.wantDeadline(syncKey, h.elapsed()+(1<<31-1)*ms)
}

// §2.4 6c: a pending member id used with an instance id is an internal error.
func TestPendingMemberWithInstanceID(t *testing.T) {
	h := newHarness(t)
	p := answer[*pb.JoinGroupResponse](h, h.join(&pb.JoinGroupRequest{ClientId: "p", ApiVersion: 5})).MemberId
	hd := h.join(&pb.JoinGroupRequest{ClientId: "p", ApiVersion: 5, MemberId: p, GroupInstanceId: strp("i")})
	checkMsg(t, "answer", joinError(p, ErrUnknownServerError), answer[*pb.JoinGroupResponse](h, hd))
	h.wantState(Empty, 0)
	if !h.g.HasPending(p) {
		t.Fatal("pending id dropped")
	}
}

// Generations only grow: each completed join phase adds one, including the
// one that ends Empty.
func TestGenerationIncrementsOnEveryJoinPhase(t *testing.T) {
	h := newHarness(t)
	ids := h.stableGroup(1)
	for gen := int32(2); gen <= 5; gen++ {
		r := h.joinOK(h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]}))
		if r.GenerationId != gen {
			t.Fatalf("generation %d, want %d", r.GenerationId, gen)
		}
		h.syncGroup(gen, ids[0], ids[0])
	}
	h.leave(&pb.MemberIdentity{MemberId: ids[0]})
	h.wantState(Empty, 6)
}
