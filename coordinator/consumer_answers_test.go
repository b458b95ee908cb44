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
// partitions, and the next generation is above every epoch the consumer
// group used.
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
			cgEpoch := h.g.floor
			if h.g.Consumer() != nil || h.g.State() != PreparingRebalance {
				t.Fatalf("after the leaves: consumer %v, state %v", h.g.Consumer() != nil, h.g.State())
			}
			gens := map[int32]bool{}
			for _, c := range classic {
				gens[c.gen] = true
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
				if c.gen <= cgEpoch {
					t.Fatalf("%s at generation %d, not above the consumer group's epoch %d", c.id, c.gen, cgEpoch)
				}
			}
			if h.g.converted != nil {
				t.Fatalf("converted generations kept after the rebalance: %v", h.g.converted)
			}
		})
	}
}
