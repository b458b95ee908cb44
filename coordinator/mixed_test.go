package coordinator

import (
	"slices"
	"testing"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func mixedHarness(t *testing.T, mixed bool) *harness {
	return guardHarness(t, func(c *Config) {
		c.MixedAssignors = mixed
		c.Partitions = func(topic string) (int32, bool) {
			if topic == "t" {
				return 4, true
			}
			return 0, false
		}
	})
}

type mixedAnswer struct {
	protocol string // protocol name in JoinGroup and SyncGroup answers
	leader   bool
	members  int // members listed in the JoinGroup answer
	parts    []int32
}

// mixedRound: every member in ms (re)joins (new members first), the join
// phase completes, everyone syncs; a leader sends bogus assignments, which
// must not be used.
func (h *harness) mixedRound(ms []*gmember) map[string]mixedAnswer {
	h.t.Helper()
	var order []*gmember
	for _, m := range ms {
		if m.id == "" {
			order = append(order, m)
		}
	}
	for _, m := range ms {
		if m.id != "" {
			order = append(order, m)
		}
	}
	hds := map[*gmember]int{}
	for _, m := range order {
		hds[m] = h.join(&pb.JoinGroupRequest{ClientId: m.client, MemberId: m.id, ApiVersion: 3, ProtocolType: "consumer", Protocols: m.protos})
	}
	out := map[string]mixedAnswer{}
	var gen int32
	for _, m := range ms {
		r := h.joinOK(hds[m])
		m.id, gen = r.MemberId, r.GenerationId
		out[m.client] = mixedAnswer{protocol: r.GetProtocolName(), leader: r.Leader == r.MemberId, members: len(r.Members)}
	}
	syncs := map[*gmember]int{}
	for _, m := range ms {
		a := out[m.client]
		req := &pb.SyncGroupRequest{MemberId: m.id, GenerationId: gen, ApiVersion: 5, ProtocolType: strp("consumer"), ProtocolName: strp(a.protocol)}
		if a.leader {
			// Everything to the leader: a plan the coordinator must ignore.
			req.Assignments = []*pb.SyncGroupAssignment{{MemberId: m.id, Assignment: asg(0, 1, 2, 3)}}
		}
		syncs[m] = h.sync(req)
	}
	h.wantStateOnly(Stable)
	for _, m := range ms {
		r := answer[*pb.SyncGroupResponse](h, syncs[m])
		if r.ErrorCode != ErrNone {
			h.t.Fatalf("sync of %s: %d", m.client, r.ErrorCode)
		}
		a := out[m.client]
		if r.GetProtocolName() != a.protocol {
			h.t.Fatalf("%s: told %q in JoinGroup, %q in SyncGroup", m.client, a.protocol, r.GetProtocolName())
		}
		a.parts = parts(h.t, r.Assignment)
		out[m.client] = a
	}
	return out
}

func wantExclusiveComplete(t *testing.T, got map[string]mixedAnswer, n int32) {
	t.Helper()
	seen := map[int32]string{}
	for c, a := range got {
		for _, p := range a.parts {
			if o, dup := seen[p]; dup {
				t.Fatalf("partition %d given to %s and %s", p, o, c)
			}
			seen[p] = c
		}
	}
	if int32(len(seen)) != n {
		t.Fatalf("%d of %d partitions given: %v", len(seen), n, got)
	}
}

// Without the option a member sharing no assignor is refused, as in Kafka.
func TestMixedOffRefusesDisjointAssignor(t *testing.T) {
	h := mixedHarness(t, false)
	a := &gmember{client: "a", protos: kgoProtocols(nil, "range")}
	h.round("consumer", []*gmember{a}, map[string][]int32{"a": {0, 1, 2, 3}})
	hd := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 3, ProtocolType: "consumer", Protocols: kgoProtocols(nil, "cooperative-sticky")})
	if code := h.joinCode(hd); code != ErrInconsistentGroupProto {
		t.Fatalf("join: %d", code)
	}
}

// A single bounce [range] -> [cooperative-sticky] with the option: the
// cooperative member is admitted, each member is told its own assignor, the
// leader's plan is ignored and the coordinator assigns every partition once;
// when the last range member is gone the group is an ordinary cooperative
// group again.
func TestMixedSingleBounce(t *testing.T) {
	h := mixedHarness(t, true)
	a := &gmember{client: "a", protos: kgoProtocols(nil, "range")}
	b := &gmember{client: "b", protos: kgoProtocols(nil, "range")}
	h.round("consumer", []*gmember{a, b}, map[string][]int32{"a": {0, 1}, "b": {2, 3}})
	// b restarts as [cooperative-sticky] (a new member id); a re-joins eager.
	if r := h.leave(&pb.MemberIdentity{MemberId: b.id}); r.GetMembers()[0].GetErrorCode() != ErrNone {
		t.Fatal(r)
	}
	h.round("consumer", []*gmember{a}, map[string][]int32{"a": {0, 1, 2, 3}})
	b = &gmember{client: "b", protos: kgoProtocols(nil, "cooperative-sticky")}
	got := h.mixedRound([]*gmember{a, b})
	if got["a"].protocol != "range" || got["b"].protocol != "cooperative-sticky" {
		t.Fatalf("told %q and %q", got["a"].protocol, got["b"].protocol)
	}
	if !got["a"].leader || got["a"].members != 1 {
		t.Fatalf("leader answer: %+v", got["a"])
	}
	wantExclusiveComplete(t, got, 4)
	if len(got["a"].parts) != 2 || len(got["b"].parts) != 2 {
		t.Fatalf("unbalanced: %v", got)
	}
	for _, d := range h.g.Describe().GetMembers() {
		if d.GetMemberId() == b.id && !slices.Equal(parts(t, d.GetAssignment()), got["b"].parts) {
			t.Fatalf("describe %v, answered %v", parts(t, d.GetAssignment()), got["b"].parts)
		}
	}
	// b (cooperative) keeps what it owns in the next round; a (eager)
	// revoked everything and lists nothing.
	b.protos = kgoProtocols(got["b"].parts, "cooperative-sticky")
	got2 := h.mixedRound([]*gmember{a, b})
	if !slices.Equal(got2["b"].parts, got["b"].parts) {
		t.Fatalf("cooperative member moved from %v to %v", got["b"].parts, got2["b"].parts)
	}
	wantExclusiveComplete(t, got2, 4)
	// a restarts as [cooperative-sticky]: every member lists it, the group
	// is ordinary again and the leader's plan counts.
	if r := h.leave(&pb.MemberIdentity{MemberId: a.id}); r.GetMembers()[0].GetErrorCode() != ErrNone {
		t.Fatal(r)
	}
	b.protos = kgoProtocols(got2["b"].parts, "cooperative-sticky")
	a = &gmember{client: "a", protos: kgoProtocols(nil, "cooperative-sticky")}
	h.round("consumer", []*gmember{b}, map[string][]int32{"b": {0, 1, 2, 3}})
	if h.g.isMixed() {
		t.Fatal("still mixed with one member")
	}
}

// The leader's SyncGroup v5 must name the protocol it was told; another
// member's name is refused.
func TestMixedSyncProtocolName(t *testing.T) {
	h := mixedHarness(t, true)
	a := &gmember{client: "a", protos: kgoProtocols(nil, "range")}
	h.round("consumer", []*gmember{a}, map[string][]int32{"a": {0, 1, 2, 3}})
	b := &gmember{client: "b", protos: kgoProtocols(nil, "cooperative-sticky")}
	hb := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 3, ProtocolType: "consumer", Protocols: b.protos})
	ha := h.join(&pb.JoinGroupRequest{ClientId: "a", MemberId: a.id, ApiVersion: 3, ProtocolType: "consumer", Protocols: a.protos})
	rb, ra := h.joinOK(hb), h.joinOK(ha)
	bad := h.sync(&pb.SyncGroupRequest{MemberId: rb.MemberId, GenerationId: rb.GenerationId, ProtocolType: strp("consumer"), ProtocolName: strp("range")})
	if code := h.syncCode(bad); code != ErrInconsistentGroupProto {
		t.Fatalf("sync with another member's protocol: %d", code)
	}
	ok := h.sync(&pb.SyncGroupRequest{MemberId: ra.MemberId, GenerationId: ra.GenerationId, ProtocolType: strp("consumer"), ProtocolName: strp("range")})
	if r := answer[*pb.SyncGroupResponse](h, ok); r.ErrorCode != ErrNone || r.GetProtocolName() != "range" {
		t.Fatalf("sync: %v", r)
	}
}

// Only groups whose members all list built-in assignors, of protocol type
// "consumer", admit a disjoint member.
func TestMixedOnlyBuiltinConsumerGroups(t *testing.T) {
	for _, tc := range []struct {
		name, protocolType string
		first, second      []string
	}{
		{"custom assignor in the group", "consumer", []string{"custom"}, []string{"range"}},
		{"custom assignor joining", "consumer", []string{"range"}, []string{"custom"}},
		{"connect group", "connect", []string{"range"}, []string{"cooperative-sticky"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := mixedHarness(t, true)
			a := &gmember{client: "a", protos: kgoProtocols(nil, tc.first...)}
			h.round(tc.protocolType, []*gmember{a}, map[string][]int32{"a": {0}})
			hd := h.join(&pb.JoinGroupRequest{ClientId: "b", ApiVersion: 3, ProtocolType: tc.protocolType, Protocols: kgoProtocols(nil, tc.second...)})
			if code := h.joinCode(hd); code != ErrInconsistentGroupProto {
				t.Fatalf("join: %d", code)
			}
		})
	}
}

// In a mixed group the guard still applies: a partition a cooperative
// member listed as owned never goes to someone else in the same round. Here
// a falls back to eager while it still lists 0 and 1 under its cooperative
// metadata; c's share waits for a's release.
func TestMixedWithGuard(t *testing.T) {
	h := mixedHarness(t, true)
	a := &gmember{client: "a", protos: kgoProtocols(nil, "cooperative-sticky")}
	h.round("consumer", []*gmember{a}, map[string][]int32{"a": {0, 1, 2, 3}})
	a.protos = kgoProtocols([]int32{0, 1, 2, 3}, "cooperative-sticky")
	c := &gmember{client: "c", protos: kgoProtocols(nil, "range")}
	got := h.mixedRound([]*gmember{a, c})
	if got["c"].protocol != "range" || got["a"].protocol != "cooperative-sticky" {
		t.Fatalf("told %+v", got)
	}
	// Cooperative-sticky keeps a's partitions this round; nothing moves.
	if len(got["a"].parts)+len(got["c"].parts) > 4 {
		t.Fatalf("%v", got)
	}
	for _, p := range got["c"].parts {
		if slices.Contains([]int32{0, 1, 2, 3}, p) && slices.Contains(got["a"].parts, p) {
			t.Fatalf("partition %d given twice", p)
		}
	}
	if len(got["c"].parts) != 0 {
		t.Fatalf("c got %v while a owns everything", got["c"].parts)
	}
	// a revokes two (cooperative) and re-joins: c gets them.
	a.protos = kgoProtocols(got["a"].parts, "cooperative-sticky")
	got = h.mixedRound([]*gmember{a, c})
	wantExclusiveComplete(t, got, 4)
	if len(got["c"].parts) != 2 {
		t.Fatalf("follow-up: %v", got)
	}
}
