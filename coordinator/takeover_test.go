package coordinator

import (
	"fmt"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// takeoverSub is m<i>'s cooperative-sticky subscription to topic t owning
// the given partitions, as a client sends it after generation gen.
func takeoverSub(gen int32, owned ...int32) []byte {
	var tps []assignor.TopicPartitions
	if len(owned) > 0 {
		tps = []assignor.TopicPartitions{{Topic: "t", Partitions: owned}}
	}
	s := assignor.NewSubscription([]string{"t"}, tps, gen, "", nil)
	return s.AppendTo(nil)
}

func takeoverAssignment(ps ...int32) []byte {
	a := assignor.Assignment{Topics: []assignor.TopicPartitions{{Topic: "t", Partitions: ps}}}
	return a.AppendTo(nil)
}

// takeoverRecord is a settled cooperative group at generation 5: m0 (the
// leader) owns t-0 and t-1, m1 owns t-2 and t-3, each member's stored
// subscription is the one it joined generation 5 with.
func takeoverRecord() *pb.GroupRecord {
	rec := &pb.GroupRecord{GroupId: "g", ProtocolType: "consumer", Generation: 5, GenerationFloor: 5, ProtocolName: strp("cooperative-sticky"), Leader: strp("m0"), StateTimestampMs: t0.Add(-time.Hour).UnixMilli()}
	for i := range 2 {
		ps := []int32{int32(2 * i), int32(2*i + 1)}
		rec.Members = append(rec.Members, &pb.MemberRecord{MemberId: fmt.Sprintf("m%d", i), ClientId: "c", ClientHost: "/10.0.0.1", RebalanceTimeoutMs: 60_000, SessionTimeoutMs: 10_000,
			Subscription: takeoverSub(4, ps...), Assignment: takeoverAssignment(ps...)})
	}
	return rec
}

func takeoverHarness(t *testing.T, partitions int32, mutate ...func(*Config)) *harness {
	cfg := DefaultConfig()
	cfg.Partitions = func(topic string) (int32, bool) { return partitions, topic == "t" }
	for _, f := range mutate {
		f(&cfg)
	}
	return restoredHarness(t, cfg, takeoverRecord())
}

// rejoin sends m's JoinGroup after the takeover: its protocol list and the
// metadata it now sends for cooperative-sticky.
func (h *harness) rejoin(id string, version int32, meta []byte, extra ...*pb.Protocol) int {
	ps := append([]*pb.Protocol{{Name: "cooperative-sticky", Metadata: meta}}, extra...)
	return h.join(&pb.JoinGroupRequest{MemberId: id, ApiVersion: version, Protocols: ps, ClientId: "c"})
}

// A follower and then the leader rejoin right after the takeover with
// subscriptions that differ from the stored ones only in the owned list's
// generation: both get generation 5 back, the leader with the member list,
// and the group stays Stable with nothing written.
func TestTakeoverRejoinKeepsGeneration(t *testing.T) {
	for _, version := range []int32{5, 9} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			h := takeoverHarness(t, 4)
			h.advance(2 * time.Second)
			f := h.joinOK(h.rejoin("m1", version, takeoverSub(5, 2, 3), &pb.Protocol{Name: "range", Metadata: consumerMeta("t")}))
			checkMsg(t, "follower join", &pb.JoinGroupResponse{GenerationId: 5, ProtocolType: strp("consumer"), ProtocolName: strp("cooperative-sticky"), Leader: "m0", MemberId: "m1"}, f)
			l := h.joinOK(h.rejoin("m0", version, takeoverSub(5, 0, 1)))
			want := &pb.JoinGroupResponse{GenerationId: 5, ProtocolType: strp("consumer"), ProtocolName: strp("cooperative-sticky"), Leader: "m0", MemberId: "m0", SkipAssignment: version >= 9,
				Members: []*pb.JoinGroupMember{{MemberId: "m0", Metadata: takeoverSub(5, 0, 1)}, {MemberId: "m1", Metadata: takeoverSub(5, 2, 3)}}}
			checkMsg(t, "leader join", want, l)
			h.wantState(Stable, 5, "m0", "m1")
			// The leader's plan changes nothing: a Stable group answers
			// SyncGroup with the stored assignment.
			s := h.sync(&pb.SyncGroupRequest{MemberId: "m0", GenerationId: 5, Assignments: []*pb.SyncGroupAssignment{{MemberId: "m0", Assignment: takeoverAssignment(0, 1, 2, 3)}}})
			if r := answer[*pb.SyncGroupResponse](h, s); string(r.Assignment) != string(takeoverAssignment(0, 1)) {
				t.Fatalf("leader sync got %x", r.Assignment)
			}
			if len(h.written) != 0 {
				t.Fatalf("wrote %v", h.written)
			}
			if n := h.g.TakeoverRejoins(); n != 2 {
				t.Fatalf("takeover rejoins %d, want 2", n)
			}
			// The window is over for both: a second leader rejoin is Kafka's
			// rebalance.
			h.rejoin("m0", version, takeoverSub(5, 0, 1))
			h.wantState(PreparingRebalance, 5, "m0", "m1")
		})
	}
}

// Every way out of the window leads back to Kafka's rules: the leader's
// rejoin rebalances.
func TestTakeoverWindowEnds(t *testing.T) {
	cases := []struct {
		name   string
		parts  int32
		mutate func(*Config)
		rec    func(*pb.GroupRecord)
		before func(h *harness)
		meta   []byte
	}{
		{name: "after a heartbeat", parts: 4, before: func(h *harness) {
			if code := h.heartbeat("m0", 5); code != ErrNone {
				h.t.Fatalf("heartbeat %d", code)
			}
		}},
		{name: "after a sync", parts: 4, before: func(h *harness) {
			h.sync(&pb.SyncGroupRequest{MemberId: "m0", GenerationId: 5})
		}},
		{name: "after the session timeout", parts: 4, before: func(h *harness) {
			// A commit keeps the member alive but does not end its window;
			// the window ends one session timeout after the takeover.
			h.advance(9 * time.Second)
			h.heartbeat("m1", 5)
			h.commit(&pb.OffsetCommitRequest{MemberId: "m0", GenerationId: 5, Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 1}}}}})
			h.advance(time.Second + ms)
		}},
		{name: "partition count grew", parts: 6},
		{name: "partition count shrank", parts: 3},
		{name: "topic deleted", parts: 4, mutate: func(c *Config) { c.Partitions = func(string) (int32, bool) { return 0, false } }},
		{name: "subscription changed", parts: 4, meta: assignorSub([]string{"t", "u"}, 0, 1)},
		{name: "rack changed", parts: 4, meta: func() []byte {
			s := assignor.NewSubscription([]string{"t"}, []assignor.TopicPartitions{{Topic: "t", Partitions: []int32{0, 1}}}, 5, "rack-b", nil)
			return s.AppendTo(nil)
		}()},
		{name: "claims a partition it was not assigned", parts: 4, meta: takeoverSub(5, 0, 1, 2)},
		{name: "a rebalance was under way", parts: 4, rec: func(r *pb.GroupRecord) { r.GenerationFloor = 6 }},
		{name: "window switched off", parts: 4, mutate: func(c *Config) { c.DisableTakeoverWindow = true }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			parts := tc.parts
			cfg.Partitions = func(topic string) (int32, bool) { return parts, topic == "t" }
			if tc.mutate != nil {
				tc.mutate(&cfg)
			}
			rec := takeoverRecord()
			if tc.rec != nil {
				tc.rec(rec)
			}
			h := restoredHarness(t, cfg, rec)
			if tc.before != nil {
				tc.before(h)
			}
			meta := tc.meta
			if meta == nil {
				meta = takeoverSub(5, 0, 1)
			}
			hd := h.rejoin("m0", 9, meta)
			h.wantParked(hd)
			if h.g.State() != PreparingRebalance {
				t.Fatalf("state %v, want PreparingRebalance", h.g.State())
			}
			if n := h.g.TakeoverRejoins(); n != 0 {
				t.Fatalf("takeover rejoins %d", n)
			}
		})
	}
}

func assignorSub(topics []string, owned ...int32) []byte {
	s := assignor.NewSubscription(topics, []assignor.TopicPartitions{{Topic: "t", Partitions: owned}}, 5, "", nil)
	return s.AppendTo(nil)
}

// A follower's rejoin in the window that changed its subscription is
// Kafka's rebalance, and the window of the others stays open until that
// rebalance starts.
func TestTakeoverFollowerChangeRebalances(t *testing.T) {
	h := takeoverHarness(t, 4)
	h.rejoin("m1", 9, assignorSub([]string{"t", "u"}, 2, 3))
	h.wantState(PreparingRebalance, 5, "m0", "m1")
	if h.g.takeover != nil {
		t.Fatal("window still open during a rebalance")
	}
}

// Eager members revoke before they rejoin: an empty owned list is no
// change.
func TestTakeoverEagerRejoin(t *testing.T) {
	h := takeoverHarness(t, 4)
	r := h.joinOK(h.rejoin("m0", 9, takeoverSub(5)))
	if r.GenerationId != 5 || !r.SkipAssignment || len(r.Members) != 2 {
		t.Fatalf("join %v", r)
	}
	h.wantState(Stable, 5, "m0", "m1")
}

// Groups of other protocol types need byte-equal metadata.
func TestTakeoverOtherProtocolType(t *testing.T) {
	rec := &pb.GroupRecord{GroupId: "g", ProtocolType: "connect", Generation: 3, GenerationFloor: 3, ProtocolName: strp("v1"), Leader: strp("w0"),
		Members: []*pb.MemberRecord{
			{MemberId: "w0", ClientId: "c", RebalanceTimeoutMs: 60_000, SessionTimeoutMs: 10_000, Subscription: []byte("meta-0"), Assignment: []byte("a0")},
			{MemberId: "w1", ClientId: "c", RebalanceTimeoutMs: 60_000, SessionTimeoutMs: 10_000, Subscription: []byte("meta-1"), Assignment: []byte("a1")},
		}}
	cfg := DefaultConfig()
	cfg.Partitions = func(string) (int32, bool) { return 0, false }
	h := restoredHarness(t, cfg, rec)
	join := func(id, meta string) int {
		return h.join(&pb.JoinGroupRequest{MemberId: id, ApiVersion: 9, ProtocolType: "connect", Protocols: []*pb.Protocol{{Name: "v1", Metadata: []byte(meta)}}})
	}
	if r := h.joinOK(join("w0", "meta-0")); r.GenerationId != 3 || !r.SkipAssignment {
		t.Fatalf("leader join %v", r)
	}
	h.wantState(Stable, 3, "w0", "w1")
	join("w1", "meta-1-changed")
	h.wantState(PreparingRebalance, 3, "w0", "w1")
}

// The leader that rejoins first sees the others' subscriptions as they
// would send them now: owned partitions, generation and sticky userData of
// this generation, not of the one before.
func TestTakeoverLeaderSeesCurrentSubscriptions(t *testing.T) {
	rec := takeoverRecord()
	// m1 joined generation 5 owning t-3 only, with franz-go's sticky
	// userData from generation 4.
	u := assignor.StickyUserData{Owned: []assignor.TopicPartitions{{Topic: "t", Partitions: []int32{3}}}, Generation: 4}
	s := assignor.NewSubscription([]string{"t"}, []assignor.TopicPartitions{{Topic: "t", Partitions: []int32{3}}}, 4, "", u.AppendTo(nil))
	rec.Members[1].Subscription = s.AppendTo(nil)
	h := restoredHarness(t, func() Config {
		c := DefaultConfig()
		c.Partitions = func(string) (int32, bool) { return 4, true }
		return c
	}(), rec)
	r := h.joinOK(h.rejoin("m0", 9, takeoverSub(5, 0, 1)))
	if len(r.Members) != 2 {
		t.Fatalf("members %v", r.Members)
	}
	want := assignor.StickyUserData{Owned: []assignor.TopicPartitions{{Topic: "t", Partitions: []int32{2, 3}}}, Generation: 5}
	ws := assignor.NewSubscription([]string{"t"}, []assignor.TopicPartitions{{Topic: "t", Partitions: []int32{2, 3}}}, 5, "", want.AppendTo(nil))
	if got := r.Members[1].Metadata; string(got) != string(ws.AppendTo(nil)) {
		t.Fatalf("m1 metadata\n got %x\nwant %x", got, ws.AppendTo(nil))
	}
	// What DescribeGroups shows stays what the member sent.
	if d := h.g.Describe(); string(d.Members[1].Metadata) != string(rec.Members[1].Subscription) {
		t.Fatalf("describe shows %x", d.Members[1].Metadata)
	}
}

// A member heard through a peer (another node forwards its requests here)
// keeps a window open a session timeout past its last forwarded request, so
// its rejoin after that peer fails keeps the generation; a forwarded
// JoinGroup, and a rejoin after the window, follow Kafka's rules.
func TestTakeoverWindowThroughPeer(t *testing.T) {
	// forwarded is a heartbeat of m0 and m1 through a peer, as the group
	// actor reports it.
	forwarded := func(h *harness) {
		for _, m := range []string{"m0", "m1"} {
			if code := h.heartbeat(m, 5); code != ErrNone {
				h.t.Fatalf("%s heartbeat %d", m, code)
			}
			h.g.HeardThroughPeer(h.now, m)
		}
	}
	t.Run("rejoin after the peer failed", func(t *testing.T) {
		h := takeoverHarness(t, 4)
		for range 3 {
			forwarded(h)
			h.advance(8 * time.Second)
		}
		l := h.joinOK(h.rejoin("m0", 9, takeoverSub(5, 0, 1)))
		if l.GenerationId != 5 || !l.SkipAssignment {
			t.Fatalf("leader rejoin: generation %d, skip assignment %v", l.GenerationId, l.SkipAssignment)
		}
		h.wantState(Stable, 5, "m0", "m1")
		if n := h.g.TakeoverRejoins(); n != 1 {
			t.Fatalf("takeover rejoins %d", n)
		}
	})
	for _, tc := range []struct {
		name   string
		before func(h *harness)
	}{
		{"a session after the last forwarded request", func(h *harness) {
			forwarded(h)
			h.advance(9 * time.Second)
			h.heartbeat("m1", 5)
			// A commit keeps m0 alive and leaves its window as it is.
			h.commit(&pb.OffsetCommitRequest{MemberId: "m0", GenerationId: 5, Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 1}}}}})
			h.advance(time.Second + ms)
		}},
		{"a forwarded join", func(h *harness) {
			forwarded(h)
			h.g.ForwardedJoin("m0")
		}},
		{"heard directly after", func(h *harness) {
			forwarded(h)
			h.heartbeat("m0", 5)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := takeoverHarness(t, 4)
			tc.before(h)
			hd := h.rejoin("m0", 9, takeoverSub(5, 0, 1))
			h.wantParked(hd)
			if h.g.State() != PreparingRebalance {
				t.Fatalf("state %v, want PreparingRebalance", h.g.State())
			}
		})
	}
}
