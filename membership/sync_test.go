package membership

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func TestLeaderAsksMetadataForUnsizedTopics(t *testing.T) {
	cfg := testConfig(rangeOne...)
	cfg.Partitions = nil
	d := newDrv(t, cfg)
	d.found(false)
	id, req := take[*pb.JoinGroupRequest](d)
	self := &pb.JoinGroupMember{MemberId: "m1", Metadata: req.GetProtocols()[0].GetMetadata()}
	d.respond(id, joinOK("m1", 1, "range", "m1", self), nil)
	id, meta := take[*MetadataRequest](d)
	if len(meta.Topics) != 1 || meta.Topics[0] != "t" {
		t.Fatalf("metadata %v", meta)
	}
	none[*pb.SyncGroupRequest](d)
	d.respond(id, nil, errors.New("connection refused"))
	d.fire(TimerRetry)
	id, _ = take[*MetadataRequest](d)
	d.respond(id, &MetadataResponse{Partitions: map[string]int32{"t": 3}}, nil)
	_, sync := take[*pb.SyncGroupRequest](d)
	as, _ := assignor.DecodeAssignment(sync.GetAssignments()[0].GetAssignment())
	if tpString(as.Topics) != "t[0 1 2]" {
		t.Fatalf("assignment %v", tpString(as.Topics))
	}
}

func TestSyncErrors(t *testing.T) {
	cases := []struct {
		code        int16
		rejoinNow   bool
		backoff     bool
		rediscover  bool
		fatal       error
		memberAfter string
		lost        bool
	}{
		{code: kerr.RebalanceInProgress.Code, rejoinNow: true, memberAfter: "m1"},
		{code: kerr.UnknownMemberID.Code, rejoinNow: true, memberAfter: "", lost: true},
		{code: kerr.IllegalGeneration.Code, rejoinNow: true, memberAfter: "m1", lost: true},
		{code: kerr.CoordinatorNotAvailable.Code, rediscover: true, memberAfter: "m1"},
		{code: kerr.NotCoordinator.Code, rediscover: true, memberAfter: "m1"},
		{code: kerr.CoordinatorLoadInProgress.Code, backoff: true, memberAfter: "m1"},
		{code: kerr.FencedInstanceID.Code, fatal: ErrFenced, lost: true},
	}
	for _, c := range cases {
		t.Run(kerr.ErrorForCode(c.code).Error(), func(t *testing.T) {
			d := newDrv(t, testConfig(coopOnly...))
			d.stable(true, 1, "cooperative-sticky", tp("t", 0, 1))
			wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
			d.collect()
			d.joinAs("m1", 2, "cooperative-sticky")
			id, _ := take[*pb.SyncGroupRequest](d)
			d.respond(id, &pb.SyncGroupResponse{ErrorCode: int32(c.code)}, nil)
			if c.lost {
				d.done(d.callback(Lost, "t[0 1]"))
			}
			d.noCallbacks()
			if c.fatal != nil {
				if !d.stopped || !errors.Is(d.err, c.fatal) {
					t.Fatalf("stopped %v err %v", d.stopped, d.err)
				}
				return
			}
			switch {
			case c.backoff:
				none[*pb.JoinGroupRequest](d)
				d.fire(TimerRetry)
			case c.rediscover:
				none[*pb.JoinGroupRequest](d)
				d.found(true)
			}
			_, req := take[*pb.JoinGroupRequest](d)
			if req.GetMemberId() != c.memberAfter {
				t.Fatalf("member id %q, want %q", req.GetMemberId(), c.memberAfter)
			}
			want := "t[0 1]"
			if c.lost {
				want = ""
			}
			if got := ownedOf(t, req, "cooperative-sticky"); got != want {
				t.Fatalf("owned %q, want %q", got, want)
			}
		})
	}
}

func TestAssignmentOfUnsubscribedTopicIgnored(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.found(true)
	d.joinAs("m1", 1, "cooperative-sticky")
	d.syncWith(tp("other", 0), tp("t", 1))
	d.callback(Assigned, "t[1]")
}

// The leader looks at the partition counts it assigned from Metadata every
// MetadataMaxAge and rejoins when one changed.
func TestLeaderRejoinsWhenPartitionsChange(t *testing.T) {
	cfg := testConfig(coopOnly...)
	cfg.Partitions = nil
	cfg.MetadataMaxAge = time.Minute
	d := newDrv(t, cfg)
	d.found(true)
	id, req := take[*pb.JoinGroupRequest](d)
	self := &pb.JoinGroupMember{MemberId: "m1", Metadata: req.GetProtocols()[0].GetMetadata()}
	d.respond(id, joinOK("m1", 1, "cooperative-sticky", "m1", self), nil)
	id, _ = take[*MetadataRequest](d)
	d.respond(id, &MetadataResponse{Partitions: map[string]int32{"t": 2}}, nil)
	d.syncWith(tp("t", 0, 1))
	d.callback(Assigned, "t[0 1]")
	// Unchanged: nothing happens, the check comes again.
	d.idle(time.Minute)
	id, meta := take[*MetadataRequest](d)
	if len(meta.Topics) != 1 || meta.Topics[0] != "t" {
		t.Fatalf("metadata check %v", meta)
	}
	d.respond(id, &MetadataResponse{Partitions: map[string]int32{"t": 2}}, nil)
	none[*pb.JoinGroupRequest](d)
	d.idle(time.Minute)
	id, _ = take[*MetadataRequest](d)
	d.respond(id, &MetadataResponse{Partitions: map[string]int32{"t": 3}}, nil)
	_, join := take[*pb.JoinGroupRequest](d)
	if join.GetReason() == "" || ownedOf(t, join, "cooperative-sticky") != "t[0 1]" {
		t.Fatalf("rejoin %v", join)
	}
	d.noCallbacks()
}

// A follower never checks metadata.
func TestFollowerDoesNotCheckMetadata(t *testing.T) {
	cfg := testConfig(coopOnly...)
	cfg.Partitions = nil
	cfg.MetadataMaxAge = time.Second
	d := newDrv(t, cfg)
	d.stable(true, 1, "cooperative-sticky", tp("t", 0))
	d.idle(10 * time.Second)
	none[*MetadataRequest](d)
}
