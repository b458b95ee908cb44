package coordinator

import (
	"testing"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func versionedCommit(id string, gen int32, version *int32) *pb.OffsetCommitRequest {
	return &pb.OffsetCommitRequest{GroupId: "g", MemberId: id, GenerationId: gen, ApiVersion: version,
		Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 7}}}}}
}

func ver(n int32) *int32 { return &n }

func commitCodeOf(t *testing.T, r any) int32 {
	t.Helper()
	resp, ok := r.(*pb.OffsetCommitResponse)
	if !ok || len(resp.GetTopics()) != 1 || len(resp.GetTopics()[0].GetPartitions()) != 1 {
		t.Fatalf("commit answer %v", r)
	}
	return resp.GetTopics()[0].GetPartitions()[0].GetErrorCode()
}

// Kafka's OffsetMetadataManager.validateOffsetCommit, for a group that does
// not exist: a commit with a generation (member epoch) is answered
// GROUP_ID_NOT_FOUND from OffsetCommit v9 on and ILLEGAL_GENERATION before
// it (kept for older clients); a commit without one creates a simple group
// whatever the version.
func TestCommitToAbsentGroupByVersion(t *testing.T) {
	cfg := DefaultConfig()
	for _, tc := range []struct {
		version *int32
		gen     int32
		want    int32
		create  bool
	}{
		{ver(8), 3, ErrIllegalGeneration, false},
		{ver(2), 0, ErrIllegalGeneration, false},
		{ver(9), 3, ErrGroupIDNotFound, false},
		{ver(10), 0, ErrGroupIDNotFound, false},
		{nil, 3, ErrIllegalGeneration, false}, // the member library's native commit
		{ver(8), -1, 0, true},
		{ver(9), -1, 0, true},
	} {
		resp, create := Absent(&cfg, versionedCommit("m", tc.gen, tc.version))
		if create != tc.create {
			t.Fatalf("version %v generation %d: create %v", tc.version, tc.gen, create)
		}
		if !create {
			if code := commitCodeOf(t, resp); code != tc.want {
				t.Fatalf("version %v generation %d: code %d, want %d", tc.version, tc.gen, code, tc.want)
			}
		}
	}
}

// Kafka's ConsumerGroup.validateOffsetCommit: a member of the consumer
// protocol must commit with OffsetCommit v9 or later (UNSUPPORTED_VERSION
// below it), checked after the member is found (UNKNOWN_MEMBER_ID first)
// and before its epoch; a classic member of the same group commits with
// any version at its generation.
func TestConsumerMemberCommitNeedsV9(t *testing.T) {
	h := newMigHarness(t, map[string]int32{"t": 4})
	k := h.addConsumer("t")
	c := h.addClassic(assignor.Range(), "t")
	h.settle()
	if h.g.Consumer() == nil || h.g.Consumer().NumMembers() != 2 {
		t.Fatal("not a consumer group of two members")
	}
	for _, tc := range []struct {
		name    string
		id      string
		gen     int32
		version *int32
		want    int32
	}{
		{"consumer member, v8", k.memberID, k.gen, ver(8), ErrUnsupportedVersion},
		{"consumer member, v8, stale epoch", k.memberID, k.gen - 1, ver(8), ErrUnsupportedVersion},
		{"unknown member, v8", "nobody", 1, ver(8), ErrUnknownMemberID},
		{"consumer member, v9", k.memberID, k.gen, ver(9), ErrNone},
		{"consumer member, native", k.memberID, k.gen, nil, ErrNone},
		{"consumer member, v9, stale epoch", k.memberID, k.gen - 1, ver(9), ErrStaleMemberEpoch},
		{"classic member, v8", c.memberID, c.gen, ver(8), ErrNone},
		{"classic member, v2", c.memberID, c.gen, ver(2), ErrNone},
		{"classic member, v8, other generation", c.memberID, c.gen + 1, ver(8), ErrIllegalGeneration},
	} {
		_, r := h.classic(versionedCommit(tc.id, tc.gen, tc.version))
		if code := commitCodeOf(t, r); code != tc.want {
			t.Fatalf("%s: code %d, want %d", tc.name, code, tc.want)
		}
	}
}

// Kafka's GroupMetadataManager.describeGroups (KIP-1043): DescribeGroups
// naming a group id that holds a consumer group, or none, answers state
// Dead with no error below v6 and GROUP_ID_NOT_FOUND with a message from
// v6 on.
func TestDescribeGroupsOfNoClassicGroupByVersion(t *testing.T) {
	h := newMigHarness(t, map[string]int32{"t": 4})
	h.addConsumer("t")
	h.settle()
	cfg := DefaultConfig()
	for _, tc := range []struct {
		version  *int32
		code     int32
		consumer string // the message for the consumer group
		absent   string // and for a group id without a group
	}{
		{ver(0), ErrNone, "", ""},
		{ver(5), ErrNone, "", ""},
		{ver(6), ErrGroupIDNotFound, "Group g is not a classic group.", "Group nobody not found."},
	} {
		_, r := h.classic(&pb.DescribeGroupRequest{GroupId: "g", ApiVersion: tc.version})
		got := r.(*pb.DescribeGroupResponse)
		if got.GetErrorCode() != tc.code || got.GetState() != "Dead" || got.GetErrorMessage() != tc.consumer || got.GetGroupId() != "g" || len(got.GetMembers()) != 0 {
			t.Fatalf("v%d, consumer group: %v", *tc.version, got)
		}
		resp, create := Absent(&cfg, &pb.DescribeGroupRequest{GroupId: "nobody", ApiVersion: tc.version})
		got = resp.(*pb.DescribeGroupResponse)
		if create || got.GetErrorCode() != tc.code || got.GetState() != "Dead" || got.GetErrorMessage() != tc.absent || got.GetGroupId() != "nobody" {
			t.Fatalf("v%d, no group: %v", *tc.version, got)
		}
	}
	// The node's own callers (no version) are answered as v6 for a
	// consumer group, as before the version was carried.
	_, r := h.classic(&pb.DescribeGroupRequest{GroupId: "g"})
	if got := r.(*pb.DescribeGroupResponse); got.GetErrorCode() != ErrGroupIDNotFound {
		t.Fatalf("no version, consumer group: %v", got)
	}
}

// Kafka's convertToClassicGroup: when the last consumer-protocol members
// leave, the classic group starts a rebalance and its members rejoin on
// REBALANCE_IN_PROGRESS. Here the consumer-protocol members leave one
// right after the other, before the classic members rejoined for the
// first leave (and, in "one behind", after one of them did): every
// classic member's heartbeat, commit and SyncGroup at the generation it
// knows is answered as the current generation's, none loses its
// partitions, and the next generation is above every generation a member
// knew.
func TestMigrationDowngradeAfterQuickLeaves(t *testing.T) {
	for _, tc := range []struct {
		name               string
		bal                assignor.Balancer
		classic, consumers int
		oneBehind          bool
	}{
		{"two range, two consumer", assignor.Range(), 2, 2, false},
		{"one cooperative, six consumer", assignor.CooperativeSticky(), 1, 6, false},
		{"two range, one behind", assignor.Range(), 2, 2, true},
		{"two cooperative, one behind", assignor.CooperativeSticky(), 2, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newMigHarness(t, map[string]int32{"t": 6, "u": 3})
			var classic, consumers []*migClient
			for range tc.classic {
				classic = append(classic, h.addClassic(tc.bal, "t", "u"))
			}
			h.settle()
			for range tc.consumers {
				consumers = append(consumers, h.addConsumer("t", "u"))
			}
			h.settle()
			h.covered()
			for i, k := range consumers {
				h.leaveClient(k)
				if tc.oneBehind && i == 0 {
					// The first classic member rejoins for this leave.
					for range 4 {
						h.step(classic[0])
					}
				}
			}
			if h.g.Consumer() != nil || h.g.State() != PreparingRebalance {
				t.Fatalf("after the leaves: consumer %v, state %v", h.g.Consumer() != nil, h.g.State())
			}
			gens := map[int32]bool{}
			known := int32(0)
			for _, c := range classic {
				gens[c.gen] = true
				known = max(known, c.gen)
				if _, r := h.classic(&pb.HeartbeatRequest{GroupId: "g", MemberId: c.memberID, GenerationId: c.gen}); r.(*pb.HeartbeatResponse).GetErrorCode() != ErrRebalanceInProgress {
					t.Fatalf("%s heartbeat at generation %d (group at %d): %v", c.id, c.gen, h.g.Generation(), r)
				}
				if _, r := h.classic(versionedCommit(c.memberID, c.gen, ver(9))); commitCodeOf(t, r) != ErrNone {
					t.Fatalf("%s commit at generation %d (group at %d): %v", c.id, c.gen, h.g.Generation(), r)
				}
				if _, r := h.classic(&pb.SyncGroupRequest{GroupId: "g", MemberId: c.memberID, GenerationId: c.gen}); r.(*pb.SyncGroupResponse).GetErrorCode() != ErrRebalanceInProgress {
					t.Fatalf("%s sync at generation %d (group at %d): %v", c.id, c.gen, h.g.Generation(), r)
				}
				if _, r := h.classic(&pb.HeartbeatRequest{GroupId: "g", MemberId: c.memberID, GenerationId: c.gen - 1}); r.(*pb.HeartbeatResponse).GetErrorCode() != ErrIllegalGeneration {
					t.Fatalf("%s heartbeat at generation %d: %v", c.id, c.gen-1, r)
				}
			}
			if tc.oneBehind != (len(gens) == 2) {
				t.Fatalf("classic members at generations %v", gens)
			}
			h.settle()
			h.covered()
			for _, c := range classic {
				if c.lost != 0 {
					t.Fatalf("%s lost its partitions %d times", c.id, c.lost)
				}
				if c.gen != known+1 {
					t.Fatalf("%s at generation %d after the rebalance, want %d", c.id, c.gen, known+1)
				}
			}
			if h.g.converted != nil {
				t.Fatalf("converted generations kept after the rebalance: %v", h.g.converted)
			}
		})
	}
}

// Kafka's downgrade by a static member's replacement
// (validateOnlineDowngradeWithReplacedMember, convertToClassicGroup with a
// joining member): a classic static member whose JoinGroup takes the seat
// of the last consumer-protocol member turns the group classic in the same
// write. With the replaced member's subscription, and every member holding
// its target, the classic group is Stable at the group epoch and the new
// member is given the replaced member's partitions without a rebalance;
// with another subscription it rebalances (as Kafka trunk does). Either
// way no partition is held twice and no classic member loses its
// partitions.
func TestMigrationDowngradeByStaticReplacement(t *testing.T) {
	for _, tc := range []struct {
		name      string
		topics    []string
		rebalance bool
	}{
		{"same subscription", []string{"t", "u"}, false},
		{"other subscription", []string{"t"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newMigHarness(t, map[string]int32{"t": 6, "u": 3})
			c := h.addClassic(assignor.Range(), "t", "u")
			h.settle()
			k := h.addConsumer("t", "u")
			k.instance = "i1"
			h.settle()
			h.covered()
			cg := h.g.Consumer()
			if cg == nil || cg.numConsumerProtocol() != 1 {
				t.Fatal("not a consumer group with one consumer-protocol member")
			}
			epoch, kHeld := cg.Epoch(), k.held.list()
			// k's process stops (a static member's temporary leave): it keeps
			// its seat and partitions.
			if resp := h.consumerHB(&ConsumerHeartbeatRequest{Version: 1, GroupID: "g", MemberID: k.memberID, MemberEpoch: EpochStaticLeave, InstanceID: k.instanceID(), RebalanceTimeoutMs: -1}); resp.ErrorCode != ErrNone {
				t.Fatalf("static leave: %d", resp.ErrorCode)
			}
			k.held, k.gone = tpSet{}, true
			s := h.addClassic(assignor.Range(), tc.topics...)
			s.instance = "i1"
			written := len(h.written)
			h.step(s) // JoinGroup
			if h.g.Consumer() != nil {
				t.Fatal("the replacement did not downgrade the group")
			}
			// Another subscription bumps the epoch first: the joining
			// member is answered the new one, the generation.
			wantGen := epoch
			if tc.rebalance {
				wantGen++
			}
			if h.g.Generation() != wantGen || h.g.HasMember(k.memberID) || !h.g.HasMember(s.memberID) || h.g.NumMembers() != 2 {
				t.Fatalf("classic group at generation %d, want %d, members: k %v s %v, %d", h.g.Generation(), wantGen, h.g.HasMember(k.memberID), h.g.HasMember(s.memberID), h.g.NumMembers())
			}
			if rec := h.lastClassic(); rec == nil || len(rec.GetMembers()) != 2 || rec.GetRebalancePending() != tc.rebalance {
				t.Fatalf("classic record %v", rec)
			}
			if r := RestoreConsumerGroup("g", &h.ccfg, h.topics, ConsumerRecordsFromProto(h.written)); r.epoch != 0 || len(r.members) != 0 {
				t.Fatalf("the consumer records were not all removed: epoch %d, %d members", r.epoch, len(r.members))
			}
			if len(h.written) == written {
				t.Fatal("nothing written")
			}
			if tc.rebalance {
				if h.g.State() != PreparingRebalance {
					t.Fatalf("state %v, want PreparingRebalance", h.g.State())
				}
			} else {
				if h.g.State() != Stable {
					t.Fatalf("state %v, want Stable", h.g.State())
				}
				h.step(s) // SyncGroup: the replaced member's partitions
				if !s.held.equal(newTPSet(kHeld)) || s.gen != epoch {
					t.Fatalf("the new member holds %v at %d, the replaced one held %v at %d", s.held.list(), s.gen, kHeld, epoch)
				}
				if _, r := h.classic(&pb.HeartbeatRequest{GroupId: "g", MemberId: c.memberID, GenerationId: c.gen}); r.(*pb.HeartbeatResponse).GetErrorCode() != ErrNone {
					t.Fatalf("the other classic member's heartbeat: %v", r)
				}
			}
			h.settle()
			h.covered()
			if c.lost+s.lost != 0 || h.toClassic != 1 || h.g.Consumer() != nil {
				t.Fatalf("lost %d/%d, conversions to classic %d", c.lost, s.lost, h.toClassic)
			}
			if !tc.rebalance && h.g.Generation() != epoch {
				t.Fatalf("generation %d after settling, want %d (no rebalance)", h.g.Generation(), epoch)
			}
		})
	}
}
