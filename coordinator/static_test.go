package coordinator

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func staticJoin(inst string, version int32, memberID string) *pb.JoinGroupRequest {
	return &pb.JoinGroupRequest{ClientId: "c-" + inst, ApiVersion: version, GroupInstanceId: strp(inst), MemberId: memberID, Protocols: []*pb.Protocol{{Name: "range", Metadata: consumerMeta(inst)}}}
}

// staticGroup forms a Stable generation-1 group of static members (the first
// leads) and returns their member ids.
func (h *harness) staticGroup(version int32, insts ...string) []string {
	h.t.Helper()
	var hds []int
	for _, in := range insts {
		hds = append(hds, h.join(staticJoin(in, version, "")))
	}
	h.advance(6 * time.Second)
	var ids []string
	for _, hd := range hds {
		ids = append(ids, h.joinOK(hd).MemberId)
	}
	for id, hd := range h.syncGroup(1, ids[0], ids...) {
		if h.syncCode(hd) != ErrNone {
			h.t.Fatalf("sync of %s failed", id)
		}
	}
	h.wantState(Stable, 1, ids...)
	h.takeWritten()
	return ids
}

// Static member ids start with the instance id and differ on every re-join
// (shouldGetDifferentStaticMemberIdAfterEachRejoin).
func TestStaticMemberIDDiffersOnEachRejoin(t *testing.T) {
	h := newHarness(t)
	ids := h.staticGroup(5, "ia")
	seen := map[string]bool{ids[0]: true}
	for range 3 {
		r := h.joinOK(h.join(staticJoin("ia", 5, "")))
		if !strings.HasPrefix(r.MemberId, "ia-") || seen[r.MemberId] {
			t.Fatalf("member id %q", r.MemberId)
		}
		seen[r.MemberId] = true
		h.wantState(Stable, 1, r.MemberId)
	}
}

// §6: a restarted static member in a Stable group takes over its identity
// without a rebalance once the group record with the new id is written.
func TestStaticReplacementStableWithoutRebalance(t *testing.T) {
	cases := []struct {
		name     string
		version  int32
		inst     string // "ia" leads, "ib" follows
		leader   func(old, new, curLeader string) string
		skip     bool
		withList bool
	}{
		{"v9 leader: skip assignment, member list, itself as leader", 9, "ia", func(_, n, _ string) string { return n }, true, true},
		{"v5 leader: old leader id, no member list", 5, "ia", func(o, _, _ string) string { return o }, false, false},
		{"v8 leader: old leader id", 8, "ia", func(o, _, _ string) string { return o }, false, false},
		{"v9 follower: current leader", 9, "ib", func(_, _, l string) string { return l }, false, false},
		{"v5 follower: current leader", 5, "ib", func(_, _, l string) string { return l }, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			ids := h.staticGroup(5, "ia", "ib")
			old := ids[0]
			if tc.inst == "ib" {
				old = ids[1]
			}
			h.advance(time.Second)
			h.hold = true
			newID := h.nextID(tc.inst)
			hd := h.join(staticJoin(tc.inst, tc.version, ""))
			h.wantParked(hd) // answered only after the write
			rec := onlyRecord(t, h.takeWritten()).GetGroup()
			if rec.GetGeneration() != 1 || rec.GetProtocolName() != "range" {
				t.Fatalf("record %v", rec)
			}
			var recIDs []string
			for _, m := range rec.Members {
				recIDs = append(recIDs, m.MemberId)
				if string(m.Assignment) == "" {
					t.Fatalf("record lost an assignment: %v", m)
				}
			}
			wantIDs := []string{ids[0], ids[1]}
			if tc.inst == "ia" {
				wantIDs[0] = newID
			} else {
				wantIDs[1] = newID
			}
			if strings.Join(recIDs, ",") != strings.Join(wantIDs, ",") {
				t.Fatalf("record members %v, want %v", recIDs, wantIDs)
			}
			joinedAt := h.elapsed()
			h.release(nil)
			h.hold = false
			curLeader := h.g.Leader()
			want := &pb.JoinGroupResponse{GenerationId: 1, ProtocolType: strp("consumer"), ProtocolName: strp("range"),
				MemberId: newID, Leader: tc.leader(old, newID, curLeader), SkipAssignment: tc.skip}
			if tc.withList {
				want.Members = []*pb.JoinGroupMember{
					{MemberId: wantIDs[0], GroupInstanceId: strp("ia"), Metadata: consumerMeta("ia")},
					{MemberId: wantIDs[1], GroupInstanceId: strp("ib"), Metadata: consumerMeta("ib")},
				}
			}
			checkMsg(t, "join answer", want, answer[*pb.JoinGroupResponse](h, hd))
			h.wantState(Stable, 1, wantIDs...)
			if tc.inst == "ia" && curLeader != newID {
				t.Fatalf("leadership not transferred: %q", curLeader)
			}
			h.wantDeadline(memberKey(newID), joinedAt+10*time.Second)
			h.wantNoTimer(memberKey(old))
			// The member gets its previous assignment back.
			s := h.sync(&pb.SyncGroupRequest{MemberId: newID, GroupInstanceId: strp(tc.inst), GenerationId: 1})
			if got := answer[*pb.SyncGroupResponse](h, s); got.ErrorCode != ErrNone || string(got.Assignment) != "a-"+old {
				t.Fatalf("sync %v", got)
			}
			// The old id is fenced.
			code := h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: old, GroupInstanceId: strp(tc.inst), GenerationId: 1}, &h.fx)
			if code != ErrFencedInstanceID {
				t.Fatalf("old id heartbeat %d", code)
			}
			if code := h.heartbeat(old, 1); code != ErrUnknownMemberID {
				t.Fatalf("old id heartbeat without instance %d", code)
			}
		})
	}
}

// §6: if the replacement's write fails, the update is reverted and the old
// member id keeps working; the answer carries the mapped error, MemberId ""
// and the current generation.
func TestStaticReplacementRevertOnWriteFailure(t *testing.T) {
	cases := []struct {
		err  error
		want int32
	}{
		{ErrRecordTooLarge, ErrUnknownServerError},
		{ErrStoreTimeout, ErrRebalanceInProgress},
		{ErrStoreNotLeader, ErrNotCoordinator},
		{ErrStoreUnavailable, ErrCoordinatorNotAvailable},
	}
	for _, tc := range cases {
		t.Run(tc.err.Error(), func(t *testing.T) {
			h := newHarness(t)
			ids := h.staticGroup(5, "ia", "ib")
			h.failErr = tc.err
			req := staticJoin("ia", 9, "")
			req.SessionTimeoutMs = 30_000
			req.Protocols[0].Metadata = consumerMeta("ia", "extra")
			hd := h.join(req)
			h.failErr = nil
			checkMsg(t, "answer", &pb.JoinGroupResponse{ErrorCode: tc.want, GenerationId: 1, ProtocolType: strp("consumer"), ProtocolName: strp("range"), Leader: ids[0]},
				answer[*pb.JoinGroupResponse](h, hd))
			h.wantState(Stable, 1, ids...)
			m := h.g.members.get(ids[0])
			if h.g.Leader() != ids[0] || m.sessionTimeout() != 10*time.Second || string(m.metadata("range")) != string(consumerMeta("ia")) {
				t.Fatalf("not reverted: leader %q session %v", h.g.Leader(), m.sessionTimeout())
			}
			h.wantDeadline(memberKey(ids[0]), h.elapsed()+10*time.Second)
			h.wantNoTimer(memberKey(fmt.Sprintf("ia-id%d", h.ids)))
			code := h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: ids[0], GroupInstanceId: strp("ia"), GenerationId: 1}, &h.fx)
			h.apply()
			if code != ErrNone {
				t.Fatalf("old id heartbeat %d", code)
			}
			code = h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: fmt.Sprintf("ia-id%d", h.ids), GroupInstanceId: strp("ia"), GenerationId: 1}, &h.fx)
			h.apply()
			if code != ErrFencedInstanceID {
				t.Fatalf("new id heartbeat %d", code)
			}
		})
	}
}

// While the replacement is being written the group may rebalance; the
// JoinGroup then belongs to the join phase and is answered exactly once,
// whatever the outcome of the write.
func TestStaticReplacementWriteOutlivedByRebalance(t *testing.T) {
	for _, fail := range []bool{false, true} {
		name := "write succeeds"
		if fail {
			name = "write fails"
		}
		t.Run(name+" after the join phase completed", func(t *testing.T) {
			h := newHarness(t)
			ids := h.staticGroup(5, "ia", "ib")
			h.hold = true
			newID := h.nextID("ia")
			hd := h.join(staticJoin("ia", 5, ""))
			h.hold = false
			// ib leaves: the rebalance completes at once with ia (parked) only.
			h.leave(&pb.MemberIdentity{GroupInstanceId: strp("ib")})
			r := h.joinOK(hd)
			if r.MemberId != newID || r.GenerationId != 2 || r.Leader != newID {
				t.Fatalf("answer %v", r)
			}
			h.wantState(CompletingRebalance, 2, newID)
			var err error
			if fail {
				err = errors.New("boom")
			}
			h.release(err)
			h.wantState(CompletingRebalance, 2, newID)
			s := h.syncGroup(2, newID, newID)
			if h.syncCode(s[newID]) != ErrNone {
				t.Fatal("sync failed")
			}
			h.wantState(Stable, 2, newID)
			_ = ids
		})
		t.Run(name+" during the join phase", func(t *testing.T) {
			h := newHarness(t)
			ids := h.staticGroup(5, "ia", "ib", "ic")
			h.hold = true
			newID := h.nextID("ia")
			hd := h.join(staticJoin("ia", 5, ""))
			h.hold = false
			// ib re-joins with changed metadata: a rebalance starts and ia's
			// JoinGroup is now parked in it.
			other := h.join(&pb.JoinGroupRequest{ClientId: "c-ib", ApiVersion: 5, GroupInstanceId: strp("ib"), MemberId: ids[1], Protocols: []*pb.Protocol{{Name: "range", Metadata: consumerMeta("changed")}}})
			h.wantState(PreparingRebalance, 1, newID, ids[1], ids[2])
			var err error
			if fail {
				err = errors.New("boom")
			}
			h.release(err)
			last := h.join(staticJoin("ic", 5, ids[2]))
			if fail {
				// Reverted as in a Stable group: ia answers with the error and
				// is back under its old id, no longer awaiting join, with a
				// fresh session timer; when it expires the others complete.
				checkMsg(t, "answer", &pb.JoinGroupResponse{ErrorCode: ErrUnknownServerError, GenerationId: 1, ProtocolType: strp("consumer"), ProtocolName: strp("range"), Leader: ids[0]},
					answer[*pb.JoinGroupResponse](h, hd))
				h.wantState(PreparingRebalance, 1, ids...)
				h.wantParked(other, last)
				h.advance(10 * time.Second)
				h.joinOK(other)
				h.joinOK(last)
				h.wantState(CompletingRebalance, 2, ids[1], ids[2])
				return
			}
			r := h.joinOK(hd)
			if r.MemberId != newID || r.GenerationId != 2 {
				t.Fatalf("answer %v", r)
			}
			h.joinOK(other)
			h.joinOK(last)
			h.wantState(CompletingRebalance, 2, newID, ids[1], ids[2])
		})
	}
}

// A static member with a changed vote, or in CompletingRebalance, rebalances.
func TestStaticReplacementRebalances(t *testing.T) {
	t.Run("stable, vote changes", func(t *testing.T) {
		h := newHarness(t)
		var hds []int
		for _, in := range []string{"ia", "ib"} {
			req := staticJoin(in, 5, "")
			req.Protocols = protos("range", "rr")
			hds = append(hds, h.join(req))
		}
		h.advance(6 * time.Second)
		a, b := h.joinOK(hds[0]).MemberId, h.joinOK(hds[1]).MemberId
		h.syncGroup(1, a, a, b)
		h.wantState(Stable, 1, a, b)
		h.takeWritten()
		req := staticJoin("ia", 5, "")
		req.Protocols = protos("rr")
		newID := h.nextID("ia")
		hd := h.join(req)
		h.wantParked(hd)
		h.wantState(PreparingRebalance, 1, newID, b)
		if len(h.written) != 0 {
			t.Fatalf("wrote %v", h.written)
		}
		h.join(&pb.JoinGroupRequest{ClientId: "c-ib", ApiVersion: 5, GroupInstanceId: strp("ib"), MemberId: b, Protocols: protos("range", "rr")})
		if r := h.joinOK(hd); r.GetProtocolName() != "rr" || r.GenerationId != 2 {
			t.Fatalf("answer %v", r)
		}
	})
	t.Run("stable, metadata changes but vote does not: no rebalance", func(t *testing.T) {
		h := newHarness(t)
		ids := h.staticGroup(5, "ia", "ib")
		req := staticJoin("ib", 5, "")
		req.Protocols[0].Metadata = consumerMeta("ib", "new-topic")
		r := h.joinOK(h.join(req))
		h.wantState(Stable, 1, ids[0], r.MemberId)
		rec := onlyRecord(t, h.takeWritten()).GetGroup()
		if string(rec.Members[1].Subscription) != string(consumerMeta("ib", "new-topic")) {
			t.Fatalf("record subscription %q", rec.Members[1].Subscription)
		}
	})
	t.Run("completing: rebalance, old parked sync fenced", func(t *testing.T) {
		h := newHarness(t)
		ids := h.staticGroup(5, "ia", "ib")
		l := h.join(staticJoin("ia", 5, ids[0]))
		h.join(staticJoin("ib", 5, ids[1]))
		h.joinOK(l)
		h.wantState(CompletingRebalance, 2, ids...)
		h.sync(&pb.SyncGroupRequest{MemberId: ids[1], GroupInstanceId: strp("ib"), GenerationId: 2})
		h.sync(&pb.SyncGroupRequest{MemberId: ids[0], GroupInstanceId: strp("ia"), GenerationId: 2})
		h.wantState(Stable, 2, ids...)
		// Back to CompletingRebalance, then ib restarts.
		l = h.join(staticJoin("ia", 5, ids[0]))
		f := h.join(staticJoin("ib", 5, ids[1]))
		h.joinOK(l)
		h.joinOK(f)
		s := h.sync(&pb.SyncGroupRequest{MemberId: ids[1], GroupInstanceId: strp("ib"), GenerationId: 3})
		h.wantParked(s)
		newID := h.nextID("ib")
		hd := h.join(staticJoin("ib", 5, ""))
		checkMsg(t, "old sync", syncError(ErrFencedInstanceID), answer[*pb.SyncGroupResponse](h, s))
		h.wantParked(hd)
		h.wantState(PreparingRebalance, 3, ids[0], newID)
	})
}

// §6: when a static member restarts while the group is PreparingRebalance
// its old parked JoinGroup is fenced (old id echoed) and the new one waits.
func TestStaticReplacementWhilePreparing(t *testing.T) {
	h := newHarness(t)
	ids := h.staticGroup(5, "ia", "ib", "ic")
	l := h.join(staticJoin("ia", 5, ids[0]))
	oldB := h.join(staticJoin("ib", 5, ids[1]))
	h.wantState(PreparingRebalance, 1, ids...)
	newID := h.nextID("ib")
	newB := h.join(staticJoin("ib", 5, ""))
	checkMsg(t, "old join", joinError(ids[1], ErrFencedInstanceID), answer[*pb.JoinGroupResponse](h, oldB))
	h.wantParked(l, newB)
	c := h.join(staticJoin("ic", 5, ids[2]))
	rb := h.joinOK(newB)
	if rb.MemberId != newID || rb.GenerationId != 2 {
		t.Fatalf("answer %v", rb)
	}
	h.joinOK(l)
	h.joinOK(c)
	h.wantState(CompletingRebalance, 2, ids[0], newID, ids[2])
}

// §2.5/§6: static members that did not re-join are kept at join completion
// (with their old metadata); if only such members remain the join timer is
// re-armed (groupStuckInRebalanceTimeoutDueToNonjoinedStaticMember).
func TestStaticMembersKeptAtJoinCompletion(t *testing.T) {
	t.Run("kept and listed to the leader", func(t *testing.T) {
		h := newHarness(t)
		ids := h.staticGroup(5, "ia", "ib")
		l := h.join(staticJoin("ia", 5, ids[0]))
		h.wantDeadline(joinKey, h.elapsed()+60*time.Second)
		for range 11 {
			h.advance(5 * time.Second)
			h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: ids[0], GroupInstanceId: strp("ia"), GenerationId: 1}, &h.fx)
			h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: ids[1], GroupInstanceId: strp("ib"), GenerationId: 1}, &h.fx)
			h.apply()
		}
		h.advance(5 * time.Second)
		r := h.joinOK(l)
		if r.GenerationId != 2 || len(r.Members) != 2 || r.Members[1].MemberId != ids[1] || string(r.Members[1].Metadata) != string(consumerMeta("ib")) {
			t.Fatalf("answer %v", r)
		}
		h.wantState(CompletingRebalance, 2, ids...)
		h.wantDeadline(memberKey(ids[1]), h.elapsed()+10*time.Second)
	})
	t.Run("stuck while only non-rejoined static members remain", func(t *testing.T) {
		h := newHarness(t)
		a := h.join(staticJoin("ia", 5, ""))
		b := h.join(staticJoin("ib", 5, ""))
		d := h.join(&pb.JoinGroupRequest{ClientId: "dyn", ApiVersion: 3, RebalanceTimeoutMs: 20_000})
		h.advance(6 * time.Second)
		ia, ib, dyn := h.joinOK(a).MemberId, h.joinOK(b).MemberId, h.joinOK(d).MemberId
		h.syncGroup(1, ia, ia, ib, dyn)
		h.wantState(Stable, 1, ia, ib, dyn)
		hb := func() {
			h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: ia, GroupInstanceId: strp("ia"), GenerationId: 1}, &h.fx)
			h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: ib, GroupInstanceId: strp("ib"), GenerationId: 1}, &h.fx)
			h.apply()
		}
		h.leave(&pb.MemberIdentity{MemberId: dyn})
		start := h.elapsed()
		h.wantState(PreparingRebalance, 1, ia, ib)
		h.wantDeadline(joinKey, start+60*time.Second)
		for range 12 {
			h.advance(5 * time.Second)
			hb()
		}
		// The timer fired at +60s with nobody joined: still preparing, re-armed.
		h.wantState(PreparingRebalance, 1, ia, ib)
		h.wantDeadline(joinKey, start+120*time.Second)
		ja := h.join(staticJoin("ia", 5, ia))
		h.wantParked(ja)
		jb := h.join(staticJoin("ib", 5, ib))
		h.joinOK(ja)
		h.joinOK(jb)
		h.wantState(CompletingRebalance, 2, ia, ib)
	})
	t.Run("stuck group empties when the static sessions expire", func(t *testing.T) {
		h := newHarness(t)
		ids := h.staticGroup(5, "ia", "ib")
		dyn := h.nextID("dyn")
		n := h.join(&pb.JoinGroupRequest{ClientId: "dyn", ApiVersion: 3})
		h.leave(&pb.MemberIdentity{MemberId: dyn})
		checkMsg(t, "left join", joinError("", ErrUnknownMemberID), answer[*pb.JoinGroupResponse](h, n))
		h.wantState(PreparingRebalance, 1, ids...)
		// Last heartbeats were at the sync (t=6s): sessions end at 16s.
		h.advance(16*time.Second - h.elapsed())
		h.wantState(Empty, 2)
	})
}

// validateCurrentMember for static members across the APIs (§2.3, §6).
func TestStaticFencing(t *testing.T) {
	h := newHarness(t)
	ids := h.staticGroup(5, "ia", "ib")
	t.Run("join", func(t *testing.T) {
		hd := h.join(staticJoin("ia", 5, ids[1]))
		checkMsg(t, "mismatched id", joinError(ids[1], ErrFencedInstanceID), answer[*pb.JoinGroupResponse](h, hd))
		hd = h.join(staticJoin("iz", 5, ids[0]))
		checkMsg(t, "unknown instance", joinError(ids[0], ErrUnknownMemberID), answer[*pb.JoinGroupResponse](h, hd))
	})
	t.Run("sync", func(t *testing.T) {
		hd := h.sync(&pb.SyncGroupRequest{MemberId: ids[1], GroupInstanceId: strp("ia"), GenerationId: 1})
		checkMsg(t, "mismatched", syncError(ErrFencedInstanceID), answer[*pb.SyncGroupResponse](h, hd))
		hd = h.sync(&pb.SyncGroupRequest{MemberId: ids[0], GroupInstanceId: strp("iz"), GenerationId: 1})
		checkMsg(t, "unknown instance", syncError(ErrUnknownMemberID), answer[*pb.SyncGroupResponse](h, hd))
	})
	t.Run("heartbeat", func(t *testing.T) {
		code := h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: ids[1], GroupInstanceId: strp("ia"), GenerationId: 1}, &h.fx)
		if code != ErrFencedInstanceID {
			t.Fatalf("code %d", code)
		}
		h.apply()
	})
	t.Run("commit", func(t *testing.T) {
		hd := h.commit(&pb.OffsetCommitRequest{GenerationId: 1, MemberId: ids[1], GroupInstanceId: strp("ia"), Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0}}}}})
		if h.commitCode(hd, "t", 0) != ErrFencedInstanceID {
			t.Fatal("commit not fenced")
		}
	})
	t.Run("leave", func(t *testing.T) {
		r := h.leave(&pb.MemberIdentity{MemberId: ids[1], GroupInstanceId: strp("ia")})
		checkMsg(t, "leave", &pb.LeaveGroupResponse{Members: []*pb.LeaveGroupMemberResponse{{MemberId: ids[1], GroupInstanceId: strp("ia"), ErrorCode: ErrFencedInstanceID}}}, r)
	})
	h.wantState(Stable, 1, ids...)
}

// A zero rebalance timeout must not re-arm the join timer at the same
// instant forever while only non-rejoined static members remain; it waits
// group.min.session.timeout.ms instead, until they re-join or expire.
func TestStuckStaticRebalanceWithZeroRebalanceTimeout(t *testing.T) {
	rec := stableRecord(2)
	rec.Members[0].GroupInstanceId = strp("ia")
	rec.Members[0].SessionTimeoutMs = 30_000
	rec.Members[0].RebalanceTimeoutMs = 0
	rec.Members[1].RebalanceTimeoutMs = 0
	h := restoredHarness(t, DefaultConfig(), rec)
	h.leave(&pb.MemberIdentity{MemberId: "m1"})
	h.wantState(PreparingRebalance, 5, "m0")
	h.wantDeadline(joinKey, 0)
	h.advance(0) // the join timer fires: only m0 (static, not re-joined) remains
	h.wantState(PreparingRebalance, 5, "m0")
	h.wantDeadline(joinKey, 6*time.Second)
	h.advance(6 * time.Second)
	h.wantDeadline(joinKey, 12*time.Second)
	// m0 re-joins: the phase completes at once.
	r := h.joinOK(h.join(&pb.JoinGroupRequest{ClientId: "c", ApiVersion: 5, GroupInstanceId: strp("ia"), MemberId: "m0", SessionTimeoutMs: 30_000}))
	if r.GenerationId != 6 {
		t.Fatalf("answer %v", r)
	}
}

// A static member that restarts before its first SyncGroup is still pending
// sync; if the pending-sync timer removes it while its replacement is being
// written, its JoinGroup is answered (UNKNOWN_MEMBER_ID), not lost.
func TestStaticReplacementPendingSyncExpiry(t *testing.T) {
	h := newHarness(t)
	a := h.join(staticJoin("ia", 5, ""))
	b := h.join(staticJoin("ib", 5, ""))
	h.advance(6 * time.Second)
	ia, ib := h.joinOK(a).MemberId, h.joinOK(b).MemberId
	h.syncCode(h.syncGroup(1, ia, ia)[ia]) // ib never syncs
	h.wantState(Stable, 1, ia, ib)
	h.hold = true
	newID := h.nextID("ib")
	j := h.join(staticJoin("ib", 5, ""))
	h.wantParked(j)
	for range 11 {
		h.advance(5 * time.Second)
		h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: ia, GroupInstanceId: strp("ia"), GenerationId: 1}, &h.fx)
		h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: newID, GroupInstanceId: strp("ib"), GenerationId: 1}, &h.fx)
		h.apply()
	}
	h.advance(5 * time.Second) // pending-sync timer: 6s + 60s
	checkMsg(t, "join", joinError("", ErrUnknownMemberID), answer[*pb.JoinGroupResponse](h, j))
	h.wantState(PreparingRebalance, 1, ia)
	h.release(nil)
	h.wantState(PreparingRebalance, 1, ia)
}

// A replacement write slower than the session timeout: the member's session
// timer fires while its JoinGroup waits (it is kept), and answering the
// JoinGroup gives it a fresh session, so a member that dies afterwards is
// still removed.
func TestStaticReplacementSlowWrite(t *testing.T) {
	h := newHarness(t)
	ids := h.staticGroup(5, "ia", "ib")
	h.hold = true
	newID := h.nextID("ib")
	j := h.join(staticJoin("ib", 5, ""))
	for range 4 {
		h.advance(5 * time.Second)
		h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: ids[0], GroupInstanceId: strp("ia"), GenerationId: 1}, &h.fx)
		h.apply()
	}
	h.wantParked(j)
	h.wantState(Stable, 1, ids[0], newID)
	h.release(nil)
	if r := h.joinOK(j); r.MemberId != newID {
		t.Fatalf("answer %v", r)
	}
	h.wantDeadline(memberKey(newID), h.elapsed()+10*time.Second)
	for range 2 {
		h.advance(5 * time.Second)
		h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: ids[0], GroupInstanceId: strp("ia"), GenerationId: 1}, &h.fx)
		h.apply()
	}
	h.wantState(PreparingRebalance, 1, ids[0])
}
