package coordinator

import (
	"testing"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// A join phase reserves its generation before answering; a group restored
// from a record whose floor is above its generation (a rebalance answered,
// then the coordinator failed before the assignment was written) continues
// above the floor, so no generation is handed out twice.
func TestGenerationFloorSurvivesFailover(t *testing.T) {
	h := newHarness(t)
	ids := h.stableGroup(2)
	stable := h.g.groupRecord(h.now, nil).GetGroup()

	// A rebalance completes its join phase (generation 2 is answered) and the
	// coordinator dies before the leader's SyncGroup is written.
	h.hold = true
	j0 := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
	j1 := h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 3, MemberId: ids[1]})
	if !h.isParked(j0) || !h.isParked(j1) {
		t.Fatal("JoinGroup answered before its generation was reserved")
	}
	h.release(nil)
	if r := answer[*pb.JoinGroupResponse](h, j0); r.GenerationId != 2 {
		t.Fatalf("join answered generation %d, want 2", r.GenerationId)
	}
	var reserved int32
	for _, r := range h.written {
		if g := r.GetGenerationReserved(); g != nil {
			reserved = g.GetGeneration()
		}
	}
	if reserved != 2 {
		t.Fatalf("reserved generation %d, want 2 (written %v)", reserved, h.written)
	}

	// The new coordinator loads the last Stable record with the floor the
	// store raised.
	stable.GenerationFloor = reserved
	g := Restore(&h.cfg, stable, nil, h.now)
	if g.Generation() != 1 || g.State() != Stable {
		t.Fatalf("restored %v at generation %d", g.State(), g.Generation())
	}
	h2 := newHarness(t)
	h2.g = g
	h2.g.Start(h2.now, &h2.fx)
	h2.apply()
	// Members of generation 1 heartbeat on; the next join phase is 3, not 2.
	if code := h2.heartbeat(ids[0], 1); code != ErrNone {
		t.Fatalf("heartbeat at generation 1: %d", code)
	}
	a := h2.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
	b := h2.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 3, MemberId: ids[1]})
	for _, hd := range []int{a, b} {
		if r := answer[*pb.JoinGroupResponse](h2, hd); r.ErrorCode != ErrNone || r.GenerationId != 3 {
			t.Fatalf("join after failover: %v", r)
		}
	}
}

// A failed reservation answers the parked JoinGroups with the mapped error
// and starts another join phase.
func TestGenerationReservationFailure(t *testing.T) {
	h := newHarness(t)
	ids := h.stableGroup(1)
	h.hold = true
	j := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
	h.release(ErrStoreTimeout)
	if r := answer[*pb.JoinGroupResponse](h, j); r.ErrorCode != ErrRebalanceInProgress || r.MemberId != ids[0] {
		t.Fatalf("join after a failed reservation: %v", r)
	}
	if h.g.State() != PreparingRebalance {
		t.Fatalf("state %v, want a new join phase", h.g.State())
	}
}

// A LeaveGroup is answered once the group without the leaver is written; the
// record asks for a rebalance, so a coordinator that loads it neither brings
// the leaver back nor serves the old assignment.
func TestLeaveIsDurableBeforeItsAnswer(t *testing.T) {
	h := newHarness(t)
	ids := h.stableGroup(3)
	h.hold = true
	if r := h.leave(&pb.MemberIdentity{MemberId: ids[2]}); r != nil {
		t.Fatalf("LeaveGroup answered before its write: %v", r)
	}
	var rec *pb.GroupRecord
	for _, r := range h.written {
		if g := r.GetGroup(); g != nil {
			rec = g
		}
	}
	if rec == nil || !rec.GetRebalancePending() || len(rec.GetMembers()) != 2 || rec.GetGeneration() != 1 {
		t.Fatalf("membership record %v", rec)
	}
	h.release(nil)

	g := Restore(&h.cfg, rec, nil, h.now)
	h2 := newHarness(t)
	h2.g = g
	h2.g.Start(h2.now, &h2.fx)
	h2.apply()
	if g.State() != PreparingRebalance || g.NumMembers() != 2 {
		t.Fatalf("restored %v with %d members, want a rebalance of the 2 that stayed", g.State(), g.NumMembers())
	}
	if code := h2.heartbeat(ids[0], 1); code != ErrRebalanceInProgress {
		t.Fatalf("heartbeat after restore: %d", code)
	}
	if code := h2.heartbeat(ids[2], 1); code != ErrUnknownMemberID {
		t.Fatalf("the leaver came back: %d", code)
	}
}
