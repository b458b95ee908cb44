package membership

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

var (
	coopOnly = []assignor.Balancer{assignor.CooperativeSticky()}
	rangeOne = []assignor.Balancer{assignor.Range()}
)

func TestLeaderEagerRound(t *testing.T) {
	d := newDrv(t, testConfig(rangeOne...))
	if d.m.Phase() != Discovering {
		t.Fatalf("phase %v", d.m.Phase())
	}
	d.found(false)
	id, req := take[*pb.JoinGroupRequest](d)
	if req.GetMemberId() != "" || req.GetProtocolType() != "consumer" || len(req.GetProtocols()) != 1 || req.GetProtocols()[0].GetName() != "range" {
		t.Fatalf("first join %v", req)
	}
	d.respond(id, &pb.JoinGroupResponse{ErrorCode: int32(kerr.MemberIDRequired.Code), MemberId: "m1"}, nil)
	id, req = take[*pb.JoinGroupRequest](d)
	if req.GetMemberId() != "m1" {
		t.Fatalf("second join member id %q", req.GetMemberId())
	}
	other := &pb.JoinGroupMember{MemberId: "m2", Metadata: req.GetProtocols()[0].GetMetadata()}
	self := &pb.JoinGroupMember{MemberId: "m1", Metadata: req.GetProtocols()[0].GetMetadata()}
	d.respond(id, joinOK("m1", 1, "range", "m1", self, other), nil)
	if !d.m.Leader() {
		t.Fatal("not leader")
	}
	id, sync := take[*pb.SyncGroupRequest](d)
	if sync.GetGenerationId() != 1 || len(sync.GetAssignments()) != 2 {
		t.Fatalf("sync %v", sync)
	}
	got := map[string]string{}
	for _, a := range sync.GetAssignments() {
		as, err := assignor.DecodeAssignment(a.GetAssignment())
		if err != nil {
			t.Fatal(err)
		}
		got[a.GetMemberId()] = tpString(as.Topics)
	}
	if got["m1"] != "t[0 1]" || got["m2"] != "t[2 3]" {
		t.Fatalf("range plan %v", got)
	}
	d.respond(id, &pb.SyncGroupResponse{Assignment: assignmentOf(tp("t", 0, 1))}, nil)
	d.callback(Assigned, "t[0 1]")
	if d.m.Phase() != Stable || d.m.Generation() != 1 {
		t.Fatalf("phase %v gen %d", d.m.Phase(), d.m.Generation())
	}

	// Heartbeats on the interval.
	d.advance(time.Second)
	hb, h := take[*pb.HeartbeatRequest](d)
	if h.GetGenerationId() != 1 || h.GetMemberId() != "m1" {
		t.Fatalf("heartbeat %v", h)
	}
	// A rebalance: eager revokes everything and does not join before the
	// callback returned.
	d.respond(hb, &pb.HeartbeatResponse{ErrorCode: int32(kerr.RebalanceInProgress.Code)}, nil)
	cb := d.callback(Revoked, "t[0 1]")
	if !cb.Wait {
		t.Fatal("eager revoke does not block")
	}
	none[*pb.JoinGroupRequest](d)
	d.advance(5 * time.Second)
	none[*pb.JoinGroupRequest](d)
	d.done(cb)
	_, req = take[*pb.JoinGroupRequest](d)
	if req.GetMemberId() != "m1" {
		t.Fatalf("rejoin %v", req)
	}
	sub, _ := assignor.DecodeSubscription(req.GetProtocols()[0].GetMetadata())
	if sub.Generation != 1 || len(sub.OwnedPartitions) != 0 {
		t.Fatalf("rejoin subscription %+v", sub)
	}
}

func TestCooperativeRound(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.stable(true, 1, "cooperative-sticky", tp("t", 0, 1, 2, 3))
	d.advance(time.Second)
	hb, _ := take[*pb.HeartbeatRequest](d)
	d.respond(hb, &pb.HeartbeatResponse{ErrorCode: int32(kerr.RebalanceInProgress.Code)}, nil)
	d.noCallbacks() // cooperative: nothing revoked before the join
	req := d.joinAs("m1", 2, "cooperative-sticky")
	if got := ownedOf(t, req, "cooperative-sticky"); got != "t[0 1 2 3]" {
		t.Fatalf("owned in join %q", got)
	}
	// Commits are refused while the sync is in flight.
	wantErr(t, d.m.Commit(d.now, 7, map[string]map[int32]int64{"t": {0: 5}}, &d.fx), ErrRebalanceInProgress)
	d.syncWith(tp("t", 0, 1))
	cb := d.callback(Revoked, "t[2 3]")
	if !cb.Wait {
		t.Fatal("cooperative revoke does not block the follow-up")
	}
	d.callback(Assigned, "")
	none[*pb.JoinGroupRequest](d)
	wantErr(t, d.m.EnforceRebalance(d.now, "x", &d.fx), ErrRebalanceInProgress)
	d.done(cb)
	req = d.joinAs("m1", 3, "cooperative-sticky")
	if got := ownedOf(t, req, "cooperative-sticky"); got != "t[0 1]" {
		t.Fatalf("owned in follow-up join %q", got)
	}
	d.syncWith(tp("t", 0, 1))
	d.callback(Assigned, "")
	d.noCallbacks()
	none[*pb.JoinGroupRequest](d)
	if d.m.Phase() != Stable || tpString(d.m.Owned()) != "t[0 1]" {
		t.Fatalf("phase %v owned %v", d.m.Phase(), d.m.Owned())
	}
	// After the follow-up round the member may ask for a rebalance again.
	wantErr(t, d.m.EnforceRebalance(d.now, "again", &d.fx), nil)
}

func TestCooperativeGainsWithoutRevoking(t *testing.T) {
	d := newDrv(t, testConfig(coopOnly...))
	d.stable(true, 1, "cooperative-sticky", tp("t", 0))
	wantErr(t, d.m.EnforceRebalance(d.now, "grow", &d.fx), nil)
	d.collect()
	d.noCallbacks()
	req := d.joinAs("m1", 2, "cooperative-sticky")
	if req.GetReason() != "grow" {
		t.Fatalf("reason %q", req.GetReason())
	}
	d.syncWith(tp("t", 0, 1))
	d.callback(Assigned, "t[1]")
	d.noCallbacks()
	none[*pb.JoinGroupRequest](d)
}

// Java's rule without an exclusive-ownership coordinator: [cooperative-sticky,
// range] runs eager even when the group selected cooperative-sticky.
func TestProtocolRuleWithoutExclusiveOwnership(t *testing.T) {
	d := newDrv(t, testConfig())
	d.stable(false, 1, "cooperative-sticky", tp("t", 0, 1))
	if d.m.Cooperative("cooperative-sticky") {
		t.Fatal("cooperative against a coordinator without exclusive ownership")
	}
	wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
	d.collect()
	cb := d.callback(Revoked, "t[0 1]")
	none[*pb.JoinGroupRequest](d)
	d.done(cb)
	req, _ := take[*pb.JoinGroupRequest](d)
	_ = req
}

// Against cohort the member follows the selected assignor.
func TestProtocolRuleWithExclusiveOwnership(t *testing.T) {
	d := newDrv(t, testConfig())
	d.stable(true, 1, "cooperative-sticky", tp("t", 0, 1))
	if !d.m.Cooperative("cooperative-sticky") || d.m.Cooperative("range") {
		t.Fatal("protocol does not follow the selected assignor")
	}
	wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
	d.collect()
	d.noCallbacks()
	req := d.joinAs("m1", 2, "cooperative-sticky")
	if got := ownedOf(t, req, "cooperative-sticky"); got != "t[0 1]" {
		t.Fatalf("owned %q", got)
	}
}

// Downgrade: the member kept its partitions through JoinGroup, the group
// selected an eager assignor: everything is revoked before SyncGroup.
func TestDowngradeRevokesBeforeSync(t *testing.T) {
	d := newDrv(t, testConfig())
	d.stable(true, 1, "cooperative-sticky", tp("t", 0, 1))
	wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
	d.collect()
	d.joinAs("m1", 2, "range")
	cb := d.callback(Revoked, "t[0 1]")
	if !cb.Wait || d.m.Phase() != Downgrading {
		t.Fatalf("wait %v phase %v", cb.Wait, d.m.Phase())
	}
	none[*pb.SyncGroupRequest](d)
	wantErr(t, d.m.Commit(d.now, 1, nil, &d.fx), ErrRebalanceInProgress)
	d.done(cb)
	d.syncWith(tp("t", 0))
	d.callback(Assigned, "t[0]")
	// The next rebalance in this eager generation revokes first.
	wantErr(t, d.m.EnforceRebalance(d.now, "", &d.fx), nil)
	d.collect()
	cb = d.callback(Revoked, "t[0]")
	none[*pb.JoinGroupRequest](d)
	d.done(cb)
	_, req := take[*pb.JoinGroupRequest](d)
	if got := ownedOf(t, req, "cooperative-sticky"); got != "" {
		t.Fatalf("eager join sends owned %q", got)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{Topics: []string{"t"}},
		{Group: "g"},
		{Group: "g", Topics: []string{""}},
		{Group: "g", Topics: []string{"t"}, Balancers: []assignor.Balancer{assignor.Range(), assignor.Range()}},
		{Group: "g", Topics: []string{"t"}, SessionTimeout: time.Second, HeartbeatInterval: 2 * time.Second},
		{Group: "g", Topics: []string{"t"}, SessionTimeout: -1},
		{Group: "g", Topics: []string{"t"}, Partitions: map[string]int32{"t": 0}},
	}
	for i, c := range bad {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%d: %v", i, err)
		}
	}
	var c = Config{Group: "g", Topics: []string{"t"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.SessionTimeout != DefaultSessionTimeout || len(c.Balancers) != 2 || c.Balancers[0].ProtocolName() != "cooperative-sticky" {
		t.Fatalf("defaults %+v", c)
	}
}
