package coordinator

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// restoredHarness loads a group from records at t0 and starts it.
func restoredHarness(t testing.TB, cfg Config, rec *pb.GroupRecord, offsets ...*pb.OffsetRecord) *harness {
	h := &harness{t: t, cfg: cfg, now: t0, timers: map[TimerKey]time.Time{}, replies: map[int][]proto.Message{}, parked: map[int]bool{}}
	h.g = Restore(&h.cfg, rec, offsets, h.now)
	h.lastGen = h.g.Generation()
	h.g.Start(h.now, &h.fx)
	h.apply()
	return h
}

// stableRecord is the record of a Stable group at generation 5 with members
// m0..m<n-1> (m0 leads), session 10s, rebalance timeout 60s.
func stableRecord(n int) *pb.GroupRecord {
	rec := &pb.GroupRecord{GroupId: "g", ProtocolType: "consumer", Generation: 5, ProtocolName: strp("range"), Leader: strp("m0"), StateTimestampMs: t0.Add(-time.Hour).UnixMilli()}
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		rec.Members = append(rec.Members, &pb.MemberRecord{MemberId: id, ClientId: "c", ClientHost: "/10.0.0.1", RebalanceTimeoutMs: 60_000, SessionTimeoutMs: 10_000,
			Subscription: consumerMeta("t"), Assignment: []byte("a-" + id)})
	}
	return rec
}

// roundTrip encodes and decodes records as a store does.
func roundTrip(t testing.TB, m proto.Message) proto.Message {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := m.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// §2.13: a group with members loads Stable at its generation, every member
// gets a fresh session timer from the load time, no rebalance.
func TestRestoreStable(t *testing.T) {
	rec := stableRecord(2)
	rec.Members[1].GroupInstanceId = strp("inst")
	rec.Members[1].SessionTimeoutMs = 20_000
	h := restoredHarness(t, DefaultConfig(), rec,
		&pb.OffsetRecord{GroupId: "g", Topic: "t", Partition: 0, Offset: 42, LeaderEpoch: 3, Metadata: "md", CommitTimestampMs: t0.UnixMilli(), ExpireTimestampMs: -1})
	h.wantState(Stable, 5, "m0", "m1")
	if h.g.Leader() != "m0" {
		t.Fatalf("leader %q", h.g.Leader())
	}
	h.wantDeadline(memberKey("m0"), 10*time.Second)
	h.wantDeadline(memberKey("m1"), 20*time.Second)
	h.wantDeadline(expiryKey, 10*time.Minute)
	h.wantNoTimer(joinKey)
	if h.g.members.get("m0").isNew || h.g.members.get("m1").isNew {
		t.Fatal("restored members are new")
	}
	if len(h.written) != 0 {
		t.Fatalf("load wrote %v", h.written)
	}
	// Members resume: sync returns the stored assignment, heartbeats work.
	s := h.sync(&pb.SyncGroupRequest{MemberId: "m1", GroupInstanceId: strp("inst"), GenerationId: 5})
	checkMsg(t, "sync", &pb.SyncGroupResponse{ProtocolType: strp("consumer"), ProtocolName: strp("range"), Assignment: []byte("a-m1")}, answer[*pb.SyncGroupResponse](h, s))
	if code := h.heartbeat("m0", 5); code != ErrNone {
		t.Fatalf("heartbeat %d", code)
	}
	// A client holding a newer generation (lost in-flight rebalance) is refused.
	if code := h.heartbeat("m0", 6); code != ErrIllegalGeneration {
		t.Fatalf("heartbeat gen 6: %d", code)
	}
	checkMsg(t, "describe", &pb.DescribeGroupResponse{GroupId: "g", State: "Stable", ProtocolType: "consumer", ProtocolData: "range", GenerationId: 5,
		Members: []*pb.DescribedMember{
			{MemberId: "m0", ClientId: "c", ClientHost: "/10.0.0.1", Metadata: consumerMeta("t"), Assignment: []byte("a-m0")},
			{MemberId: "m1", GroupInstanceId: strp("inst"), ClientId: "c", ClientHost: "/10.0.0.1", Metadata: consumerMeta("t"), Assignment: []byte("a-m1")},
		}}, h.g.Describe())
	f := h.g.Fetch(&pb.OffsetFetchRequest{GroupId: "g", AllTopics: true})
	checkMsg(t, "fetch", &pb.OffsetFetchResponse{Topics: []*pb.OffsetFetchTopic{{Name: "t", Partitions: []*pb.OffsetFetchPartition{{Partition: 0, Offset: 42, LeaderEpoch: 3, Metadata: "md"}}}}}, f)
	// Nobody heartbeats m1: it expires 20s after the load.
	h.advance(9 * time.Second)
	h.heartbeat("m0", 5)
	h.advance(9 * time.Second)
	h.heartbeat("m0", 5)
	h.advance(2*time.Second - ms)
	h.wantState(Stable, 5, "m0", "m1")
	h.advance(ms)
	h.wantState(PreparingRebalance, 5, "m0")
}

// §2.13: without members (or offsets only) the group loads Empty.
func TestRestoreEmpty(t *testing.T) {
	h := restoredHarness(t, DefaultConfig(), &pb.GroupRecord{GroupId: "g", ProtocolType: "consumer", Generation: 7, StateTimestampMs: t0.UnixMilli()})
	h.wantState(Empty, 7)
	if h.g.ProtocolType() != "consumer" {
		t.Fatalf("protocol type %q", h.g.ProtocolType())
	}
	hd := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3})
	h.advance(3 * time.Second)
	if r := h.joinOK(hd); r.GenerationId != 8 {
		t.Fatalf("generation %d, want 8", r.GenerationId)
	}

	h = restoredHarness(t, DefaultConfig(), &pb.GroupRecord{GroupId: "g"},
		&pb.OffsetRecord{GroupId: "g", Topic: "t", Partition: 1, Offset: 9, LeaderEpoch: -1, CommitTimestampMs: t0.UnixMilli(), ExpireTimestampMs: -1})
	h.wantState(Empty, 0)
	if h.g.ProtocolType() != "" {
		t.Fatalf("protocol type %q", h.g.ProtocolType())
	}
}

// §2.13: a loaded group larger than group.max.size rebalances; the join
// phase waits for members to re-join (their sessions run from load).
func TestRestoreOverMaxSizeRebalances(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxSize = 2
	h := restoredHarness(t, cfg, stableRecord(3))
	h.wantState(PreparingRebalance, 5, "m0", "m1", "m2")
	h.wantDeadline(joinKey, 60*time.Second)
	// Nobody re-joins: every member's session (10s) runs out first, and the
	// last removal leaves an Empty group at generation 6.
	h.advance(10 * time.Second)
	h.wantState(Empty, 6)
}

// A record written by the machine, encoded and decoded like a store does,
// restores the same group, including members whose assignment is empty.
func TestRestoreFromWrittenRecord(t *testing.T) {
	h := newHarness(t)
	a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 5, GroupInstanceId: strp("ia"), Protocols: []*pb.Protocol{{Name: "range", Metadata: consumerMeta("t")}}})
	b := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 3, Protocols: []*pb.Protocol{{Name: "range", Metadata: consumerMeta("u")}}})
	h.advance(6 * time.Second)
	ra, rb := h.joinOK(a), h.joinOK(b)
	h.takeWritten()
	// The leader assigns only to itself: b gets an empty assignment.
	sa := h.sync(&pb.SyncGroupRequest{MemberId: ra.MemberId, GenerationId: 1, Assignments: []*pb.SyncGroupAssignment{{MemberId: ra.MemberId, Assignment: []byte("x")}, {MemberId: "stranger", Assignment: []byte("y")}}})
	sb := h.sync(&pb.SyncGroupRequest{MemberId: rb.MemberId, GenerationId: 1})
	if got := answer[*pb.SyncGroupResponse](h, sb).Assignment; got == nil || len(got) != 0 {
		t.Fatalf("b assignment %v, want empty non-nil", got)
	}
	h.syncCode(sa)
	recs := groupRecords(h.takeWritten())
	if len(recs) != 1 {
		t.Fatalf("records %v", recs)
	}
	rec := roundTrip(t, recs[0]).(*pb.GroupRecord)
	if len(rec.Members) != 2 || rec.Members[1].MemberId != rb.MemberId {
		t.Fatalf("record members %v", rec.Members)
	}
	h2 := restoredHarness(t, DefaultConfig(), rec)
	h2.wantState(Stable, 1, ra.MemberId, rb.MemberId)
	s := h2.sync(&pb.SyncGroupRequest{MemberId: rb.MemberId, GenerationId: 1})
	checkMsg(t, "restored sync", &pb.SyncGroupResponse{ProtocolType: strp("consumer"), ProtocolName: strp("range"), Assignment: []byte{}}, answer[*pb.SyncGroupResponse](h2, s))
	// The static mapping survives.
	if code := h2.g.Heartbeat(h2.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: ra.MemberId, GroupInstanceId: strp("ia"), GenerationId: 1}, &h2.fx); code != ErrNone {
		t.Fatalf("static heartbeat %d", code)
	}
	h2.apply()
	if d := h2.g.Describe(); d.Members[1].Assignment == nil {
		t.Fatal("describe: nil assignment")
	}
}

// §2.13 unload: Dead, parked JoinGroups and SyncGroups answered
// NOT_COORDINATOR (member id echoed), timers cancelled, waiting writes'
// requests answered NOT_COORDINATOR.
func TestUnloadAnswersParkedRequests(t *testing.T) {
	t.Run("preparing", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(2)
		j := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
		n := h.join(&pb.JoinGroupRequest{ClientId: "new", ApiVersion: 3})
		h.g.Unload(h.now, &h.fx)
		h.apply()
		checkMsg(t, "join", joinError(ids[0], ErrNotCoordinator), answer[*pb.JoinGroupResponse](h, j))
		checkMsg(t, "new member join", joinError("new-id4", ErrNotCoordinator), answer[*pb.JoinGroupResponse](h, n))
		if h.g.State() != Dead || len(h.timers) != 0 {
			t.Fatalf("state %v timers %v", h.g.State(), h.timers)
		}
	})
	t.Run("completing", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(2)
		h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
		h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 3, MemberId: ids[1]})
		f := h.sync(&pb.SyncGroupRequest{MemberId: ids[1], GenerationId: 2})
		h.hold = true
		l := h.syncGroup(2, ids[0], ids[0])[ids[0]] // leader's assignment write is held
		c := h.commit(&pb.OffsetCommitRequest{GenerationId: 2, MemberId: ids[0], Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 1}}}}})
		if h.commitCode(c, "t", 0) != ErrRebalanceInProgress {
			t.Fatal("commit in CompletingRebalance not refused")
		}
		h.g.Unload(h.now, &h.fx)
		h.apply()
		checkMsg(t, "follower sync", syncError(ErrNotCoordinator), answer[*pb.SyncGroupResponse](h, f))
		checkMsg(t, "leader sync", syncError(ErrNotCoordinator), answer[*pb.SyncGroupResponse](h, l))
		// The held write completes after the unload: nothing more happens.
		h.release(nil)
		if h.g.State() != Dead || len(h.parked) != 0 {
			t.Fatalf("state %v parked %v", h.g.State(), h.parked)
		}
	})
	t.Run("held commit, offset delete and deletion", func(t *testing.T) {
		h := newHarness(t)
		h.hold = true
		c := h.commit(&pb.OffsetCommitRequest{GenerationId: -1, Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 1}, {Partition: 1, Offset: 1, Metadata: strp(string(make([]byte, 4097)))}}}}})
		h.g.Unload(h.now, &h.fx)
		h.apply()
		checkMsg(t, "commit", &pb.OffsetCommitResponse{Topics: []*pb.TopicPartitionErrors{{Name: "t", Partitions: []*pb.PartitionError{
			{Partition: 0, ErrorCode: ErrNotCoordinator}, {Partition: 1, ErrorCode: ErrOffsetMetadataTooLarge}}}}},
			answer[*pb.OffsetCommitResponse](h, c))
	})
}

// §2.14 / §6: group-metadata write failures are mapped like Kafka's
// storeGroup; the parked SyncGroups get the code and the group rebalances.
func TestAssignmentWriteFailureMapping(t *testing.T) {
	cases := []struct {
		err  error
		want int32
	}{
		{ErrStoreTimeout, ErrRebalanceInProgress},
		{ErrStoreNotLeader, ErrNotCoordinator},
		{ErrStoreUnavailable, ErrCoordinatorNotAvailable},
		{ErrRecordTooLarge, ErrUnknownServerError},
		{fmt.Errorf("append: %w", ErrStoreNotLeader), ErrNotCoordinator},
		{errors.New("disk on fire"), ErrUnknownServerError},
	}
	for _, tc := range cases {
		t.Run(tc.err.Error(), func(t *testing.T) {
			h := newHarness(t)
			a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3})
			b := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 3})
			h.advance(6 * time.Second)
			la, lb := h.joinOK(a).MemberId, h.joinOK(b).MemberId
			h.hold = true
			s := h.syncGroup(1, la, lb, la)
			h.wantParked(s[la], s[lb])
			h.wantState(CompletingRebalance, 1, la, lb)
			h.release(tc.err)
			checkMsg(t, "leader", syncError(tc.want), answer[*pb.SyncGroupResponse](h, s[la]))
			checkMsg(t, "follower", syncError(tc.want), answer[*pb.SyncGroupResponse](h, s[lb]))
			h.wantState(PreparingRebalance, 1, la, lb)
			for _, id := range []string{la, lb} {
				if h.g.members.get(id).assignment != nil {
					t.Fatal("assignment kept after failed write")
				}
			}
		})
	}
}

// §2.14: offset write failures (maybeConvertOffsetCommitError); the cache
// is only updated after a successful write.
func TestCommitWriteFailureMapping(t *testing.T) {
	cases := []struct {
		err  error
		want int32
	}{
		{ErrStoreTimeout, ErrRequestTimedOut},
		{ErrStoreNotLeader, ErrNotCoordinator},
		{ErrStoreUnavailable, ErrCoordinatorNotAvailable},
		{ErrRecordTooLarge, ErrInvalidCommitOffsetSize},
		{ErrStoreFenced, ErrIllegalGeneration},
		{errors.New("boom"), ErrUnknownServerError},
	}
	for _, tc := range cases {
		t.Run(tc.err.Error(), func(t *testing.T) {
			h := newHarness(t)
			h.hold = true
			c := h.commit(&pb.OffsetCommitRequest{GenerationId: -1, Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 5}}}}})
			h.release(tc.err)
			if got := h.commitCode(c, "t", 0); got != tc.want {
				t.Fatalf("code %d, want %d", got, tc.want)
			}
			if o := h.fetchOne("t", 0, false); o.Offset != -1 {
				t.Fatalf("failed commit visible: %v", o)
			}
		})
	}
}

// §7: the persistence points and the records written.
func TestPersistencePoints(t *testing.T) {
	h := newHarness(t)
	// Joining writes nothing; completing the join phase reserves its
	// generation before answering (no other rebalance transition writes).
	a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 5, GroupInstanceId: strp("ia"), ClientHost: "/1.2.3.4", Protocols: []*pb.Protocol{{Name: "range", Metadata: consumerMeta("t")}}})
	first := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 4})
	pid := answer[*pb.JoinGroupResponse](h, first).MemberId
	b := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 4, MemberId: pid, SessionTimeoutMs: 12_000, RebalanceTimeoutMs: 30_000, Protocols: []*pb.Protocol{{Name: "range", Metadata: consumerMeta("u")}}})
	h.advance(6 * time.Second)
	ra, rb := h.joinOK(a), h.joinOK(b)
	if len(h.written) != 1 || h.written[0].GetGenerationReserved().GetGeneration() != 1 || h.written[0].GetGenerationReserved().GetGroupId() != "g" {
		t.Fatalf("join phase wrote %v, want the reservation of generation 1", h.written)
	}
	h.written = nil
	// 1. Leader SyncGroup: the full group record; answers only after the write.
	h.hold = true
	s := h.syncGroup(1, ra.MemberId, ra.MemberId, rb.MemberId)
	h.wantParked(s[ra.MemberId], s[rb.MemberId])
	stateAt := h.now.UnixMilli()
	checkMsg(t, "group record", &pb.Record{Kind: &pb.Record_Group{Group: &pb.GroupRecord{
		GroupId: "g", ProtocolType: "consumer", Generation: 1, ProtocolName: strp("range"), Leader: strp(ra.MemberId), StateTimestampMs: stateAt,
		Members: []*pb.MemberRecord{
			{MemberId: ra.MemberId, GroupInstanceId: strp("ia"), ClientId: "a", ClientHost: "/1.2.3.4", RebalanceTimeoutMs: 60_000, SessionTimeoutMs: 10_000, Subscription: consumerMeta("t"), Assignment: []byte("a-" + ra.MemberId)},
			{MemberId: rb.MemberId, ClientId: "b", RebalanceTimeoutMs: 30_000, SessionTimeoutMs: 12_000, Subscription: consumerMeta("u"), Assignment: []byte("a-" + rb.MemberId)},
		},
	}}}, onlyRecord(t, h.takeWritten()))
	h.wantState(CompletingRebalance, 1, ra.MemberId, rb.MemberId)
	h.release(nil)
	h.wantState(Stable, 1, ra.MemberId, rb.MemberId)
	h.syncCode(s[rb.MemberId])
	h.hold = false

	// 4. OffsetCommit: one offset record per partition.
	h.advance(time.Second)
	h.commit(&pb.OffsetCommitRequest{GenerationId: 1, MemberId: rb.MemberId, RetentionTimeMs: 1000, Topics: []*pb.OffsetCommitTopic{{Name: "u", Partitions: []*pb.OffsetCommitPartition{
		{Partition: 0, Offset: 10, LeaderEpoch: 2, Metadata: strp("m")}, {Partition: 1, Offset: 11, LeaderEpoch: -1, CommitTimestampMs: 1234}}}}})
	nowMs := h.now.UnixMilli()
	recs := h.takeWritten()
	want := []*pb.Record{
		{Kind: &pb.Record_Offset{Offset: &pb.OffsetRecord{GroupId: "g", Topic: "u", Partition: 0, Offset: 10, LeaderEpoch: 2, Metadata: "m", CommitTimestampMs: nowMs, ExpireTimestampMs: nowMs + 1000}}},
		{Kind: &pb.Record_Offset{Offset: &pb.OffsetRecord{GroupId: "g", Topic: "u", Partition: 1, Offset: 11, LeaderEpoch: -1, CommitTimestampMs: 1234, ExpireTimestampMs: nowMs + 1000}}},
	}
	wantRecords(t, want, recs)

	// 3. Static replacement without protocol change: the group record with the new id.
	a2 := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 5, GroupInstanceId: strp("ia"), ClientHost: "/1.2.3.4", Protocols: []*pb.Protocol{{Name: "range", Metadata: consumerMeta("t")}}})
	newID := h.joinOK(a2).MemberId
	g := onlyRecord(t, h.takeWritten()).GetGroup()
	if g.GetGeneration() != 1 || g.Members[0].MemberId != newID || g.GetLeader() != newID || string(g.Members[0].Assignment) != "a-"+ra.MemberId {
		t.Fatalf("replacement record %v", g)
	}

	// 2. Join phase completing into Empty: generation+1, no members, no protocol.
	h.leave(&pb.MemberIdentity{MemberId: "", GroupInstanceId: strp("ia")}, &pb.MemberIdentity{MemberId: rb.MemberId})
	checkMsg(t, "empty record", &pb.Record{Kind: &pb.Record_Group{Group: &pb.GroupRecord{
		GroupId: "g", ProtocolType: "consumer", Generation: 2, StateTimestampMs: h.now.UnixMilli(), Members: []*pb.MemberRecord{},
	}}}, onlyRecord(t, h.takeWritten()))
	h.wantState(Empty, 2)

	// 5. OffsetDelete and DeleteGroups: tombstones.
	od := h.handle()
	h.g.OffsetDelete(h.now, &pb.OffsetDeleteRequest{GroupId: "g", Topics: []*pb.TopicPartitions{{Name: "u", Partitions: []int32{1, 7}}}}, od, &h.fx)
	h.apply()
	wantRecords(t, []*pb.Record{{Kind: &pb.Record_OffsetTombstone{OffsetTombstone: &pb.OffsetTombstone{GroupId: "g", Topic: "u", Partition: 1}}}}, h.takeWritten())
	del := h.handle()
	h.g.Delete(h.now, del, &h.fx)
	h.apply()
	wantRecords(t, []*pb.Record{
		{Kind: &pb.Record_OffsetTombstone{OffsetTombstone: &pb.OffsetTombstone{GroupId: "g", Topic: "u", Partition: 0}}},
		{Kind: &pb.Record_GroupTombstone{GroupTombstone: &pb.GroupTombstone{GroupId: "g"}}},
	}, h.takeWritten())
	checkMsg(t, "delete", &pb.DeleteGroupResponse{GroupId: "g"}, answer[*pb.DeleteGroupResponse](h, del))
}

func onlyRecord(t testing.TB, recs []*pb.Record) *pb.Record {
	t.Helper()
	if len(recs) != 1 {
		t.Fatalf("want one record, got %d: %v", len(recs), recs)
	}
	return recs[0]
}

func wantRecords(t testing.TB, want, got []*pb.Record) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("want %d records, got %d: %v", len(want), len(got), got)
	}
	for i := range want {
		checkMsg(t, fmt.Sprintf("record %d", i), want[i], got[i])
	}
}
