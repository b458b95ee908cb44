package coordinator

import (
	"errors"
	"strings"
	"testing"
	"time"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func commitOne(gen int32, member string, instance *string) *pb.OffsetCommitRequest {
	return &pb.OffsetCommitRequest{GenerationId: gen, MemberId: member, GroupInstanceId: instance, RetentionTimeMs: -1,
		Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 42, LeaderEpoch: 1}}}}}
}

// §2.9: OffsetCommit validation by group state, generation and member.
func TestCommitValidation(t *testing.T) {
	type setup func(h *harness) []string // returns member ids
	empty := func(h *harness) []string { return nil }
	emptyAfterMembers := func(h *harness) []string {
		ids := h.stableGroup(1)
		h.leave(&pb.MemberIdentity{MemberId: ids[0]})
		return ids
	}
	stable := func(h *harness) []string { return h.stableGroup(2) }
	preparing := func(h *harness) []string {
		ids := h.stableGroup(2)
		h.join(&pb.JoinGroupRequest{ClientId: "c0", ApiVersion: 3, MemberId: ids[0]})
		return ids
	}
	completing := func(h *harness) []string {
		ids := preparing(h)
		h.join(&pb.JoinGroupRequest{ClientId: "c1", ApiVersion: 3, MemberId: ids[1]})
		return ids
	}
	dead := func(h *harness) []string {
		ids := h.stableGroup(1)
		h.g.Unload(h.now, &h.fx)
		h.apply()
		return ids
	}
	cases := []struct {
		name  string
		setup setup
		req   func(ids []string) *pb.OffsetCommitRequest
		want  int32
	}{
		{"empty, generation -1: no member check", empty, func([]string) *pb.OffsetCommitRequest { return commitOne(-1, "", nil) }, ErrNone},
		{"empty, generation -1: bogus member and instance ignored", empty, func([]string) *pb.OffsetCommitRequest { return commitOne(-1, "bogus", strp("inst")) }, ErrNone},
		{"empty after members left, generation -1", emptyAfterMembers, func([]string) *pb.OffsetCommitRequest { return commitOne(-1, "", nil) }, ErrNone},
		{"empty, generation 0: unknown member", empty, func([]string) *pb.OffsetCommitRequest { return commitOne(0, "", nil) }, ErrUnknownMemberID},
		{"empty, old member of an earlier generation", emptyAfterMembers, func(ids []string) *pb.OffsetCommitRequest { return commitOne(1, ids[0], nil) }, ErrUnknownMemberID},
		{"stable member, right generation", stable, func(ids []string) *pb.OffsetCommitRequest { return commitOne(1, ids[1], nil) }, ErrNone},
		{"stable member, wrong generation", stable, func(ids []string) *pb.OffsetCommitRequest { return commitOne(2, ids[1], nil) }, ErrIllegalGeneration},
		{"stable member, generation -1", stable, func(ids []string) *pb.OffsetCommitRequest { return commitOne(-1, ids[1], nil) }, ErrIllegalGeneration},
		{"stable, generation -1 without member", stable, func([]string) *pb.OffsetCommitRequest { return commitOne(-1, "", nil) }, ErrUnknownMemberID},
		{"stable, unknown member", stable, func([]string) *pb.OffsetCommitRequest { return commitOne(1, "stranger", nil) }, ErrUnknownMemberID},
		{"stable, instance of a dynamic member", stable, func(ids []string) *pb.OffsetCommitRequest { return commitOne(1, ids[1], strp("i")) }, ErrUnknownMemberID},
		{"preparing, member of the current generation", preparing, func(ids []string) *pb.OffsetCommitRequest { return commitOne(1, ids[1], nil) }, ErrNone},
		{"completing: REBALANCE_IN_PROGRESS", completing, func(ids []string) *pb.OffsetCommitRequest { return commitOne(2, ids[1], nil) }, ErrRebalanceInProgress},
		{"completing, previous generation", completing, func(ids []string) *pb.OffsetCommitRequest { return commitOne(1, ids[1], nil) }, ErrIllegalGeneration},
		{"dead", dead, func([]string) *pb.OffsetCommitRequest { return commitOne(-1, "", nil) }, ErrCoordinatorNotAvailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			ids := tc.setup(h)
			h.takeWritten()
			got := h.commitCode(h.commit(tc.req(ids)), "t", 0)
			if got != tc.want {
				t.Fatalf("code %d, want %d", got, tc.want)
			}
			o := h.fetchOne("t", 0, false)
			recs := h.takeWritten()
			if tc.want == ErrNone {
				if o.Offset != 42 || o.LeaderEpoch != 1 || len(recs) != 1 || recs[0].GetOffset() == nil {
					t.Fatalf("offset %v records %v", o, recs)
				}
			} else if o.Offset != -1 || len(recs) != 0 {
				t.Fatalf("refused commit stored: %v %v", o, recs)
			}
		})
	}
}

// §2.9: metadata over offset.metadata.max.bytes fails that partition only.
func TestCommitMetadataTooLarge(t *testing.T) {
	h := newHarness(t)
	c := h.commit(&pb.OffsetCommitRequest{GenerationId: -1, Topics: []*pb.OffsetCommitTopic{
		{Name: "a", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 1, Metadata: strp(strings.Repeat("m", 4096))}, {Partition: 1, Offset: 2, Metadata: strp(strings.Repeat("m", 4097))}}},
		{Name: "b", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 3}}},
	}})
	checkMsg(t, "answer", &pb.OffsetCommitResponse{Topics: []*pb.TopicPartitionErrors{
		{Name: "a", Partitions: []*pb.PartitionError{{Partition: 0}, {Partition: 1, ErrorCode: ErrOffsetMetadataTooLarge}}},
		{Name: "b", Partitions: []*pb.PartitionError{{Partition: 0}}},
	}}, answer[*pb.OffsetCommitResponse](h, c))
	if len(h.written) != 2 {
		t.Fatalf("written %v", h.written)
	}
	if o := h.fetchOne("a", 1, false); o.Offset != -1 {
		t.Fatalf("too large offset stored: %v", o)
	}
	if o := h.fetchOne("a", 0, false); o.Offset != 1 || len(o.Metadata) != 4096 {
		t.Fatal("4096-byte metadata refused")
	}
	// All partitions too large: answered at once, nothing written.
	h.takeWritten()
	c = h.commit(&pb.OffsetCommitRequest{GenerationId: -1, Topics: []*pb.OffsetCommitTopic{{Name: "a", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 9, Metadata: strp(strings.Repeat("m", 5000))}}}}})
	if h.commitCode(c, "a", 0) != ErrOffsetMetadataTooLarge || len(h.written) != 0 {
		t.Fatal("all-too-large commit")
	}
}

// §2.9/§2.10: committed offsets become visible once written; while a write
// is held, requireStable fetches get UNSTABLE_OFFSET_COMMIT (KIP-447).
func TestCommitVisibilityAndRequireStable(t *testing.T) {
	h := newHarness(t)
	h.commit(&pb.OffsetCommitRequest{GenerationId: -1, Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 1}, {Partition: 1, Offset: 10, Metadata: strp("m")}}}}})
	h.hold = true
	c := h.commit(&pb.OffsetCommitRequest{GenerationId: -1, Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 2}}}}})
	h.wantParked(c)
	fetch := func(stable bool) *pb.OffsetFetchResponse {
		return h.g.Fetch(&pb.OffsetFetchRequest{GroupId: "g", Topics: []*pb.TopicPartitions{{Name: "t", Partitions: []int32{0, 1, 2}}}, RequireStable: stable})
	}
	checkMsg(t, "require stable", &pb.OffsetFetchResponse{Topics: []*pb.OffsetFetchTopic{{Name: "t", Partitions: []*pb.OffsetFetchPartition{
		{Partition: 0, Offset: -1, LeaderEpoch: -1, ErrorCode: ErrUnstableOffsetCommit},
		{Partition: 1, Offset: 10, Metadata: "m"},
		{Partition: 2, Offset: -1, LeaderEpoch: -1},
	}}}}, fetch(true))
	if o := fetch(false).Topics[0].Partitions[0]; o.Offset != 1 || o.ErrorCode != ErrNone {
		t.Fatalf("without requireStable: %v", o)
	}
	h.release(nil)
	if h.commitCode(c, "t", 0) != ErrNone {
		t.Fatal("commit failed")
	}
	if o := fetch(true).Topics[0].Partitions[0]; o.Offset != 2 || o.ErrorCode != ErrNone {
		t.Fatalf("after the write: %v", o)
	}
	// All topics, sorted by topic and partition.
	h.hold = false
	h.commit(&pb.OffsetCommitRequest{GenerationId: -1, Topics: []*pb.OffsetCommitTopic{{Name: "a", Partitions: []*pb.OffsetCommitPartition{{Partition: 3, Offset: 5}}}}})
	all := h.g.Fetch(&pb.OffsetFetchRequest{GroupId: "g", AllTopics: true})
	checkMsg(t, "all", &pb.OffsetFetchResponse{Topics: []*pb.OffsetFetchTopic{
		{Name: "a", Partitions: []*pb.OffsetFetchPartition{{Partition: 3, Offset: 5}}},
		{Name: "t", Partitions: []*pb.OffsetFetchPartition{{Partition: 0, Offset: 2}, {Partition: 1, Offset: 10, Metadata: "m"}}},
	}}, all)
	// A Dead group answers like an absent one.
	h.g.Unload(h.now, &h.fx)
	h.apply()
	checkMsg(t, "dead", &pb.OffsetFetchResponse{}, h.g.Fetch(&pb.OffsetFetchRequest{GroupId: "g", AllTopics: true}))
	if o := fetch(false).Topics[0].Partitions[0]; o.Offset != -1 {
		t.Fatalf("dead group offset %v", o)
	}
}

// A group created by OffsetCommit (generation -1) has no protocol type; a
// consumer can join it later.
func TestCommitCreatedSimpleGroup(t *testing.T) {
	cfg := DefaultConfig()
	if _, create := Absent(&cfg, &pb.OffsetCommitRequest{GroupId: "", GenerationId: -1}); !create {
		t.Fatal("commit with the empty group id does not create")
	}
	h := newHarness(t)
	h.commit(commitOne(-1, "", nil))
	if h.g.ProtocolType() != "" || h.g.State() != Empty {
		t.Fatalf("type %q state %v", h.g.ProtocolType(), h.g.State())
	}
	checkMsg(t, "describe", &pb.DescribeGroupResponse{GroupId: "g", State: "Empty"}, h.g.Describe())
	a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3})
	h.advance(3 * time.Second)
	if r := h.joinOK(a); r.GetProtocolType() != "consumer" || r.GenerationId != 1 {
		t.Fatalf("answer %v", r)
	}
	if o := h.fetchOne("t", 0, false); o.Offset != 42 {
		t.Fatalf("offset %v", o)
	}
}

// §2.11 OffsetDelete (KIP-496).
func TestOffsetDelete(t *testing.T) {
	del := func(h *harness, topics ...*pb.TopicPartitions) *pb.OffsetDeleteResponse {
		hd := h.handle()
		h.g.OffsetDelete(h.now, &pb.OffsetDeleteRequest{GroupId: "g", Topics: topics}, hd, &h.fx)
		h.apply()
		return answer[*pb.OffsetDeleteResponse](h, hd)
	}
	commit := func(h *harness, gen int32, member string, topics ...string) {
		req := &pb.OffsetCommitRequest{GenerationId: gen, MemberId: member}
		for _, tp := range topics {
			req.Topics = append(req.Topics, &pb.OffsetCommitTopic{Name: tp, Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 1}}})
		}
		h.commit(req)
	}
	consumerGroup := func(t *testing.T, meta []byte, protocolType string) (*harness, string) {
		h := newHarness(t)
		a := h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3, ProtocolType: protocolType, Protocols: []*pb.Protocol{{Name: "range", Metadata: meta}}})
		h.advance(3 * time.Second)
		id := h.joinOK(a).MemberId
		h.syncGroup(1, id, id)
		commit(h, 1, id, "sub", "other")
		h.takeWritten()
		return h, id
	}
	t.Run("empty group: requested partitions deleted", func(t *testing.T) {
		h := newHarness(t)
		commit(h, -1, "", "a", "b")
		h.takeWritten()
		r := del(h, &pb.TopicPartitions{Name: "a", Partitions: []int32{0, 5}})
		checkMsg(t, "answer", &pb.OffsetDeleteResponse{Topics: []*pb.TopicPartitionErrors{{Name: "a", Partitions: []*pb.PartitionError{{Partition: 0}, {Partition: 5}}}}}, r)
		wantRecords(t, []*pb.Record{{Kind: &pb.Record_OffsetTombstone{OffsetTombstone: &pb.OffsetTombstone{GroupId: "g", Topic: "a", Partition: 0}}}}, h.takeWritten())
		if h.fetchOne("a", 0, false).Offset != -1 || h.fetchOne("b", 0, false).Offset != 1 {
			t.Fatal("wrong offsets deleted")
		}
	})
	t.Run("consumer group: subscribed topics refused, others deleted", func(t *testing.T) {
		h, _ := consumerGroup(t, consumerMeta("sub"), "consumer")
		r := del(h, &pb.TopicPartitions{Name: "sub", Partitions: []int32{0}}, &pb.TopicPartitions{Name: "other", Partitions: []int32{0}})
		checkMsg(t, "answer", &pb.OffsetDeleteResponse{Topics: []*pb.TopicPartitionErrors{
			{Name: "sub", Partitions: []*pb.PartitionError{{Partition: 0, ErrorCode: ErrGroupSubscribedToTopic}}},
			{Name: "other", Partitions: []*pb.PartitionError{{Partition: 0}}},
		}}, r)
		if h.fetchOne("sub", 0, false).Offset != 1 || h.fetchOne("other", 0, false).Offset != -1 {
			t.Fatal("wrong offsets deleted")
		}
	})
	t.Run("consumer group with an unparsable subscription: every topic counts as subscribed", func(t *testing.T) {
		h, _ := consumerGroup(t, []byte{0xff}, "consumer")
		r := del(h, &pb.TopicPartitions{Name: "other", Partitions: []int32{0}})
		if r.Topics[0].Partitions[0].ErrorCode != ErrGroupSubscribedToTopic || len(h.written) != 0 {
			t.Fatalf("answer %v", r)
		}
	})
	t.Run("non-empty non-consumer group: NON_EMPTY_GROUP", func(t *testing.T) {
		h, _ := consumerGroup(t, consumerMeta("sub"), "connect")
		checkMsg(t, "answer", &pb.OffsetDeleteResponse{ErrorCode: ErrNonEmptyGroup}, del(h, &pb.TopicPartitions{Name: "other", Partitions: []int32{0}}))
	})
	t.Run("dead: GROUP_ID_NOT_FOUND", func(t *testing.T) {
		h := newHarness(t)
		h.g.Unload(h.now, &h.fx)
		h.apply()
		checkMsg(t, "answer", &pb.OffsetDeleteResponse{ErrorCode: ErrGroupIDNotFound}, del(h))
	})
	t.Run("write failure: top-level error", func(t *testing.T) {
		h := newHarness(t)
		commit(h, -1, "", "a")
		h.failErr = ErrStoreNotLeader
		checkMsg(t, "answer", &pb.OffsetDeleteResponse{ErrorCode: ErrNotCoordinator}, del(h, &pb.TopicPartitions{Name: "a", Partitions: []int32{0}}))
	})
}

// §2.11 DeleteGroups: only an Empty group is deleted (Dead, tombstones,
// then the answer and Gone once written).
func TestDeleteGroup(t *testing.T) {
	del := func(h *harness) int {
		hd := h.handle()
		h.g.Delete(h.now, hd, &h.fx)
		h.apply()
		return hd
	}
	t.Run("empty", func(t *testing.T) {
		h := newHarness(t)
		h.commit(commitOne(-1, "", nil))
		h.takeWritten()
		h.hold = true
		hd := del(h)
		h.wantParked(hd)
		if h.g.State() != Dead || h.gone {
			t.Fatalf("state %v gone %v", h.g.State(), h.gone)
		}
		h.release(nil)
		checkMsg(t, "answer", &pb.DeleteGroupResponse{GroupId: "g"}, answer[*pb.DeleteGroupResponse](h, hd))
		if !h.gone || len(h.timers) != 0 {
			t.Fatalf("gone %v timers %v", h.gone, h.timers)
		}
		wantRecords(t, []*pb.Record{
			{Kind: &pb.Record_OffsetTombstone{OffsetTombstone: &pb.OffsetTombstone{GroupId: "g", Topic: "t", Partition: 0}}},
			{Kind: &pb.Record_GroupTombstone{GroupTombstone: &pb.GroupTombstone{GroupId: "g"}}},
		}, h.takeWritten())
		checkMsg(t, "again", &pb.DeleteGroupResponse{GroupId: "g", ErrorCode: ErrGroupIDNotFound}, answer[*pb.DeleteGroupResponse](h, del(h)))
		checkMsg(t, "describe", &pb.DescribeGroupResponse{GroupId: "g", State: "Dead"}, h.g.Describe())
	})
	t.Run("gone only when every write is done", func(t *testing.T) {
		h := newHarness(t)
		h.hold = true
		c := h.commit(commitOne(-1, "", nil))
		hd := del(h)
		h.g.OnPersisted(h.now, h.held[1].Token, nil, &h.fx) // the deletion first
		h.apply()
		if h.gone {
			t.Fatal("gone with a commit in flight")
		}
		h.g.OnPersisted(h.now, h.held[0].Token, nil, &h.fx)
		h.held = nil
		h.apply()
		if !h.gone || h.commitCode(c, "t", 0) != ErrNone || h.g.Fetch(&pb.OffsetFetchRequest{AllTopics: true}).Topics != nil {
			t.Fatal("late commit")
		}
		_ = answer[*pb.DeleteGroupResponse](h, hd)
	})
	for _, tc := range []struct {
		name  string
		setup func(h *harness)
	}{
		{"stable", func(h *harness) { h.stableGroup(1) }},
		{"preparing", func(h *harness) { h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3}) }},
		{"completing", func(h *harness) {
			h.join(&pb.JoinGroupRequest{ClientId: "a", ApiVersion: 3})
			h.advance(3 * time.Second)
		}},
	} {
		t.Run(tc.name+": NON_EMPTY_GROUP", func(t *testing.T) {
			h := newHarness(t)
			tc.setup(h)
			st := h.g.State()
			h.takeWritten()
			checkMsg(t, "answer", &pb.DeleteGroupResponse{GroupId: "g", ErrorCode: ErrNonEmptyGroup}, answer[*pb.DeleteGroupResponse](h, del(h)))
			if h.g.State() != st || len(h.written) != 0 {
				t.Fatalf("state %v written %v", h.g.State(), h.written)
			}
		})
	}
	for _, tc := range []struct {
		err  error
		want int32
	}{{ErrStoreTimeout, ErrCoordinatorNotAvailable}, {ErrStoreNotLeader, ErrNotCoordinator}, {ErrStoreUnavailable, ErrCoordinatorNotAvailable}, {errors.New("x"), ErrCoordinatorNotAvailable}} {
		t.Run("write failure "+tc.err.Error(), func(t *testing.T) {
			h := newHarness(t)
			h.failErr = tc.err
			checkMsg(t, "answer", &pb.DeleteGroupResponse{GroupId: "g", ErrorCode: tc.want}, answer[*pb.DeleteGroupResponse](h, del(h)))
		})
	}
}

// §2.11 DescribeGroups per state.
func TestDescribeByState(t *testing.T) {
	h := newHarness(t)
	checkMsg(t, "new", &pb.DescribeGroupResponse{GroupId: "g", State: "Empty"}, h.g.Describe())
	a := h.join(&pb.JoinGroupRequest{ClientId: "a", ClientHost: "/1.1.1.1", ApiVersion: 5, GroupInstanceId: strp("ia"), Protocols: []*pb.Protocol{{Name: "range", Metadata: []byte("m")}}})
	bare := &pb.DescribedMember{MemberId: "ia-id1", GroupInstanceId: strp("ia"), ClientId: "a", ClientHost: "/1.1.1.1", Metadata: []byte{}, Assignment: []byte{}}
	checkMsg(t, "preparing", &pb.DescribeGroupResponse{GroupId: "g", State: "PreparingRebalance", ProtocolType: "consumer", Members: []*pb.DescribedMember{bare}}, h.g.Describe())
	h.advance(3 * time.Second)
	id := h.joinOK(a).MemberId
	checkMsg(t, "completing", &pb.DescribeGroupResponse{GroupId: "g", State: "CompletingRebalance", ProtocolType: "consumer", GenerationId: 1, Members: []*pb.DescribedMember{bare}}, h.g.Describe())
	h.syncGroup(1, id, id)
	checkMsg(t, "stable", &pb.DescribeGroupResponse{GroupId: "g", State: "Stable", ProtocolType: "consumer", ProtocolData: "range", GenerationId: 1, Members: []*pb.DescribedMember{
		{MemberId: id, GroupInstanceId: strp("ia"), ClientId: "a", ClientHost: "/1.1.1.1", Metadata: []byte("m"), Assignment: []byte("a-" + id)}}}, h.g.Describe())
	h.leave(&pb.MemberIdentity{GroupInstanceId: strp("ia")})
	checkMsg(t, "empty", &pb.DescribeGroupResponse{GroupId: "g", State: "Empty", ProtocolType: "consumer", GenerationId: 2}, h.g.Describe())
	h.g.Unload(h.now, &h.fx)
	h.apply()
	checkMsg(t, "dead", &pb.DescribeGroupResponse{GroupId: "g", State: "Dead", GenerationId: 2}, h.g.Describe())
}

// §2.1: the legal transitions, and wire names.
func TestStateTransitions(t *testing.T) {
	legal := map[[2]State]bool{
		{Stable, PreparingRebalance}: true, {CompletingRebalance, PreparingRebalance}: true, {Empty, PreparingRebalance}: true,
		{PreparingRebalance, CompletingRebalance}: true,
		{CompletingRebalance, Stable}:             true,
		{PreparingRebalance, Empty}:               true,
		{Empty, Dead}:                             true, {PreparingRebalance, Dead}: true, {CompletingRebalance, Dead}: true, {Stable, Dead}: true, {Dead, Dead}: true,
	}
	all := []State{Empty, PreparingRebalance, CompletingRebalance, Stable, Dead}
	for _, from := range all {
		for _, to := range all {
			g := New("g", &Config{}, t0)
			g.state = from
			panicked := func() (p bool) {
				defer func() { p = recover() != nil }()
				g.transition(to, t0.Add(time.Second))
				return false
			}()
			if panicked == legal[[2]State{from, to}] {
				t.Errorf("%v -> %v: panicked=%v, legal=%v", from, to, panicked, legal[[2]State{from, to}])
			}
			if !panicked && (g.state != to || !g.stateTime.Equal(t0.Add(time.Second))) {
				t.Errorf("%v -> %v: state %v at %v", from, to, g.state, g.stateTime)
			}
		}
	}
	names := map[State]string{Empty: "Empty", PreparingRebalance: "PreparingRebalance", CompletingRebalance: "CompletingRebalance", Stable: "Stable", Dead: "Dead", State(9): "Unknown"}
	for s, n := range names {
		if s.String() != n {
			t.Errorf("%d: %q", s, s.String())
		}
	}
	if g := New("g", &Config{}, t0); g.State() != Empty || g.Generation() != 0 || g.Leader() != "" || g.ID() != "g" {
		t.Errorf("new group %v %d", g.State(), g.Generation())
	}
}

// A commit's answer, of one partition or more, names the committed
// partitions; one answer is not changed by the next commit's.
func TestCommitAnswers(t *testing.T) {
	cfg := DefaultConfig()
	now := time.Unix(1000, 0)
	g := New("g", &cfg, now)
	to := "caller"
	commit := func(parts ...int32) any {
		var fx Effects
		req := &pb.OffsetCommitRequest{GroupId: "g", GenerationId: -1, Topics: []*pb.OffsetCommitTopic{{Name: "t"}}}
		for _, p := range parts {
			req.Topics[0].Partitions = append(req.Topics[0].Partitions, &pb.OffsetCommitPartition{Partition: p, Offset: int64(p) + 10})
		}
		g.Commit(now, req, to, &fx)
		if len(fx.Persists) != 1 || len(fx.Replies) != 0 {
			t.Fatalf("commit of %v: %d writes, %d answers before the write", parts, len(fx.Persists), len(fx.Replies))
		}
		token := fx.Persists[0].Token
		fx.Reset()
		g.OnPersisted(now, token, nil, &fx)
		if len(fx.Replies) != 1 || fx.Replies[0].To != to {
			t.Fatalf("commit of %v: answers %v", parts, fx.Replies)
		}
		return fx.Replies[0].Msg
	}
	one := commit(3)
	checkMsg(t, "one partition", &pb.OffsetCommitResponse{Topics: []*pb.TopicPartitionErrors{{Name: "t", Partitions: []*pb.PartitionError{{Partition: 3}}}}}, one.(*pb.OffsetCommitResponse))
	got := commit(1, 2)
	checkMsg(t, "one partition, after the next commit", &pb.OffsetCommitResponse{Topics: []*pb.TopicPartitionErrors{{Name: "t", Partitions: []*pb.PartitionError{{Partition: 3}}}}}, one.(*pb.OffsetCommitResponse))
	checkMsg(t, "two partitions", &pb.OffsetCommitResponse{Topics: []*pb.TopicPartitionErrors{{Name: "t", Partitions: []*pb.PartitionError{{Partition: 1}, {Partition: 2}}}}}, got.(*pb.OffsetCommitResponse))
	if o := g.Fetch(&pb.OffsetFetchRequest{GroupId: "g", Topics: []*pb.TopicPartitions{{Name: "t", Partitions: []int32{1, 2, 3}}}}); o.Topics[0].Partitions[2].Offset != 13 || o.Topics[0].Partitions[0].Offset != 11 {
		t.Fatalf("fetched %v", o)
	}
}
