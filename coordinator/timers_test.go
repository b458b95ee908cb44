package coordinator

import (
	"fmt"
	"testing"
	"time"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// §3.6: InitialDelayedJoin, linear extension capped by the first member's
// rebalance timeout, never completing early. D = 3s.
func TestInitialRebalanceDelay(t *testing.T) {
	const D = 3 * time.Second
	type join struct {
		at        time.Duration
		rebalance time.Duration
	}
	cases := []struct {
		name  string
		joins []join
		want  time.Duration // when every join is answered
	}{
		{"one member completes at D", []join{{0, 60 * time.Second}}, D},
		{"rebalance 3D, second join at D-1: extended once to 2D", []join{{0, 3 * D}, {D - ms, 3 * D}}, 2 * D},
		{"rebalance 2D, two at 0, third at D+1: all at exactly 2D", []join{{0, 2 * D}, {0, 2 * D}, {D + ms, 2 * D}}, 2 * D},
		{"linear, not doubling: a join in each window extends by D", []join{{0, 10 * D}, {D - ms, 10 * D}, {2*D - ms, 10 * D}, {3*D - ms, 10 * D}}, 4 * D},
		{"a window without a new member ends the delay", []join{{0, 100 * D}, {D - ms, 100 * D}}, 2 * D},
		{"capped by the first member's rebalance timeout", []join{{0, 7500 * ms}, {D - ms, 7500 * ms}, {2*D - ms, 7500 * ms}, {2*D + time.Second, 7500 * ms}}, 7500 * ms},
		{"rebalance timeout below D: no extension", []join{{0, 2 * time.Second}, {time.Second, 60 * time.Second}}, D},
		{"the cap is the rebalance timeout of the members present at the start", []join{{0, D}, {D - ms, 100 * D}}, D},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			var hds []int
			for i, j := range tc.joins {
				h.advance(j.at - h.elapsed())
				hds = append(hds, h.join(&pb.JoinGroupRequest{ClientId: fmt.Sprintf("c%d", i), ApiVersion: 3, RebalanceTimeoutMs: int32(j.rebalance / ms)}))
			}
			h.advance(tc.want - ms - h.elapsed())
			h.wantParked(hds...)
			h.wantState(PreparingRebalance, 0, h.g.MemberIDs()...)
			h.advance(ms)
			for _, hd := range hds {
				if r := h.joinOK(hd); r.GenerationId != 1 || len(r.Members) != 0 && len(r.Members) != len(hds) {
					t.Fatalf("answer %v", r)
				}
			}
			h.wantState(CompletingRebalance, 1, h.g.MemberIDs()...)
		})
	}
}

// The initial delay applies whenever a rebalance starts from Empty, also
// after earlier generations (the extension follows Kafka's newer
// coordinator here; the older one extends only at generation 0).
func TestInitialRebalanceDelayAfterEmpty(t *testing.T) {
	h := newHarness(t)
	ids := h.stableGroup(1)
	h.leave(&pb.MemberIdentity{MemberId: ids[0]})
	h.wantState(Empty, 2)
	start := h.elapsed()
	a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3})
	h.wantDeadline(joinKey, start+3*time.Second)
	h.advance(3*time.Second - ms)
	b := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 3})
	h.advance(3 * time.Second)
	h.wantParked(a, b)
	h.advance(ms)
	h.joinOK(a)
	h.joinOK(b)
	h.wantState(CompletingRebalance, 3, "a-id2", "b-id3")
}

// With no initial delay configured the first join phase still waits for
// the (zero) timer rather than completing inside the JoinGroup call.
func TestInitialRebalanceDelayZero(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.InitialRebalanceDelay = 0 })
	a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3})
	h.wantParked(a)
	h.wantDeadline(joinKey, 0)
	h.advance(0)
	if r := h.joinOK(a); r.GenerationId != 1 {
		t.Fatalf("answer %v", r)
	}
}

// §3.2: session expiry and the liveness events that reset it.
func TestSessionExpiry(t *testing.T) {
	t.Run("a silent member is removed at exactly its session timeout", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(2) // Stable at 6s; syncs armed both sessions to 16s
		h.advance(3 * time.Second)
		h.heartbeat(ids[0], 1)
		h.heartbeat(ids[1], 1) // last heartbeat of ids[1] at 9s
		h.advance(3 * time.Second)
		h.heartbeat(ids[0], 1)
		h.advance(3 * time.Second)
		h.heartbeat(ids[0], 1) // at 15s
		h.advance(4*time.Second - ms)
		h.wantState(Stable, 1, ids...)
		h.advance(ms) // 19s
		h.wantState(PreparingRebalance, 1, ids[0])
		if code := h.heartbeat(ids[0], 1); code != ErrRebalanceInProgress {
			t.Fatalf("heartbeat %d", code)
		}
		if code := h.heartbeat(ids[1], 1); code != ErrUnknownMemberID {
			t.Fatalf("removed member heartbeat %d", code)
		}
		r := h.joinOK(h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]}))
		if r.GenerationId != 2 || r.Leader != ids[0] || len(r.Members) != 1 {
			t.Fatalf("answer %v", r)
		}
	})
	t.Run("liveness events re-arm the session timer", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(2)
		f := ids[1]
		commit := func(gen int32) int {
			return h.commit(&pb.OffsetCommitRequest{GenerationId: gen, MemberId: f, Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 1}}}}})
		}
		h.advance(time.Second)
		h.heartbeat(f, 1)
		h.wantDeadline(memberKey(f), h.elapsed()+10*time.Second)
		h.advance(time.Second)
		commit(1)
		h.wantDeadline(memberKey(f), h.elapsed()+10*time.Second)
		h.advance(time.Second)
		h.sync(&pb.SyncGroupRequest{MemberId: f, GenerationId: 1})
		h.wantDeadline(memberKey(f), h.elapsed()+10*time.Second)
		// PreparingRebalance: heartbeat answers REBALANCE_IN_PROGRESS and re-arms; commits are accepted and re-arm.
		h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
		h.advance(time.Second)
		if code := h.heartbeat(f, 1); code != ErrRebalanceInProgress {
			t.Fatalf("heartbeat %d", code)
		}
		h.wantDeadline(memberKey(f), h.elapsed()+10*time.Second)
		h.advance(time.Second)
		if code := h.commitCode(commit(1), "t", 0); code != ErrNone {
			t.Fatalf("commit in PreparingRebalance %d", code)
		}
		h.wantDeadline(memberKey(f), h.elapsed()+10*time.Second)
		// An unknown or failed request does not re-arm anything.
		before, _ := h.deadline(memberKey(f))
		h.advance(time.Second)
		h.heartbeat(f, 7)
		if after, _ := h.deadline(memberKey(f)); after != before {
			t.Fatal("ILLEGAL_GENERATION heartbeat re-armed the timer")
		}
		// CompletingRebalance: heartbeat answers NONE and re-arms.
		j := h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 3, MemberId: f})
		h.joinOK(j)
		h.advance(time.Second)
		if code := h.heartbeat(f, 2); code != ErrNone {
			t.Fatalf("heartbeat %d", code)
		}
		h.wantDeadline(memberKey(f), h.elapsed()+10*time.Second)
	})
	t.Run("members parked in join or sync are not expired by their session", func(t *testing.T) {
		h := newHarness(t)
		ids := h.stableGroup(3)
		// Leader re-joins at 6s and then goes silent while parked.
		l := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
		f := h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 3, MemberId: ids[1]})
		// ids[2] keeps heartbeating but never re-joins.
		for range 11 {
			h.advance(5 * time.Second)
			h.heartbeat(ids[2], 1)
		}
		h.wantParked(l, f)
		h.advance(5 * time.Second) // rebalance timeout: 6s + 60s
		h.joinOK(l)
		h.joinOK(f)
		h.wantState(CompletingRebalance, 2, ids[0], ids[1])
		// The follower syncs and goes silent while parked; the leader
		// heartbeats but does not sync.
		s := h.sync(&pb.SyncGroupRequest{MemberId: ids[1], GenerationId: 2})
		for range 11 {
			h.advance(5 * time.Second)
			h.heartbeat(ids[0], 2)
		}
		h.wantParked(s)
		h.wantState(CompletingRebalance, 2, ids[0], ids[1])
		// The pending-sync timer removes the leader; the follower's parked
		// SyncGroup is answered and its session runs again from now.
		h.advance(5 * time.Second)
		if h.syncCode(s) != ErrRebalanceInProgress {
			t.Fatal("parked sync not answered REBALANCE_IN_PROGRESS")
		}
		h.wantState(PreparingRebalance, 2, ids[1])
		h.wantDeadline(memberKey(ids[1]), h.elapsed()+10*time.Second)
	})
}

// A member kept because it was parked in SyncGroup when its session timer
// fired gets a fresh session timer when that SyncGroup is answered with an
// error, as Kafka's propagateAssignment does; otherwise a static member that
// dies then would keep the group in PreparingRebalance forever.
func TestSessionTimerRearmedWhenParkedSyncFails(t *testing.T) {
	for _, how := range []string{"rebalance", "write failure"} {
		t.Run(how, func(t *testing.T) {
			h := newHarness(t)
			l := h.join(&pb.JoinGroupRequest{ClientId: "l", ApiVersion: 3})
			s := h.join(staticJoin("is", 5, ""))
			h.advance(6 * time.Second)
			lid, sid := h.joinOK(l).MemberId, h.joinOK(s).MemberId
			h.wantState(CompletingRebalance, 1, lid, sid)
			ss := h.sync(&pb.SyncGroupRequest{MemberId: sid, GroupInstanceId: strp("is"), GenerationId: 1})
			// The static member is silent from now on; its session timer
			// fires at +10s while it is parked and it is kept.
			for range 11 {
				h.advance(5 * time.Second)
				h.heartbeat(lid, 1)
			}
			h.wantParked(ss)
			if how == "rebalance" {
				h.advance(5 * time.Second) // pending-sync timer: the leader never synced
				h.wantState(PreparingRebalance, 1, sid)
			} else {
				h.failErr = ErrStoreUnavailable
				h.syncGroup(1, lid, lid)
				h.failErr = nil
				h.wantState(PreparingRebalance, 1, lid, sid)
				h.leave(&pb.MemberIdentity{MemberId: lid})
				h.wantState(PreparingRebalance, 1, sid)
			}
			if h.syncCode(ss) == ErrNone {
				t.Fatal("parked sync succeeded")
			}
			// The static member never comes back: its session ends and the
			// group empties instead of waiting for it forever.
			h.advance(10 * time.Second)
			h.wantState(Empty, 2)
		})
	}
}

// §3.3: a member added by JoinGroup gets the new-member join timeout (5 min),
// not its session timeout (testNewMemberJoinExpiration).
func TestNewMemberJoinTimeout(t *testing.T) {
	if DefaultConfig().NewMemberJoinTimeout != 5*time.Minute {
		t.Fatal("default new member join timeout is not 5 minutes")
	}
	h := newHarness(t)
	old := h.join(&pb.JoinGroupRequest{ClientId: "old", ApiVersion: 3, SessionTimeoutMs: 305_000, RebalanceTimeoutMs: 600_000})
	h.advance(3 * time.Second)
	oldID := h.joinOK(old).MemberId
	h.syncGroup(1, oldID, oldID)
	h.wantState(Stable, 1, oldID)
	// A new member joins; the old one keeps heartbeating but does not re-join,
	// so the join phase waits for the 10-minute rebalance timeout.
	start := h.elapsed()
	n := h.join(&pb.JoinGroupRequest{ClientId: "new", ApiVersion: 3, SessionTimeoutMs: 305_000, RebalanceTimeoutMs: 600_000})
	newID := h.g.MemberIDs()[1]
	h.wantDeadline(memberKey(newID), start+300*time.Second)
	for h.elapsed() < start+300*time.Second-time.Second {
		h.advance(time.Second)
		h.heartbeat(oldID, 1)
	}
	h.advance(time.Second - ms)
	h.wantParked(n)
	h.advance(ms)
	checkMsg(t, "new member", joinError("", ErrUnknownMemberID), answer[*pb.JoinGroupResponse](h, n))
	h.wantState(PreparingRebalance, 1, oldID)
}

// A new member whose session timeout is shorter than the join phase is not
// removed by it: it cannot heartbeat while its JoinGroup is parked.
func TestNewMemberOutlivesShortSessionWhileParked(t *testing.T) {
	h := newHarness(t)
	ids := h.stableGroup(2)
	n := h.join(&pb.JoinGroupRequest{ClientId: "new", ApiVersion: 3, SessionTimeoutMs: 6_000})
	l := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
	for range 11 {
		h.advance(5 * time.Second)
		h.heartbeat(ids[0], 1)
		h.heartbeat(ids[1], 1)
	}
	h.wantParked(n, l)
	h.advance(5 * time.Second) // 60s rebalance timeout: ids[1] never re-joined
	r := h.joinOK(n)
	h.joinOK(l)
	if r.GenerationId != 2 {
		t.Fatalf("answer %v", r)
	}
	h.wantState(CompletingRebalance, 2, ids[0], r.MemberId)
	h.wantDeadline(memberKey(r.MemberId), h.elapsed()+6*time.Second)
}

// §3.5: the rebalance timeout is the largest of the members' at the start
// of the join phase; on expiry dynamic members that did not re-join are
// removed.
func TestRebalanceTimeout(t *testing.T) {
	h := newHarness(t)
	a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3, RebalanceTimeoutMs: 20_000})
	b := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 3, RebalanceTimeoutMs: 45_000})
	c := h.join(&pb.JoinGroupRequest{ClientId: "c", ApiVersion: 3, RebalanceTimeoutMs: 30_000})
	h.advance(6 * time.Second)
	ia, ib, ic := h.joinOK(a).MemberId, h.joinOK(b).MemberId, h.joinOK(c).MemberId
	h.wantDeadline(syncKey, 6*time.Second+45*time.Second)
	h.syncGroup(1, ia, ia, ib, ic)
	h.wantNoTimer(syncKey) // everybody synced
	start := h.elapsed()
	ja := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3, MemberId: ia, RebalanceTimeoutMs: 20_000})
	h.wantDeadline(joinKey, start+45*time.Second)
	for h.elapsed() < start+40*time.Second {
		h.advance(5 * time.Second)
		for _, id := range []string{ia, ib, ic} {
			h.heartbeat(id, 1)
		}
	}
	jc := h.join(&pb.JoinGroupRequest{ClientId: "c", ApiVersion: 3, MemberId: ic, RebalanceTimeoutMs: 30_000})
	h.advance(5*time.Second - ms)
	h.wantParked(ja, jc)
	h.advance(ms)
	r := h.joinOK(ja)
	if r.GenerationId != 2 || len(r.Members) != 2 || r.Leader != ia {
		t.Fatalf("answer %v", r)
	}
	h.joinOK(jc)
	h.wantState(CompletingRebalance, 2, ia, ic)
	h.wantNoTimer(memberKey(ib))
	// The next phase waits max(20s, 30s).
	h.join(&pb.JoinGroupRequest{ClientId: "c", ApiVersion: 3, MemberId: ic, RebalanceTimeoutMs: 30_000, Protocols: protos("range")})
	h.wantDeadline(joinKey, h.elapsed()+30*time.Second)
}

// A leader that did not re-join (a static one stays a member) is replaced
// at join completion by the oldest member that did (doc.go).
func TestLeaderReelectedAtJoinCompletion(t *testing.T) {
	h := newHarness(t)
	a := h.join(staticJoin("ia", 5, ""))
	b := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 5, GroupInstanceId: nil})
	h.advance(6 * time.Second)
	_ = b
	ia := h.joinOK(a).MemberId
	// b was a v5 dynamic first join: MEMBER_ID_REQUIRED.
	bid := answer[*pb.JoinGroupResponse](h, b).MemberId
	jb := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 5, MemberId: bid})
	c := h.join(&pb.JoinGroupRequest{ClientId: "c", ApiVersion: 3})
	h.wantState(PreparingRebalance, 1, ia, bid, h.g.MemberIDs()[2])
	cid := h.g.MemberIDs()[2]
	// ia (static leader) heartbeats but does not re-join.
	for range 12 {
		h.advance(5 * time.Second)
		h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: ia, GroupInstanceId: strp("ia"), GenerationId: 1}, &h.fx)
		h.apply()
	}
	rb, rc := h.joinOK(jb), h.joinOK(c)
	if rb.Leader != bid || len(rb.Members) != 3 || rc.Leader != bid || len(rc.Members) != 0 {
		t.Fatalf("answers %v / %v", rb, rc)
	}
	h.wantState(CompletingRebalance, 2, ia, bid, cid)
}

// §3.7: the pending-sync timer (KAFKA-12890).
func TestPendingSyncTimeout(t *testing.T) {
	form := func(t *testing.T) (*harness, []string) {
		h := newHarness(t)
		ids := h.stableGroup(2)
		l := h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
		h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 3, MemberId: ids[1]})
		h.joinOK(l)
		h.wantState(CompletingRebalance, 2, ids...)
		h.wantDeadline(syncKey, h.elapsed()+60*time.Second)
		return h, ids
	}
	t.Run("leader never syncs: removed, parked follower gets REBALANCE_IN_PROGRESS", func(t *testing.T) {
		h, ids := form(t)
		start := h.elapsed()
		s := h.sync(&pb.SyncGroupRequest{MemberId: ids[1], GenerationId: 2})
		for h.elapsed() < start+55*time.Second {
			h.advance(5 * time.Second)
			h.heartbeat(ids[0], 2) // alive, but never syncs
		}
		h.advance(5*time.Second - ms)
		h.wantParked(s)
		h.advance(ms)
		checkMsg(t, "follower", syncError(ErrRebalanceInProgress), answer[*pb.SyncGroupResponse](h, s))
		h.wantState(PreparingRebalance, 2, ids[1])
		r := h.joinOK(h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 3, MemberId: ids[1]}))
		if r.GenerationId != 3 || r.Leader != ids[1] {
			t.Fatalf("answer %v", r)
		}
	})
	t.Run("follower never syncs: removed from the Stable group", func(t *testing.T) {
		h, ids := form(t)
		start := h.elapsed()
		s := h.syncGroup(2, ids[0], ids[0])
		h.syncCode(s[ids[0]])
		h.wantState(Stable, 2, ids...)
		for h.elapsed() < start+55*time.Second {
			h.advance(5 * time.Second)
			h.heartbeat(ids[0], 2)
			h.heartbeat(ids[1], 2)
		}
		h.advance(5 * time.Second)
		h.wantState(PreparingRebalance, 2, ids[0])
	})
	t.Run("everybody syncs: timer cancelled", func(t *testing.T) {
		h, ids := form(t)
		h.syncGroup(2, ids[0], ids...)
		h.wantNoTimer(syncKey)
	})
	t.Run("a new rebalance cancels it", func(t *testing.T) {
		h, ids := form(t)
		h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 3, MemberId: ids[1], Protocols: []*pb.Protocol{{Name: "range", Metadata: []byte("x")}}})
		h.wantNoTimer(syncKey)
		if len(h.g.pendSync) != 0 {
			t.Fatal("pending sync set not cleared")
		}
	})
	t.Run("a stale sync timer of an earlier generation does nothing", func(t *testing.T) {
		h, ids := form(t)
		h.g.syncGen = 1 // as if the fire belonged to generation 1
		h.g.OnTimer(h.now, syncKey, &h.fx)
		h.apply()
		h.wantState(CompletingRebalance, 2, ids...)
	})
}

// §3.8: offset retention.
func TestOffsetRetention(t *testing.T) {
	retention := func(c *Config) { c.OffsetsRetention = time.Hour; c.OffsetsRetentionCheckInterval = 10 * time.Minute }
	commitReq := func(gen int32, member, topic string, retentionMs int64) *pb.OffsetCommitRequest {
		return &pb.OffsetCommitRequest{GenerationId: gen, MemberId: member, RetentionTimeMs: retentionMs, Topics: []*pb.OffsetCommitTopic{{Name: topic, Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 7}}}}}
	}
	t.Run("Empty group with a protocol type: from the time it became Empty, then the group dies", func(t *testing.T) {
		h := newHarness(t, retention)
		ids := h.stableGroup(1)
		h.commit(commitReq(1, ids[0], "t", -1))
		h.advance(4 * time.Minute) // 10 minutes since t0
		h.leave(&pb.MemberIdentity{MemberId: ids[0]})
		emptyAt := h.elapsed()
		h.takeWritten()
		// Checks run at 10, 20, ... minutes; the first one at or after emptyAt+1h expires it.
		h.advance(emptyAt + time.Hour - h.elapsed() - ms)
		if o := h.fetchOne("t", 0, false); o.Offset != 7 {
			t.Fatalf("expired early: %v", o)
		}
		h.advance(time.Hour + 10*time.Minute - h.elapsed() + emptyAt)
		wantRecords(t, []*pb.Record{
			{Kind: &pb.Record_OffsetTombstone{OffsetTombstone: &pb.OffsetTombstone{GroupId: "g", Topic: "t", Partition: 0}}},
			{Kind: &pb.Record_GroupTombstone{GroupTombstone: &pb.GroupTombstone{GroupId: "g"}}},
		}, h.takeWritten())
		if h.g.State() != Dead || !h.gone {
			t.Fatalf("state %v gone %v", h.g.State(), h.gone)
		}
		h.wantNoTimer(expiryKey)
	})
	t.Run("Stable consumer group: only unsubscribed topics, from the commit time", func(t *testing.T) {
		h := newHarness(t, retention)
		a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3, SessionTimeoutMs: 1_800_000, Protocols: []*pb.Protocol{{Name: "range", Metadata: consumerMeta("sub")}}})
		h.advance(3 * time.Second)
		id := h.joinOK(a).MemberId
		h.syncGroup(1, id, id)
		h.commit(commitReq(1, id, "sub", -1))
		h.commit(commitReq(1, id, "unsub", -1))
		for range 7 {
			h.advance(10 * time.Minute)
			h.heartbeat(id, 1)
		}
		if o := h.fetchOne("sub", 0, false); o.Offset != 7 {
			t.Fatalf("subscribed topic expired: %v", o)
		}
		if o := h.fetchOne("unsub", 0, false); o.Offset != -1 {
			t.Fatalf("unsubscribed topic kept: %v", o)
		}
		h.wantState(Stable, 1, id)
	})
	t.Run("simple group: from the commit time", func(t *testing.T) {
		h := newHarness(t, retention)
		h.advance(5 * time.Minute)
		h.commit(commitReq(-1, "", "t", -1))
		h.advance(time.Hour) // 1h05: the check at 1h00 is too early ...
		if o := h.fetchOne("t", 0, false); o.Offset != 7 {
			t.Fatalf("expired early: %v", o)
		}
		h.advance(5 * time.Minute) // ... the one at 1h10 expires it
		if h.g.State() != Dead {
			t.Fatalf("state %v", h.g.State())
		}
	})
	t.Run("explicit expiry (OffsetCommit v2-v4 retention)", func(t *testing.T) {
		h := newHarness(t, retention)
		h.commit(commitReq(-1, "", "short", 15*60_000))
		h.commit(commitReq(-1, "", "long", -1))
		h.advance(20 * time.Minute)
		if o := h.fetchOne("short", 0, false); o.Offset != -1 {
			t.Fatalf("explicit expiry ignored: %v", o)
		}
		if o := h.fetchOne("long", 0, false); o.Offset != 7 {
			t.Fatalf("%v", o)
		}
	})
	t.Run("an offset with a pending commit never expires", func(t *testing.T) {
		h := newHarness(t, retention)
		h.commit(commitReq(-1, "", "t", -1))
		h.hold = true
		c := h.commit(commitReq(-1, "", "t", -1))
		h.advance(3 * time.Hour)
		if o := h.fetchOne("t", 0, false); o.Offset != 7 || h.g.State() != Empty {
			t.Fatalf("expired while a commit is pending: %v %v", o, h.g.State())
		}
		h.release(nil)
		if h.commitCode(c, "t", 0) != ErrNone {
			t.Fatal("commit failed")
		}
	})
	t.Run("PreparingRebalance keeps everything", func(t *testing.T) {
		h := newHarness(t, retention)
		a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3, SessionTimeoutMs: 1_800_000, RebalanceTimeoutMs: 7_200_000})
		b := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 3, SessionTimeoutMs: 1_800_000, RebalanceTimeoutMs: 7_200_000})
		h.advance(6 * time.Second)
		ia, ib := h.joinOK(a).MemberId, h.joinOK(b).MemberId
		h.syncGroup(1, ia, ia, ib)
		h.commit(commitReq(1, ia, "unsub", -1))
		h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3, MemberId: ia, SessionTimeoutMs: 1_800_000, RebalanceTimeoutMs: 7_200_000})
		for range 5 {
			h.advance(20 * time.Minute)
			h.heartbeat(ib, 1)
		}
		h.wantState(PreparingRebalance, 1, ia, ib)
		if o := h.fetchOne("unsub", 0, false); o.Offset != 7 {
			t.Fatalf("expired: %v", o)
		}
	})
	t.Run("non-consumer Stable group keeps everything", func(t *testing.T) {
		h := newHarness(t, retention)
		a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3, ProtocolType: "connect", SessionTimeoutMs: 1_800_000})
		h.advance(3 * time.Second)
		id := h.joinOK(a).MemberId
		h.syncGroup(1, id, id)
		h.commit(commitReq(1, id, "t", -1))
		for range 20 {
			h.advance(10 * time.Minute)
			h.heartbeat(id, 1)
		}
		if o := h.fetchOne("t", 0, false); o.Offset != 7 {
			t.Fatalf("expired: %v", o)
		}
	})
}
