package coordinator

import (
	"testing"
	"time"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// KAFKA-9232 (§4.1): the new-member join timeout must end with the join
// phase. A member that joined with a session timeout shorter than the
// new-member timeout, synced and keeps heartbeating stays a member of the
// same generation long after the new-member deadline (5 minutes).
func TestKafka9232NewMemberTimeoutDoesNotOutliveJoin(t *testing.T) {
	cases := []struct {
		name string
		join func(h *harness, client string) int
	}{
		{"JoinGroup v3", func(h *harness, c string) int {
			return h.join(&pb.JoinGroupRequest{ClientId: c, ApiVersion: 3, SessionTimeoutMs: 10_000})
		}},
		{"JoinGroup v0", func(h *harness, c string) int {
			return h.join(&pb.JoinGroupRequest{ClientId: c, ApiVersion: 0, SessionTimeoutMs: 10_000})
		}},
		{"JoinGroup v4 second join", func(h *harness, c string) int {
			hd, _ := h.joinV4(c, 4)
			return hd
		}},
		{"JoinGroup v5 new static member", func(h *harness, c string) int {
			return h.join(&pb.JoinGroupRequest{ClientId: c, ApiVersion: 5, GroupInstanceId: strp(c), SessionTimeoutMs: 10_000})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			a, b := tc.join(h, "a"), tc.join(h, "b")
			h.advance(6 * time.Second)
			ra, rb := h.joinOK(a), h.joinOK(b)
			ids := []string{ra.MemberId, rb.MemberId}
			for id, hd := range h.syncGroup(1, ra.MemberId, ids...) {
				if h.syncCode(hd) != ErrNone {
					t.Fatalf("sync of %s failed", id)
				}
			}
			h.wantState(Stable, 1, ids...)
			var inst [2]*string
			for i, id := range ids {
				inst[i] = cloneOpt(h.g.members.get(id).instanceID)
			}
			for h.elapsed() < 10*time.Minute {
				h.advance(3 * time.Second)
				for i, id := range ids {
					code := h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: id, GroupInstanceId: inst[i], GenerationId: 1}, &h.fx)
					h.apply()
					if code != ErrNone {
						t.Fatalf("heartbeat of %s at %v: %d", id, h.elapsed(), code)
					}
					h.wantDeadline(memberKey(id), h.elapsed()+10*time.Second)
				}
			}
			h.wantState(Stable, 1, ids...)
			if len(h.timers) != 4 { // two members, the offset check and the session check
				t.Fatalf("timers %v", h.timers)
			}
		})
	}
}

// KAFKA-9752 (§4.1): join completion must leave every member with a
// session timer. Members that stop right after their JoinGroup or SyncGroup
// response are removed after their session timeout (not the new-member
// timeout), and the survivors complete a new rebalance instead of hanging.
func TestKafka9752MembersFailingAfterJoinOrSyncAreExpired(t *testing.T) {
	h := newHarness(t)
	a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3, SessionTimeoutMs: 10_000})
	b := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 3, SessionTimeoutMs: 10_000})
	c := h.join(&pb.JoinGroupRequest{ClientId: "c", ApiVersion: 3, SessionTimeoutMs: 10_000})
	h.advance(6 * time.Second) // join phase completes at 6s
	ia, ib, ic := h.joinOK(a).MemberId, h.joinOK(b).MemberId, h.joinOK(c).MemberId
	// b stops right after its JoinGroup response: no SyncGroup, no heartbeat.
	// a (leader) syncs at once; c syncs at 8s and stops right after.
	sa := h.sync(&pb.SyncGroupRequest{MemberId: ia, GenerationId: 1, Assignments: []*pb.SyncGroupAssignment{
		{MemberId: ia, Assignment: []byte("A")}, {MemberId: ib, Assignment: []byte("B")}, {MemberId: ic, Assignment: []byte("C")}}})
	h.syncCode(sa)
	h.wantState(Stable, 1, ia, ib, ic)
	h.advance(2 * time.Second)
	if r := answer[*pb.SyncGroupResponse](h, h.sync(&pb.SyncGroupRequest{MemberId: ic, GenerationId: 1})); string(r.Assignment) != "C" {
		t.Fatalf("c sync %v", r)
	}
	hb := func() {
		if code := h.heartbeat(ia, h.g.Generation()); code != ErrNone && code != ErrRebalanceInProgress {
			t.Fatalf("a heartbeat %d", code)
		}
	}
	// b's session: 6s + 10s.
	h.advance(8*time.Second - ms) // 15.999s
	hb()
	h.wantState(Stable, 1, ia, ib, ic)
	h.advance(ms) // 16s
	h.wantState(PreparingRebalance, 1, ia, ic)
	// c's session: 8s + 10s.
	h.advance(2*time.Second - ms)
	h.wantState(PreparingRebalance, 1, ia, ic)
	h.advance(ms) // 18s
	h.wantState(PreparingRebalance, 1, ia)
	// The survivor learns about the rebalance, re-joins and syncs.
	if code := h.heartbeat(ia, 1); code != ErrRebalanceInProgress {
		t.Fatalf("a heartbeat %d", code)
	}
	r := h.joinOK(h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3, MemberId: ia, SessionTimeoutMs: 10_000}))
	if r.GenerationId != 2 || r.Leader != ia || len(r.Members) != 1 {
		t.Fatalf("rejoin %v", r)
	}
	h.syncCode(h.syncGroup(2, ia, ia)[ia])
	h.wantState(Stable, 2, ia)
	// And it stays, past its own new-member deadline.
	for h.elapsed() < 7*time.Minute {
		h.advance(3 * time.Second)
		hb()
	}
	h.wantState(Stable, 2, ia)
}

// KAFKA-9752, the hang it caused: a new leader that dies right after its
// JoinGroup response never syncs; it is removed after its session timeout
// and the followers complete a rebalance well before any longer timeout.
func TestKafka9752LeaderFailingAfterJoinDoesNotHangRebalance(t *testing.T) {
	h := newHarness(t)
	var hds []int
	for _, c := range []string{"a", "b", "c"} {
		hds = append(hds, h.join(&pb.JoinGroupRequest{ClientId: c, ApiVersion: 3, SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 300_000}))
	}
	h.advance(6 * time.Second)
	var ids []string
	for _, hd := range hds {
		ids = append(ids, h.joinOK(hd).MemberId)
	}
	// Followers sync (parked) and heartbeat; the leader is gone.
	sb := h.sync(&pb.SyncGroupRequest{MemberId: ids[1], GenerationId: 1})
	sc := h.sync(&pb.SyncGroupRequest{MemberId: ids[2], GenerationId: 1})
	for range 3 {
		h.advance(3 * time.Second)
		h.heartbeat(ids[1], 1)
		h.heartbeat(ids[2], 1)
	}
	h.wantParked(sb, sc)
	h.advance(time.Second) // 16s: leader's session ends
	if h.syncCode(sb) != ErrRebalanceInProgress || h.syncCode(sc) != ErrRebalanceInProgress {
		t.Fatal("parked syncs not released")
	}
	h.wantState(PreparingRebalance, 1, ids[1], ids[2])
	jb := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 3, MemberId: ids[1], SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 300_000})
	jc := h.join(&pb.JoinGroupRequest{ClientId: "c", ApiVersion: 3, MemberId: ids[2], SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 300_000})
	rb, rc := h.joinOK(jb), h.joinOK(jc)
	if rb.GenerationId != 2 || rb.Leader != ids[1] || rc.Leader != ids[1] {
		t.Fatalf("answers %v / %v", rb, rc)
	}
	h.syncGroup(2, ids[1], ids[1], ids[2])
	h.wantState(Stable, 2, ids[1], ids[2])
	if h.elapsed() != 16*time.Second {
		t.Fatalf("took until %v", h.elapsed())
	}
}

// KAFKA-9232's own scenario (testNewMemberTimeoutCompletion): with a session
// timeout just above the new-member timeout, a member that joined and synced
// outlives the new-member deadline and is removed one session timeout after
// its last liveness event, not before.
func TestKafka9232NewMemberTimeoutCompletion(t *testing.T) {
	h := newHarness(t)
	session := 5*time.Minute + 5*time.Second
	a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3, SessionTimeoutMs: int32(session / ms), RebalanceTimeoutMs: 600_000})
	h.advance(3 * time.Second)
	id := h.joinOK(a).MemberId
	h.syncCode(h.syncGroup(1, id, id)[id]) // sync at 3s re-arms the session
	h.advance(5*time.Minute + 100*ms)
	h.wantState(Stable, 1, id)
	h.advance(3*time.Second + session - ms - h.elapsed()) // just before 3s + session
	h.wantState(Stable, 1, id)
	h.advance(ms)
	h.wantState(Empty, 2)
}
