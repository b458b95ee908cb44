package actors

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

func startWith(t *testing.T, cfg coordinator.Config) *Service {
	t.Helper()
	system := actor.NewActorSystem(quietLogs())
	svc, err := Start(system, Options{Config: cfg, Store: raftfsm.NewMemoryStore(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop(); system.Shutdown() })
	return svc
}

// The initial rebalance delay runs on the actor's timer: a lone member of an
// empty group gets its JoinGroup answer exactly one delay after joining.
func TestInitialDelayThroughActor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		cfg.InitialRebalanceDelay = 3 * time.Second
		svc := startWith(t, cfg)
		start := time.Now()
		req := joinReq("g", "c", "")
		req.ApiVersion = 3
		r := ask[*pb.JoinGroupResponse](t, svc, req)
		if r.ErrorCode != coordinator.ErrNone || r.GenerationId != 1 {
			t.Fatalf("join: %v", r)
		}
		if el := time.Since(start); el != 3*time.Second {
			t.Fatalf("answered after %v, want the 3s initial delay", el)
		}
	})
}

// A MEMBER_ID_REQUIRED id that never re-joins expires after its session
// timeout; until then it holds the join phase open.
func TestPendingMemberExpiresThroughActor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := startWith(t, testConfig())
		ids, gen := formGroup(t, svc, "g", 1)
		// A second client gets an id but never joins with it.
		first := ask[*pb.JoinGroupResponse](t, svc, joinReq("g", "late", ""))
		if first.ErrorCode != coordinator.ErrMemberIDRequired {
			t.Fatalf("first join: %v", first)
		}
		start := time.Now()
		// The leader re-joins: the phase waits for the pending id.
		r := ask[*pb.JoinGroupResponse](t, svc, joinReq("g", "c0", ids[0]))
		if r.ErrorCode != coordinator.ErrNone || r.GenerationId != gen+1 || len(r.Members) != 1 {
			t.Fatalf("re-join: %v", r)
		}
		if el := time.Since(start); el != 10*time.Second {
			t.Fatalf("join phase completed after %v, want the pending id's 10s session timeout", el)
		}
	})
}

// The pending-sync timer fires through the actor: a follower that never
// sends SyncGroup is removed one rebalance timeout after the join phase.
func TestPendingSyncTimerThroughActor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := startWith(t, testConfig())
		joins := joinAll(t, svc, "g", 2)
		start := time.Now()
		var leader, follower string
		for _, j := range joins {
			if j.MemberId == j.Leader {
				leader = j.MemberId
			} else {
				follower = j.MemberId
			}
		}
		gen := joins[0].GenerationId
		s := ask[*pb.SyncGroupResponse](t, svc, &pb.SyncGroupRequest{GroupId: "g", GenerationId: gen, MemberId: leader,
			Assignments: []*pb.SyncGroupAssignment{{MemberId: leader, Assignment: []byte{1}}, {MemberId: follower, Assignment: []byte{2}}}})
		if s.ErrorCode != coordinator.ErrNone {
			t.Fatalf("leader sync: %v", s)
		}
		// The leader heartbeats; the follower stays silent (its session is
		// 10s, so keep it under the 30s rebalance timeout by heartbeating
		// without syncing).
		for time.Since(start) < 30*time.Second {
			time.Sleep(5 * time.Second)
			ask[*pb.HeartbeatResponse](t, svc, &pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: leader})
			ask[*pb.HeartbeatResponse](t, svc, &pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: follower})
		}
		time.Sleep(time.Millisecond)
		d := ask[*pb.DescribeGroupResponse](t, svc, &pb.DescribeGroupRequest{GroupId: "g"})
		for _, m := range d.Members {
			if m.MemberId == follower {
				t.Fatalf("follower that never synced is still a member after the rebalance timeout: %v", d)
			}
		}
		if d.State != "PreparingRebalance" && d.State != "CompletingRebalance" {
			t.Fatalf("state %s after the pending-sync expiry, want a new rebalance", d.State)
		}
	})
}

// Offset retention runs on the periodic timer: an Empty group's offsets
// expire, the group dies, its actor goes away and its id is free again.
func TestOffsetRetentionThroughActor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		cfg.OffsetsRetention = time.Hour
		cfg.OffsetsRetentionCheckInterval = 10 * time.Minute
		svc := startWith(t, cfg)
		c := ask[*pb.OffsetCommitResponse](t, svc, &pb.OffsetCommitRequest{GroupId: "old", GenerationId: -1,
			Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 5}}}}})
		if c.Topics[0].Partitions[0].ErrorCode != coordinator.ErrNone {
			t.Fatalf("commit: %v", c)
		}
		fetch := &pb.OffsetFetchRequest{GroupId: "old", Topics: []*pb.TopicPartitions{{Name: "t", Partitions: []int32{0}}}}
		time.Sleep(50 * time.Minute)
		if f := ask[*pb.OffsetFetchResponse](t, svc, fetch); f.Topics[0].Partitions[0].Offset != 5 {
			t.Fatalf("offset expired early: %v", f)
		}
		time.Sleep(20 * time.Minute) // the check at 70 minutes sees it older than an hour
		if f := ask[*pb.OffsetFetchResponse](t, svc, fetch); f.Topics[0].Partitions[0].Offset != -1 {
			t.Fatalf("offset not expired: %v", f)
		}
		l := ask[*pb.ListGroupsResponse](t, svc, &pb.ListGroupsRequest{})
		if len(l.Groups) != 0 {
			t.Fatalf("expired group still listed: %v", l)
		}
		time.Sleep(goneGrace + time.Second) // let the dead actor be stopped
	})
}

// Without an initial delay a join phase is due at once, also in a group
// whose clock timer is still set for later (here the session of a member
// that left): the new member's JoinGroup is answered without waiting for
// that timer, and the session still expires on time afterwards.
func TestNoInitialDelayWithTimerSetThroughActor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		cfg.InitialRebalanceDelay = 0
		svc := startWith(t, cfg)
		ids, gen := formGroup(t, svc, "g", 1)
		// The group's timer is set for the member's session; it leaves
		// (a generation of its own: the group is Empty).
		lv := ask[*pb.LeaveGroupResponse](t, svc, &pb.LeaveGroupRequest{GroupId: "g", Members: []*pb.MemberIdentity{{MemberId: ids[0]}}})
		if lv.ErrorCode != coordinator.ErrNone {
			t.Fatalf("leave: %v", lv)
		}
		start := time.Now()
		req := joinReq("g", "c1", "")
		req.ApiVersion = 3
		r := ask[*pb.JoinGroupResponse](t, svc, req)
		if r.ErrorCode != coordinator.ErrNone || r.GenerationId != gen+2 || r.Leader != r.MemberId {
			t.Fatalf("join: %v", r)
		}
		if el := time.Since(start); el != 0 {
			t.Fatalf("answered after %v, want at once", el)
		}
		s := ask[*pb.SyncGroupResponse](t, svc, &pb.SyncGroupRequest{GroupId: "g", GenerationId: r.GenerationId, MemberId: r.MemberId,
			Assignments: []*pb.SyncGroupAssignment{{MemberId: r.MemberId, Assignment: []byte("a")}}})
		if s.ErrorCode != coordinator.ErrNone {
			t.Fatalf("sync: %v", s)
		}
		// No heartbeat: the member's session ends on time.
		time.Sleep(time.Duration(req.SessionTimeoutMs)*time.Millisecond + time.Millisecond)
		synctest.Wait()
		d := ask[*pb.DescribeGroupResponse](t, svc, &pb.DescribeGroupRequest{GroupId: "g"})
		if len(d.Members) != 0 {
			t.Fatalf("members after the session: %v", d.Members)
		}
	})
}
