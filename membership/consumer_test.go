package membership

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Join: the first heartbeat is a full request at epoch 0 with the member's
// own id and nothing owned; the assignment in its answer is given at once
// and acknowledged at once; then keepalives follow at the interval the
// coordinator gave.
func TestConsumerJoin(t *testing.T) {
	cfg := consumerTestConfig()
	cfg.Rack, cfg.ClientID = "rack-a", "client-a"
	d := newConsumerDrv(t, cfg)
	none[*pb.ConsumerGroupHeartbeatRequest](d)
	d.found(true)
	join := d.beat(0, "", cgOK(3, true, tp("t", 0, 1)))
	switch {
	case join.GetMemberId() != "m-1", join.GetGroupId() != "g", join.GetApiVersion() != 1,
		!join.GetSubscribedTopicNamesSet() || !slices.Equal(join.GetSubscribedTopicNames(), []string{"t"}),
		join.GetRebalanceTimeoutMs() != 20_000, join.GetServerAssignor() != "uniform", join.GetRackId() != "rack-a",
		join.InstanceId != nil, join.GetClientId() != "client-a":
		t.Fatalf("join %v", join)
	}
	d.callback(Assigned, "t[0 1]")
	d.beat(3, "t[0 1]", cgOK(3, true, tp("t", 0, 1)))
	d.noCallbacks()
	if d.sm.Generation() != 3 || tpString(d.sm.Owned()) != "t[0 1]" || d.sm.GroupProtocol() != ConsumerProtocol {
		t.Fatalf("epoch %d owned %v protocol %s", d.sm.Generation(), d.sm.Owned(), d.sm.GroupProtocol())
	}
	if at := d.timers[TimerHeartbeat]; !at.Equal(d.now.Add(2 * time.Second)) {
		t.Fatalf("next heartbeat at %v, want the answer's interval", at.Sub(d.now))
	}
	d.nextBeat()
	keep := d.beat(3, "-", cgOK(4, false)) // a keepalive; the epoch moves without an assignment
	if keep.GetSubscribedTopicNamesSet() || keep.GetRebalanceTimeoutMs() != -1 || keep.ServerAssignor != nil || keep.RackId != nil {
		t.Fatalf("keepalive %v", keep)
	}
	if d.sm.Generation() != 4 {
		t.Fatalf("epoch %d, want the answer's 4", d.sm.Generation())
	}
	d.nextBeat()
	d.beat(4, "-", cgOK(4, false))
}

// A member that owns nothing always sends full requests, so that an
// assignment whose answer was lost is sent again.
func TestConsumerOwningNothingSendsFullRequests(t *testing.T) {
	d := newConsumerDrv(t, consumerTestConfig())
	d.joined(1)
	for range 3 {
		d.nextBeat()
		d.beat(1, "", cgOK(1, true))
	}
	d.nextBeat()
	d.beat(1, "", cgOK(2, true, tp("t", 3)))
	d.callback(Assigned, "t[3]")
	d.beat(2, "t[3]", cgOK(2, true, tp("t", 3)))
}

// Scale: partitions no longer assigned are revoked, and the member reports
// them gone only once the Revoked callback returned; heartbeats go on
// meanwhile, still reporting them. New partitions are given once received.
func TestConsumerRevokeBeforeAck(t *testing.T) {
	d := newConsumerDrv(t, consumerTestConfig())
	d.joined(1, tp("t", 0, 1, 2, 3))
	d.nextBeat()
	// Others joined: the coordinator keeps the member at epoch 1 until it
	// has given up t2 and t3.
	d.beat(1, "-", cgOK(1, true, tp("t", 0, 1)))
	cb := d.callback(Revoked, "t[2 3]")
	if !cb.Wait {
		t.Fatal("revoke does not block")
	}
	for range 3 { // the callback takes 3 intervals
		d.nextBeat()
		id, req := take[*pb.ConsumerGroupHeartbeatRequest](d)
		if r := reported(req); r != "-" && r != "t[0 1 2 3]" {
			t.Fatalf("reported %s while the revoke runs", r)
		}
		d.respond(id, cgOK(1, true, tp("t", 0, 1)), nil)
		d.noCallbacks()
	}
	d.done(cb)
	// Acknowledged at once, without waiting for the interval.
	d.beat(1, "t[0 1]", cgOK(2, true, tp("t", 0, 1)))
	if d.sm.Generation() != 2 || tpString(d.sm.Owned()) != "t[0 1]" {
		t.Fatalf("epoch %d owned %v", d.sm.Generation(), d.sm.Owned())
	}
	// Scale down again: t3 comes back to this member.
	d.nextBeat()
	d.beat(2, "-", cgOK(3, true, tp("t", 0, 1, 3)))
	d.callback(Assigned, "t[3]")
	d.beat(3, "t[0 1 3]", cgOK(3, true, tp("t", 0, 1, 3)))
	d.noCallbacks()
}

// An answer that both takes partitions away and gives others: the revoke
// runs first, the new partitions are given after it (callbacks run in
// order), and the acknowledgement waits for the revoke.
func TestConsumerRevokeAndAssignInOneAnswer(t *testing.T) {
	d := newConsumerDrv(t, consumerTestConfig())
	d.joined(1, tp("t", 0, 1))
	d.nextBeat()
	d.beat(1, "-", cgOK(2, true, tp("t", 1, 2)))
	rev := d.callback(Revoked, "t[0]")
	d.callback(Assigned, "t[2]")
	// What it owns changed (t2): reported at once, with t0 still held.
	d.beat(2, "t[0 1 2]", cgOK(2, true, tp("t", 1, 2)))
	d.nextBeat()
	d.beat(2, "-", cgOK(2, false))
	d.done(rev)
	d.beat(2, "t[1 2]", cgOK(2, true, tp("t", 1, 2)))
	d.noCallbacks()
}

// Fenced: everything is lost, and once the Lost callback returned the
// member rejoins at epoch 0 with the same id and nothing owned.
func TestConsumerFencedRejoins(t *testing.T) {
	for _, code := range []int16{kerr.FencedMemberEpoch.Code, kerr.UnknownMemberID.Code, kerr.StaleMemberEpoch.Code, kerr.GroupIDNotFound.Code} {
		t.Run(kerr.ErrorForCode(code).Error(), func(t *testing.T) {
			d := newConsumerDrv(t, consumerTestConfig())
			d.joined(5, tp("t", 0, 1))
			d.nextBeat()
			d.beat(5, "-", cgErr(code))
			lost := d.callback(Lost, "t[0 1]")
			if d.sm.Phase() != Preparing || d.sm.Generation() != -1 {
				t.Fatalf("phase %v epoch %d", d.sm.Phase(), d.sm.Generation())
			}
			none[*pb.ConsumerGroupHeartbeatRequest](d)
			if _, ok := d.timers[TimerHeartbeat]; ok {
				t.Fatal("heartbeat armed while the lost callback runs")
			}
			d.done(lost)
			req := d.beat(0, "", cgOK(7, true, tp("t", 1)))
			if req.GetMemberId() != "m-1" || !req.GetSubscribedTopicNamesSet() {
				t.Fatalf("rejoin %v", req)
			}
			d.callback(Assigned, "t[1]")
		})
	}
}

// A revoke that fencing overtakes: once the callback returns, what the
// member kept is lost and it rejoins.
func TestConsumerFencedWhileRevoking(t *testing.T) {
	d := newConsumerDrv(t, consumerTestConfig())
	d.joined(1, tp("t", 0, 1))
	d.nextBeat()
	d.beat(1, "-", cgOK(1, true, tp("t", 0)))
	rev := d.callback(Revoked, "t[1]")
	d.nextBeat()
	d.beat(1, "-", cgErr(kerr.UnknownMemberID.Code))
	d.noCallbacks()
	none[*pb.ConsumerGroupHeartbeatRequest](d)
	d.done(rev)
	lost := d.callback(Lost, "t[0]")
	none[*pb.ConsumerGroupHeartbeatRequest](d)
	d.done(lost)
	d.beat(0, "", cgOK(3, true))
}

// A revoke callback that outlasts the rebalance timeout: the coordinator
// has fenced the member, so what it kept is lost once the callback returns.
func TestConsumerRevokeOutlastsRebalanceTimeout(t *testing.T) {
	d := newConsumerDrv(t, consumerTestConfig())
	d.joined(1, tp("t", 0, 1))
	d.nextBeat()
	d.beat(1, "-", cgOK(1, true, tp("t", 0)))
	rev := d.callback(Revoked, "t[1]")
	d.idleConsumer(25 * time.Second) // rebalance timeout 20s
	d.done(rev)
	d.callback(Lost, "t[0]")
}

// idleConsumer advances time answering every heartbeat with the member's
// current epoch and no assignment.
func (d *drv) idleConsumer(dt time.Duration) {
	end := d.now.Add(dt)
	for d.now.Before(end) {
		d.advance(min(100*time.Millisecond, end.Sub(d.now)))
		for i := 0; i < len(d.reqs); {
			if req, ok := d.reqs[i].Msg.(*pb.ConsumerGroupHeartbeatRequest); ok {
				id := d.reqs[i].ID
				d.reqs = slices.Delete(d.reqs, i, i+1)
				d.respond(id, cgOK(req.GetMemberEpoch(), false), nil)
				continue
			}
			i++
		}
	}
}

// The coordinator moved or did not answer: the member finds it again and
// goes on at the same epoch with a full request; a loading coordinator is
// asked again after a backoff.
func TestConsumerCoordinatorMoved(t *testing.T) {
	cases := []struct {
		name string
		res  any
		err  error
		find bool
	}{
		{name: "not coordinator", res: cgErr(kerr.NotCoordinator.Code), find: true},
		{name: "not available", res: cgErr(kerr.CoordinatorNotAvailable.Code), find: true},
		{name: "transport", err: errors.New("connection reset"), find: true},
		{name: "loading", res: cgErr(kerr.CoordinatorLoadInProgress.Code)},
		{name: "unexpected", res: cgErr(kerr.UnknownServerError.Code)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := newConsumerDrv(t, consumerTestConfig())
			d.joined(2, tp("t", 0))
			d.nextBeat()
			id, _ := take[*pb.ConsumerGroupHeartbeatRequest](d)
			d.respond(id, c.res, c.err)
			none[*pb.ConsumerGroupHeartbeatRequest](d)
			if c.find {
				d.found(true)
			} else {
				d.fire(TimerRetry)
			}
			d.beat(2, "t[0]", cgOK(2, true, tp("t", 0)))
			d.noCallbacks()
			if d.sm.Generation() != 2 || tpString(d.sm.Owned()) != "t[0]" {
				t.Fatalf("epoch %d owned %v", d.sm.Generation(), d.sm.Owned())
			}
		})
	}
}

// Errors the member cannot recover from stop it: what it owns is lost.
func TestConsumerFatalErrors(t *testing.T) {
	cases := []struct {
		code int16
		want error
	}{
		{kerr.InvalidRequest.Code, kerr.InvalidRequest},
		{kerr.GroupMaxSizeReached.Code, kerr.GroupMaxSizeReached},
		{kerr.UnsupportedAssignor.Code, kerr.UnsupportedAssignor},
		{kerr.InvalidRegularExpression.Code, kerr.InvalidRegularExpression},
		{kerr.UnreleasedInstanceID.Code, kerr.UnreleasedInstanceID},
		{kerr.FencedInstanceID.Code, ErrFenced},
		{kerr.GroupAuthorizationFailed.Code, kerr.GroupAuthorizationFailed},
		{kerr.UnsupportedVersion.Code, kerr.UnsupportedVersion}, // after the protocol was served
	}
	for _, c := range cases {
		t.Run(kerr.ErrorForCode(c.code).Error(), func(t *testing.T) {
			d := newConsumerDrv(t, consumerTestConfig())
			d.joined(2, tp("t", 0))
			d.nextBeat()
			d.beat(2, "-", cgErr(c.code))
			d.callback(Lost, "t[0]")
			if !d.stopped || !errors.Is(d.err, c.want) || d.sm.Phase() != Stopped {
				t.Fatalf("stopped %v err %v", d.stopped, d.err)
			}
			if len(d.timers) != 0 {
				t.Fatalf("timers left armed: %v", d.timers)
			}
		})
	}
	t.Run("join", func(t *testing.T) {
		d := newConsumerDrv(t, consumerTestConfig())
		d.found(true)
		d.beat(0, "", &pb.ConsumerGroupHeartbeatResponse{ErrorCode: int32(kerr.GroupIDNotFound.Code), ErrorMessage: "classic group"})
		var ce *CodeError
		if !errors.As(d.err, &ce) || ce.Message != "classic group" {
			t.Fatalf("err %v", d.err)
		}
	})
}

// UNSUPPORTED_VERSION on the first heartbeat: the coordinator does not
// serve the consumer protocol, and the member speaks the classic one.
func TestConsumerFallsBackToClassic(t *testing.T) {
	d := newConsumerDrv(t, consumerTestConfig())
	d.sm.Mark("t", 0, 9)
	d.found(true)
	d.beat(0, "", cgErr(kerr.UnsupportedVersion.Code))
	if d.sm.GroupProtocol() != ClassicProtocol || d.stopped {
		t.Fatalf("protocol %s stopped %v", d.sm.GroupProtocol(), d.stopped)
	}
	d.found(true)
	id, join := take[*pb.JoinGroupRequest](d)
	if join.GetMemberId() != "" || join.GetProtocolType() != "consumer" {
		t.Fatalf("classic join %v", join)
	}
	d.respond(id, joinOK("c-1", 1, "cooperative-sticky", "leader-x"), nil)
	d.syncWith(tp("t", 0))
	d.callback(Assigned, "t[0]")
	if d.sm.MemberID() != "c-1" || d.sm.Generation() != 1 || d.sm.Phase() != Stable {
		t.Fatalf("member %s gen %d phase %v", d.sm.MemberID(), d.sm.Generation(), d.sm.Phase())
	}
	// The marks came along.
	if err := d.sm.Commit(d.now, 1, nil, &d.fx); err != nil {
		t.Fatal(err)
	}
	d.collect()
	_, c := take[*pb.OffsetCommitRequest](d)
	if c.GetGenerationId() != 1 || c.GetTopics()[0].GetPartitions()[0].GetOffset() != 9 {
		t.Fatalf("commit %v", c)
	}
}

// Leave: epoch -1 for a dynamic member; -2 with the instance id for a
// static one. Both revoke first and commit the marks at the member epoch.
func TestConsumerCloseLeaves(t *testing.T) {
	for _, static := range []bool{false, true} {
		t.Run(map[bool]string{false: "dynamic", true: "static"}[static], func(t *testing.T) {
			cfg := consumerTestConfig()
			if static {
				cfg.InstanceID = "i-1"
			}
			d := newConsumerDrv(t, cfg)
			d.joined(4, tp("t", 0, 1))
			if static {
				d.nextBeat()
				if keep := d.beat(4, "-", cgOK(4, false)); keep.InstanceId != nil {
					t.Fatal("keepalive carries the instance id")
				}
			}
			d.sm.Mark("t", 1, 77)
			d.sm.Close(d.now, &d.fx)
			d.collect()
			rev := d.callback(Revoked, "t[0 1]")
			// Heartbeats go on while the revoke runs, as keepalives.
			d.nextBeat()
			d.beat(4, "-", cgOK(5, false))
			none[*pb.OffsetCommitRequest](d)
			d.done(rev)
			id, c := take[*pb.OffsetCommitRequest](d)
			if c.GetGenerationId() != 5 || c.GetMemberId() != "m-1" || c.GetTopics()[0].GetPartitions()[0].GetOffset() != 77 {
				t.Fatalf("close commit %v", c)
			}
			none[*pb.ConsumerGroupHeartbeatRequest](d)
			d.respond(id, &pb.OffsetCommitResponse{}, nil)
			id, leave := take[*pb.ConsumerGroupHeartbeatRequest](d)
			wantEpoch, wantInstance := EpochLeave, ""
			if static {
				wantEpoch, wantInstance = EpochStaticLeave, "i-1"
			}
			if leave.GetMemberEpoch() != wantEpoch || leave.GetInstanceId() != wantInstance || leave.GetMemberId() != "m-1" {
				t.Fatalf("leave %v", leave)
			}
			if d.stopped {
				t.Fatal("stopped before the leave was answered")
			}
			d.respond(id, &pb.ConsumerGroupHeartbeatResponse{MemberId: "m-1", MemberEpoch: wantEpoch}, nil)
			if !d.stopped || d.err != nil {
				t.Fatalf("stopped %v err %v", d.stopped, d.err)
			}
		})
	}
}

// A leave does not overtake a join in flight: it goes once the join is
// answered, and what the join assigned is not taken.
func TestConsumerCloseWhileJoining(t *testing.T) {
	d := newConsumerDrv(t, consumerTestConfig())
	d.found(true)
	id, _ := take[*pb.ConsumerGroupHeartbeatRequest](d)
	d.sm.Close(d.now, &d.fx)
	d.collect()
	none[*pb.ConsumerGroupHeartbeatRequest](d)
	d.respond(id, cgOK(1, true, tp("t", 0)), nil)
	d.noCallbacks()
	_, leave := take[*pb.ConsumerGroupHeartbeatRequest](d)
	if leave.GetMemberEpoch() != EpochLeave {
		t.Fatalf("leave %v", leave)
	}
}

// Commits carry the member epoch and id. An answer STALE_MEMBER_EPOCH is
// retried after the next heartbeat answer at its epoch, without the
// partitions the member no longer owns.
func TestConsumerCommitStaleEpoch(t *testing.T) {
	commit := func(d *drv, offsets map[string]map[int32]int64) (uint64, *pb.OffsetCommitRequest) {
		d.t.Helper()
		if err := d.sm.Commit(d.now, 7, offsets, &d.fx); err != nil {
			d.t.Fatal(err)
		}
		d.collect()
		return take[*pb.OffsetCommitRequest](d)
	}
	stale := &pb.OffsetCommitResponse{Topics: []*pb.TopicPartitionErrors{{Name: "t", Partitions: []*pb.PartitionError{{Partition: 0, ErrorCode: int32(kerr.StaleMemberEpoch.Code)}}}}}
	t.Run("retried at the next epoch", func(t *testing.T) {
		d := newConsumerDrv(t, consumerTestConfig())
		d.joined(3, tp("t", 0, 1))
		id, c := commit(d, map[string]map[int32]int64{"t": {0: 10, 1: 20}})
		if c.GetGenerationId() != 3 || c.GetMemberId() != "m-1" {
			t.Fatalf("commit %v", c)
		}
		d.respond(id, stale, nil)
		none[*pb.OffsetCommitRequest](d)
		d.beat(3, "-", cgOK(4, false)) // asked at once
		id, c = take[*pb.OffsetCommitRequest](d)
		if c.GetGenerationId() != 4 || len(c.GetTopics()[0].GetPartitions()) != 2 {
			t.Fatalf("retry %v", c)
		}
		d.respond(id, &pb.OffsetCommitResponse{}, nil)
		if len(d.commits) != 1 || d.commits[0].Token != 7 || d.commits[0].Err != nil {
			t.Fatalf("results %v", d.commits)
		}
	})
	t.Run("without partitions revoked since", func(t *testing.T) {
		d := newConsumerDrv(t, consumerTestConfig())
		d.joined(3, tp("t", 0, 1))
		id, _ := commit(d, map[string]map[int32]int64{"t": {0: 10, 1: 20}})
		d.nextBeat()
		d.beat(3, "-", cgOK(3, true, tp("t", 0)))
		d.done(d.callback(Revoked, "t[1]"))
		d.beat(3, "t[0]", cgOK(4, true, tp("t", 0)))
		d.respond(id, stale, nil) // the epoch moved on already: retried at once
		id, c := take[*pb.OffsetCommitRequest](d)
		if c.GetGenerationId() != 4 || len(c.GetTopics()) != 1 || len(c.GetTopics()[0].GetPartitions()) != 1 || c.GetTopics()[0].GetPartitions()[0].GetPartition() != 0 {
			t.Fatalf("retry %v", c)
		}
		d.respond(id, &pb.OffsetCommitResponse{}, nil)
		if len(d.commits) != 1 || !errors.Is(d.commits[0].Err, ErrCommitFailed) || !errors.Is(d.commits[0].Err, kerr.StaleMemberEpoch) {
			t.Fatalf("results %v", d.commits)
		}
	})
	t.Run("gives up", func(t *testing.T) {
		d := newConsumerDrv(t, consumerTestConfig())
		d.joined(3, tp("t", 0))
		id, _ := commit(d, map[string]map[int32]int64{"t": {0: 10}})
		for i := range maxStaleRetries {
			d.respond(id, stale, nil)
			d.beat(3, "-", cgOK(3, false))
			var c *pb.OffsetCommitRequest
			id, c = take[*pb.OffsetCommitRequest](d)
			if c.GetGenerationId() != 3 {
				t.Fatalf("retry %d: %v", i, c)
			}
		}
		d.respond(id, stale, nil)
		none[*pb.OffsetCommitRequest](d)
		if len(d.commits) != 1 || !errors.Is(d.commits[0].Err, ErrCommitFailed) {
			t.Fatalf("results %v", d.commits)
		}
	})
	t.Run("refused while joining", func(t *testing.T) {
		d := newConsumerDrv(t, consumerTestConfig())
		wantErr(t, d.sm.Commit(d.now, 1, map[string]map[int32]int64{"t": {0: 1}}, &d.fx), ErrCoordinatorNotAvailable)
		d.found(true)
		wantErr(t, d.sm.Commit(d.now, 1, map[string]map[int32]int64{"t": {0: 1}}, &d.fx), ErrRebalanceInProgress)
	})
}

// Session safety: when the coordinator stays silent for the session
// timeout, counted from the send of the last answered heartbeat, what the
// member owns is lost and it rejoins once it finds the coordinator.
func TestConsumerSessionExpires(t *testing.T) {
	d := newConsumerDrv(t, consumerTestConfig())
	d.joined(2, tp("t", 0, 1))
	sent := d.now // the acknowledgement, answered
	d.nextBeat()
	id, _ := take[*pb.ConsumerGroupHeartbeatRequest](d)
	d.respond(id, nil, errors.New("connection refused"))
	for d.now.Before(sent.Add(10*time.Second - 200*time.Millisecond)) {
		id, _ := take[*FindCoordinator](d)
		d.respond(id, nil, errors.New("connection refused"))
		d.noCallbacks()
		d.fire(TimerRetry)
	}
	d.advance(sent.Add(10 * time.Second).Sub(d.now))
	lost := d.callback(Lost, "t[0 1]")
	if d.sm.Generation() != -1 {
		t.Fatalf("epoch %d", d.sm.Generation())
	}
	d.done(lost)
	d.found(true) // the search under way when the session expired
	d.beat(0, "", cgOK(3, true, tp("t", 1)))
	d.callback(Assigned, "t[1]")
}

// EnforceRebalance has no counterpart in the consumer protocol.
func TestConsumerEnforceRebalanceUnsupported(t *testing.T) {
	d := newConsumerDrv(t, consumerTestConfig())
	d.joined(1, tp("t", 0))
	wantErr(t, d.sm.EnforceRebalance(d.now, "why", &d.fx), ErrUnsupported)
	d.collect()
	if len(d.reqs) != 0 {
		t.Fatalf("sent %s", d.describeReqs())
	}
	d.sm.Close(d.now, &d.fx)
	wantErr(t, d.sm.EnforceRebalance(d.now, "why", &d.fx), ErrIllegalState)
}
