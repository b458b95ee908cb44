package coordinator

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Guard tests use one topic "t". A member's JoinGroup lists protocols the
// way kgo does: owned partitions only in the cooperative-sticky metadata.

func subWith(owned []int32) []byte {
	var tps []assignor.TopicPartitions
	if len(owned) > 0 {
		tps = []assignor.TopicPartitions{{Topic: "t", Partitions: owned}}
	}
	s := assignor.NewSubscription([]string{"t"}, tps, -1, "", nil)
	return s.AppendTo(nil)
}

func asg(parts ...int32) []byte {
	a := assignor.Assignment{Version: 3}
	if len(parts) > 0 {
		a.Topics = []assignor.TopicPartitions{{Topic: "t", Partitions: parts}}
	}
	return a.AppendTo(nil)
}

func parts(t testing.TB, b []byte) []int32 {
	t.Helper()
	a, err := assignor.DecodeAssignment(b)
	if err != nil {
		t.Fatalf("assignment %x: %v", b, err)
	}
	var out []int32
	for _, tp := range a.Topics {
		out = append(out, tp.Partitions...)
	}
	slices.Sort(out)
	return out
}

// kgoProtocols: a member configured with names, owning owned.
func kgoProtocols(owned []int32, names ...string) []*pb.Protocol {
	var out []*pb.Protocol
	for _, n := range names {
		md := subWith(nil)
		if n == "cooperative-sticky" {
			md = subWith(owned)
		}
		out = append(out, &pb.Protocol{Name: n, Metadata: md})
	}
	return out
}

type gmember struct {
	client string
	id     string
	protos []*pb.Protocol
}

// guardHarness: a harness with no initial delay, members joining with v3.
func guardHarness(t *testing.T, mutate ...func(*Config)) *harness {
	return newHarness(t, append([]func(*Config){func(c *Config) { c.InitialRebalanceDelay = 0 }}, mutate...)...)
}

// round runs one complete rebalance: every member in ms (re)joins, the join
// phase completes, the leader syncs plan and then the others sync. It
// returns the partitions each member was answered.
func (h *harness) round(protocolType string, ms []*gmember, plan map[string][]int32) map[string][]int32 {
	h.t.Helper()
	// New members join first: once every known member has re-joined, the
	// join phase completes.
	order := make([]int, 0, len(ms))
	for i, m := range ms {
		if m.id == "" {
			order = append(order, i)
		}
	}
	for i, m := range ms {
		if m.id != "" {
			order = append(order, i)
		}
	}
	hds := make([]int, len(ms))
	for _, i := range order {
		m := ms[i]
		hds[i] = h.join(&pb.JoinGroupRequest{ClientId: m.client, MemberId: m.id, ApiVersion: 3, ProtocolType: protocolType, Protocols: m.protos})
	}
	h.advance(0)
	var gen int32
	var leader string
	for i, hd := range hds {
		r := h.joinOK(hd)
		ms[i].id, gen, leader = r.MemberId, r.GenerationId, r.Leader
	}
	byClient := map[string]string{}
	for _, m := range ms {
		byClient[m.client] = m.id
	}
	var as []*pb.SyncGroupAssignment
	for client, ps := range plan {
		as = append(as, &pb.SyncGroupAssignment{MemberId: byClient[client], Assignment: asg(ps...)})
	}
	slices.SortFunc(as, func(a, b *pb.SyncGroupAssignment) int { return strings.Compare(a.MemberId, b.MemberId) })
	syncs := map[string]int{}
	syncs[leader] = h.sync(&pb.SyncGroupRequest{MemberId: leader, GenerationId: gen, Assignments: as})
	for _, m := range ms {
		if m.id != leader {
			syncs[m.id] = h.sync(&pb.SyncGroupRequest{MemberId: m.id, GenerationId: gen})
		}
	}
	h.wantStateOnly(Stable)
	out := map[string][]int32{}
	for _, m := range ms {
		r := answer[*pb.SyncGroupResponse](h, syncs[m.id])
		if r.ErrorCode != ErrNone {
			h.t.Fatalf("sync of %s: error %d", m.client, r.ErrorCode)
		}
		out[m.client] = parts(h.t, r.Assignment)
	}
	return out
}

func (h *harness) wantStateOnly(s State) {
	h.t.Helper()
	if h.g.State() != s {
		h.t.Fatalf("group is %v, want %v", h.g.State(), s)
	}
}

func wantParts(t testing.TB, what string, got, want []int32) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: partitions %v, want %v", what, got, want)
	}
}

// downgradeSetup forms a cooperative group of a and b (configured
// [cooperative-sticky, range]) owning 0,1 and 2,3, then c joins with
// [range] only: the group falls back to range and the leader (a) moves 3
// from b to c. It returns the members after that round and its answers.
func downgradeSetup(t *testing.T, h *harness, protocolType string) ([]*gmember, map[string][]int32) {
	t.Helper()
	a := &gmember{client: "a", protos: kgoProtocols(nil, "cooperative-sticky", "range")}
	b := &gmember{client: "b", protos: kgoProtocols(nil, "cooperative-sticky", "range")}
	got := h.round(protocolType, []*gmember{a, b}, map[string][]int32{"a": {0, 1}, "b": {2, 3}})
	wantParts(t, "a first", got["a"], []int32{0, 1})
	wantParts(t, "b first", got["b"], []int32{2, 3})
	if name := h.g.protocolNameOr(""); name != "cooperative-sticky" {
		t.Fatalf("selected %q", name)
	}
	a.protos = kgoProtocols([]int32{0, 1}, "cooperative-sticky", "range")
	b.protos = kgoProtocols([]int32{2, 3}, "cooperative-sticky", "range")
	c := &gmember{client: "c", protos: kgoProtocols(nil, "range")}
	ms := []*gmember{a, b, c}
	got = h.round(protocolType, ms, map[string][]int32{"a": {0, 1}, "b": {2}, "c": {3}})
	if name := h.g.protocolNameOr(""); name != "range" {
		t.Fatalf("selected %q", name)
	}
	return ms, got
}

func TestGuardWithholdsOwnedPartition(t *testing.T) {
	h := guardHarness(t)
	ms, got := downgradeSetup(t, h, "consumer")
	wantParts(t, "a", got["a"], []int32{0, 1})
	wantParts(t, "b", got["b"], []int32{2})
	wantParts(t, "c (3 still owned by b)", got["c"], nil)
	if s := h.g.GuardStats(); s.Withheld != 1 || s.FollowUps != 0 {
		t.Fatalf("stats %+v", s)
	}
	// DescribeGroups shows what c was given, not what the leader planned.
	for _, d := range h.g.Describe().GetMembers() {
		if d.GetMemberId() == ms[2].id && len(parts(t, d.GetAssignment())) != 0 {
			t.Fatalf("describe shows %v for c", parts(t, d.GetAssignment()))
		}
	}
	// The durable record carries the delivered assignment and asks a
	// coordinator that loads it to rebalance.
	recs := groupRecords(h.written)
	last := recs[len(recs)-1]
	if !last.GetRebalancePending() {
		t.Fatal("record with withheld partitions does not ask for a rebalance")
	}
	for _, m := range last.GetMembers() {
		if m.GetMemberId() == ms[2].id && len(parts(t, m.GetAssignment())) != 0 {
			t.Fatalf("record gives c %v", parts(t, m.GetAssignment()))
		}
	}
}

func TestGuardEvents(t *testing.T) {
	h := guardHarness(t)
	ms, _ := downgradeSetup(t, h, "consumer")
	if len(h.events) != 1 || h.events[0].Kind != EventWithheld || h.events[0].Count != 1 || !strings.Contains(h.events[0].Detail, "t-3") {
		t.Fatalf("events %+v", h.events)
	}
	h.heartbeat(ms[1].id, h.g.Generation())
	if len(h.events) != 2 || h.events[1].Kind != EventFollowUp {
		t.Fatalf("events %+v", h.events)
	}
}

// Release by heartbeat: b's first heartbeat after its SyncGroup answer
// starts the follow-up rebalance, in which c gets 3.
func TestGuardReleaseByHeartbeat(t *testing.T) {
	h := guardHarness(t)
	ms, _ := downgradeSetup(t, h, "consumer")
	a, b, c := ms[0], ms[1], ms[2]
	gen := h.g.Generation()
	if code := h.heartbeat(a.id, gen); code != ErrNone {
		t.Fatalf("heartbeat of a (not an owner): %d", code)
	}
	if code := h.heartbeat(c.id, gen); code != ErrNone {
		t.Fatalf("heartbeat of c: %d", code)
	}
	h.wantStateOnly(Stable)
	if code := h.heartbeat(b.id, gen); code != ErrRebalanceInProgress {
		t.Fatalf("heartbeat of b: %d, want REBALANCE_IN_PROGRESS", code)
	}
	h.wantStateOnly(PreparingRebalance)
	if s := h.g.GuardStats(); s.FollowUps != 1 {
		t.Fatalf("stats %+v", s)
	}
	// Downgraded to eager, everyone revoked before re-joining: nobody lists
	// anything, and 3 goes to c.
	for _, m := range ms {
		m.protos = kgoProtocols(nil, "cooperative-sticky", "range")
	}
	c.protos = kgoProtocols(nil, "range")
	got := h.round("consumer", ms, map[string][]int32{"a": {0, 1}, "b": {2}, "c": {3}})
	wantParts(t, "c after the follow-up", got["c"], []int32{3})
	if s := h.g.GuardStats(); s.Withheld != 1 || s.FollowUps != 1 {
		t.Fatalf("stats %+v", s)
	}
	if h.g.guardPending() {
		t.Fatal("guard still pending")
	}
}

// A heartbeat before the owner's own SyncGroup answer (the Java client
// heartbeats while it waits for it) and an offset commit (kgo commits from
// inside its revoke callback) are not releases.
func TestGuardNoReleaseBeforeSyncAnswerOrByCommit(t *testing.T) {
	h := guardHarness(t)
	a := &gmember{client: "a", protos: kgoProtocols(nil, "cooperative-sticky", "range")}
	b := &gmember{client: "b", protos: kgoProtocols(nil, "cooperative-sticky", "range")}
	h.round("consumer", []*gmember{a, b}, map[string][]int32{"a": {0, 1}, "b": {2, 3}})
	a.protos = kgoProtocols([]int32{0, 1}, "cooperative-sticky", "range")
	b.protos = kgoProtocols([]int32{2, 3}, "cooperative-sticky", "range")
	c := &gmember{client: "c", protos: kgoProtocols(nil, "range")}
	hds := []int{}
	for _, m := range []*gmember{c, a, b} {
		hds = append(hds, h.join(&pb.JoinGroupRequest{ClientId: m.client, MemberId: m.id, ApiVersion: 3, ProtocolType: "consumer", Protocols: m.protos}))
	}
	for i, m := range []*gmember{c, a, b} {
		m.id = h.joinOK(hds[i]).MemberId
	}
	gen := h.g.Generation()
	// b heartbeats while it waits for its answer.
	if code := h.heartbeat(b.id, gen); code != ErrNone {
		t.Fatalf("heartbeat in CompletingRebalance: %d", code)
	}
	sa := h.sync(&pb.SyncGroupRequest{MemberId: a.id, GenerationId: gen, Assignments: []*pb.SyncGroupAssignment{
		{MemberId: a.id, Assignment: asg(0, 1)}, {MemberId: b.id, Assignment: asg(2)}, {MemberId: c.id, Assignment: asg(3)}}})
	wantParts(t, "a", parts(t, answer[*pb.SyncGroupResponse](h, sa).Assignment), []int32{0, 1})
	h.wantStateOnly(Stable)
	// b has not been answered yet (it has not sent SyncGroup): its
	// heartbeat does not release.
	if code := h.heartbeat(b.id, gen); code != ErrNone {
		t.Fatalf("heartbeat before b's answer: %d", code)
	}
	h.wantStateOnly(Stable)
	sc := h.sync(&pb.SyncGroupRequest{MemberId: c.id, GenerationId: gen})
	wantParts(t, "c", parts(t, answer[*pb.SyncGroupResponse](h, sc).Assignment), nil)
	sb := h.sync(&pb.SyncGroupRequest{MemberId: b.id, GenerationId: gen})
	wantParts(t, "b", parts(t, answer[*pb.SyncGroupResponse](h, sb).Assignment), []int32{2})
	// A commit from b (from inside its revoke callback) is no release.
	if code := h.commitCode(h.commit(&pb.OffsetCommitRequest{MemberId: b.id, GenerationId: gen, Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 3, Offset: 7}}}}}), "t", 3); code != ErrNone {
		t.Fatalf("commit: %d", code)
	}
	h.wantStateOnly(Stable)
	if s := h.g.GuardStats(); s.FollowUps != 0 {
		t.Fatalf("stats %+v", s)
	}
	if code := h.heartbeat(b.id, gen); code != ErrRebalanceInProgress {
		t.Fatalf("heartbeat after b's answer: %d", code)
	}
	h.wantStateOnly(PreparingRebalance)
}

// Release by JoinGroup: b re-joins after its answer; the follow-up starts
// and b's JoinGroup waits in it.
func TestGuardReleaseByJoin(t *testing.T) {
	h := guardHarness(t)
	ms, _ := downgradeSetup(t, h, "consumer")
	b := ms[1]
	hd := h.join(&pb.JoinGroupRequest{ClientId: "b", MemberId: b.id, ApiVersion: 3, ProtocolType: "consumer", Protocols: kgoProtocols(nil, "cooperative-sticky", "range")})
	h.wantStateOnly(PreparingRebalance)
	h.wantParked(hd)
	if s := h.g.GuardStats(); s.FollowUps != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A follower's unchanged JoinGroup in a Stable group normally gets the
// current generation back; from a blocking owner it is a release and starts
// the follow-up.
func TestGuardReleaseByUnchangedJoin(t *testing.T) {
	h := guardHarness(t)
	ms, _ := downgradeSetup(t, h, "consumer")
	b := ms[1]
	hd := h.join(&pb.JoinGroupRequest{ClientId: "b", MemberId: b.id, ApiVersion: 3, ProtocolType: "consumer", Protocols: b.protos})
	h.wantStateOnly(PreparingRebalance)
	h.wantParked(hd)
}

// Release by LeaveGroup and by session expiry: the removal's own rebalance
// hands the partition over.
func TestGuardReleaseByLeaveAndExpiry(t *testing.T) {
	for _, how := range []string{"leave", "expiry"} {
		t.Run(how, func(t *testing.T) {
			h := guardHarness(t)
			ms, _ := downgradeSetup(t, h, "consumer")
			a, b, c := ms[0], ms[1], ms[2]
			switch how {
			case "leave":
				if r := h.leave(&pb.MemberIdentity{MemberId: b.id}); r.GetMembers()[0].GetErrorCode() != ErrNone {
					t.Fatalf("leave %v", r)
				}
			case "expiry":
				for range 3 {
					h.advance(4 * time.Second)
					h.heartbeat(a.id, h.g.Generation())
					h.heartbeat(c.id, h.g.Generation())
				}
			}
			h.wantStateOnly(PreparingRebalance)
			if h.g.members.get(b.id) != nil {
				t.Fatal("b still a member")
			}
			if h.g.guardPending() {
				t.Fatal("guard pending after the owner's removal")
			}
			a.protos = kgoProtocols(nil, "range")
			c.protos = kgoProtocols(nil, "range")
			got := h.round("consumer", []*gmember{a, c}, map[string][]int32{"a": {0, 1}, "c": {2, 3}})
			wantParts(t, "c", got["c"], []int32{2, 3})
		})
	}
}

// No mutual wait: a and b swap partitions. Both are answered at once
// (without the other's partition), and the follow-up starts when both have
// released, whatever the order.
func TestGuardSwapNoMutualWait(t *testing.T) {
	h := guardHarness(t)
	a := &gmember{client: "a", protos: kgoProtocols(nil, "cooperative-sticky", "range")}
	b := &gmember{client: "b", protos: kgoProtocols(nil, "cooperative-sticky", "range")}
	h.round("consumer", []*gmember{a, b}, map[string][]int32{"a": {0, 1}, "b": {2, 3}})
	a.protos = kgoProtocols([]int32{0, 1}, "cooperative-sticky", "range")
	b.protos = kgoProtocols([]int32{2, 3}, "cooperative-sticky", "range")
	got := h.round("consumer", []*gmember{a, b}, map[string][]int32{"a": {0, 2}, "b": {1, 3}})
	wantParts(t, "a", got["a"], []int32{0})
	wantParts(t, "b", got["b"], []int32{3})
	if s := h.g.GuardStats(); s.Withheld != 2 {
		t.Fatalf("stats %+v", s)
	}
	gen := h.g.Generation()
	if code := h.heartbeat(b.id, gen); code != ErrNone {
		t.Fatalf("first release: %d", code)
	}
	if code := h.heartbeat(a.id, gen); code != ErrRebalanceInProgress {
		t.Fatalf("second release: %d", code)
	}
	a.protos = kgoProtocols([]int32{0}, "cooperative-sticky", "range")
	b.protos = kgoProtocols([]int32{3}, "cooperative-sticky", "range")
	got = h.round("consumer", []*gmember{a, b}, map[string][]int32{"a": {0, 2}, "b": {1, 3}})
	wantParts(t, "a after", got["a"], []int32{0, 2})
	wantParts(t, "b after", got["b"], []int32{1, 3})
}

// A claim outside what the member was last answered is stale (it released
// the rest when it acknowledged that answer) and withholds nothing.
func TestGuardIgnoresStaleClaims(t *testing.T) {
	h := guardHarness(t)
	ms, _ := downgradeSetup(t, h, "consumer")
	h.heartbeat(ms[1].id, h.g.Generation()) // release: follow-up
	// b still claims 3, which it was not answered last time.
	ms[1].protos = kgoProtocols([]int32{2, 3}, "cooperative-sticky", "range")
	got := h.round("consumer", ms, map[string][]int32{"a": {0, 1}, "b": {2}, "c": {3}})
	wantParts(t, "c", got["c"], []int32{3})
}

// When the leader gives an owned partition to its owner and to another
// member, the owner keeps it and nobody is waited for.
func TestGuardDoubleAssignmentKeepsOwner(t *testing.T) {
	h := guardHarness(t)
	a := &gmember{client: "a", protos: kgoProtocols(nil, "cooperative-sticky")}
	b := &gmember{client: "b", protos: kgoProtocols(nil, "cooperative-sticky")}
	h.round("consumer", []*gmember{a, b}, map[string][]int32{"a": {0, 1}, "b": {2, 3}})
	a.protos = kgoProtocols([]int32{0, 1}, "cooperative-sticky")
	b.protos = kgoProtocols([]int32{2, 3}, "cooperative-sticky")
	got := h.round("consumer", []*gmember{a, b}, map[string][]int32{"a": {0, 1, 2}, "b": {2, 3}})
	wantParts(t, "a", got["a"], []int32{0, 1})
	wantParts(t, "b", got["b"], []int32{2, 3})
	if h.g.guardPending() {
		t.Fatal("follow-up pending for a partition its owner keeps")
	}
}

// Eager members list nothing: the leader's bytes go out untouched.
func TestGuardEagerGroupUntouched(t *testing.T) {
	h := guardHarness(t)
	a := &gmember{client: "a", protos: kgoProtocols(nil, "range")}
	b := &gmember{client: "b", protos: kgoProtocols(nil, "range")}
	h.round("consumer", []*gmember{a, b}, map[string][]int32{"a": {0, 1}, "b": {2, 3}})
	got := h.round("consumer", []*gmember{a, b}, map[string][]int32{"a": {2, 3}, "b": {0, 1}})
	wantParts(t, "a", got["a"], []int32{2, 3})
	if s := h.g.GuardStats(); s != (GuardStats{}) {
		t.Fatalf("stats %+v", s)
	}
}

// Groups of other protocol types, and the guard switched off, hand the
// leader's assignment out as it is.
func TestGuardUntouched(t *testing.T) {
	for _, tc := range []struct {
		name, protocolType string
		guard              bool
	}{{"connect group", "connect", true}, {"guard off", "consumer", false}} {
		t.Run(tc.name, func(t *testing.T) {
			h := guardHarness(t, func(c *Config) { c.OwnershipGuard = tc.guard })
			_, got := downgradeSetup(t, h, tc.protocolType)
			wantParts(t, "c", got["c"], []int32{3})
			if s := h.g.GuardStats(); s != (GuardStats{}) {
				t.Fatalf("stats %+v", s)
			}
			if last := groupRecords(h.written); last[len(last)-1].GetRebalancePending() {
				t.Fatal("record asks for a rebalance")
			}
		})
	}
}

// Leader failover in the middle of a guarded round: the guard's state is not
// replicated but rebuilt. The record written with the withheld answer asks
// the coordinator that loads it to rebalance at once; in that rebalance every
// member lists what it owns again and the guard decides afresh.
func TestGuardFailoverRebuilds(t *testing.T) {
	h := guardHarness(t)
	ms, _ := downgradeSetup(t, h, "consumer")
	recs := groupRecords(h.durable)
	rec := recs[len(recs)-1]

	h2 := guardHarness(t)
	h2.g = Restore(&h2.cfg, rec, nil, h2.now)
	desc := h2.g.Describe()
	for _, d := range desc.GetMembers() {
		if d.GetMemberId() == ms[2].id && len(parts(t, d.GetAssignment())) != 0 {
			t.Fatalf("restored describe gives c %v", parts(t, d.GetAssignment()))
		}
	}
	h2.g.Start(h2.now, &h2.fx)
	h2.apply()
	h2.wantStateOnly(PreparingRebalance)
	// b had not finished revoking 3 when the coordinator changed: it still
	// lists it, and c does not get it yet.
	a, b, c := ms[0], ms[1], ms[2]
	a.protos = kgoProtocols([]int32{0, 1}, "cooperative-sticky", "range")
	b.protos = kgoProtocols([]int32{2, 3}, "cooperative-sticky", "range")
	got := h2.round("consumer", ms, map[string][]int32{"a": {0, 1}, "b": {2}, "c": {3}})
	wantParts(t, "c while b owns 3", got["c"], nil)
	if code := h2.heartbeat(b.id, h2.g.Generation()); code != ErrRebalanceInProgress {
		t.Fatalf("release after failover: %d", code)
	}
	b.protos = kgoProtocols([]int32{2}, "cooperative-sticky", "range")
	got = h2.round("consumer", ms, map[string][]int32{"a": {0, 1}, "b": {2}, "c": {3}})
	wantParts(t, "c", got["c"], []int32{3})
	_ = c
}

// The same failover when b had released before the coordinator changed:
// the rebalance at load gives c its partition at once.
func TestGuardFailoverAfterRelease(t *testing.T) {
	h := guardHarness(t)
	ms, _ := downgradeSetup(t, h, "consumer")
	recs := groupRecords(h.durable)
	h2 := guardHarness(t)
	h2.g = Restore(&h2.cfg, recs[len(recs)-1], nil, h2.now)
	h2.g.Start(h2.now, &h2.fx)
	h2.apply()
	for _, m := range ms {
		m.protos = kgoProtocols(nil, "cooperative-sticky", "range")
	}
	ms[2].protos = kgoProtocols(nil, "range")
	got := h2.round("consumer", ms, map[string][]int32{"a": {0, 1}, "b": {2}, "c": {3}})
	wantParts(t, "c", got["c"], []int32{3})
	if rec := groupRecords(h2.written); rec[len(rec)-1].GetRebalancePending() {
		t.Fatal("still pending")
	}
}

// The withholding event names at most 16 partitions and counts the rest.
func TestGuardEventDetailBounded(t *testing.T) {
	h := guardHarness(t)
	all := make([]int32, 20)
	for i := range all {
		all[i] = int32(i)
	}
	a := &gmember{client: "a", protos: kgoProtocols(nil, "cooperative-sticky", "range")}
	h.round("consumer", []*gmember{a}, map[string][]int32{"a": all})
	a.protos = kgoProtocols(all, "cooperative-sticky", "range")
	c := &gmember{client: "c", protos: kgoProtocols(nil, "range")}
	got := h.round("consumer", []*gmember{a, c}, map[string][]int32{"a": nil, "c": all})
	wantParts(t, "c", got["c"], nil)
	ev := h.events[len(h.events)-1]
	if ev.Kind != EventWithheld || ev.Count != 20 || strings.Count(ev.Detail, "not given") != 16 || !strings.HasSuffix(ev.Detail, "and 4 more") {
		t.Fatalf("event %+v", ev)
	}
}
