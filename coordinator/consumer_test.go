package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestConsumerErrorCodesMatchKerr(t *testing.T) {
	for code, want := range map[int32]*kerr.Error{
		ErrInvalidRequest:           kerr.InvalidRequest,
		ErrFencedMemberEpoch:        kerr.FencedMemberEpoch,
		ErrUnreleasedInstanceID:     kerr.UnreleasedInstanceID,
		ErrUnsupportedAssignor:      kerr.UnsupportedAssignor,
		ErrStaleMemberEpoch:         kerr.StaleMemberEpoch,
		ErrInvalidRegularExpression: kerr.InvalidRegularExpression,
	} {
		if int32(want.Code) != code {
			t.Errorf("%s: code %d, kerr says %d", want.Message, code, want.Code)
		}
	}
}

// TestConsumerHeartbeatErrors: each request is sent to a group in which
// "a" (dynamic, epoch 1 then 2 after "s" joined) and "s" (static, instance
// "i1") are members; version 1 unless said.
func TestConsumerHeartbeatErrors(t *testing.T) {
	mod := func(f func(r *ConsumerHeartbeatRequest)) func() *ConsumerHeartbeatRequest {
		return func() *ConsumerHeartbeatRequest {
			r := cgJoin("new", "t")
			f(r)
			return r
		}
	}
	cases := []struct {
		name string
		req  func() *ConsumerHeartbeatRequest
		code int32
	}{
		{"v1 empty member id", mod(func(r *ConsumerHeartbeatRequest) { r.MemberID = "" }), ErrInvalidRequest},
		{"blank member id", mod(func(r *ConsumerHeartbeatRequest) { r.MemberID = "  " }), ErrInvalidRequest},
		{"v0 join without id is fine", mod(func(r *ConsumerHeartbeatRequest) { r.Version, r.MemberID, r.GeneratedMemberID = 0, "", "gen" }), ErrNone},
		{"v0 heartbeat without id", mod(func(r *ConsumerHeartbeatRequest) { r.Version, r.MemberID, r.MemberEpoch = 0, "", 1 }), ErrInvalidRequest},
		{"blank group", mod(func(r *ConsumerHeartbeatRequest) { r.GroupID = " " }), ErrInvalidRequest},
		{"blank instance", mod(func(r *ConsumerHeartbeatRequest) { r.InstanceID = strp("") }), ErrInvalidRequest},
		{"blank rack", mod(func(r *ConsumerHeartbeatRequest) { r.RackID = strp("") }), ErrInvalidRequest},
		{"join without rebalance timeout", mod(func(r *ConsumerHeartbeatRequest) { r.RebalanceTimeoutMs = -1 }), ErrInvalidRequest},
		{"join with null owned", mod(func(r *ConsumerHeartbeatRequest) { r.Topics = nil }), ErrInvalidRequest},
		{"join owning partitions", mod(func(r *ConsumerHeartbeatRequest) { r.Topics = tps("t", 0) }), ErrInvalidRequest},
		{"join without subscription", mod(func(r *ConsumerHeartbeatRequest) { r.SubscribedTopicNames = nil }), ErrInvalidRequest},
		{"join to nothing is fine", mod(func(r *ConsumerHeartbeatRequest) { r.SubscribedTopicNames = []string{} }), ErrNone},
		{"dynamic member's -2 without instance", mod(func(r *ConsumerHeartbeatRequest) { r.MemberID, r.MemberEpoch = "a", -2 }), ErrInvalidRequest},
		{"epoch -3", mod(func(r *ConsumerHeartbeatRequest) { r.MemberEpoch = -3 }), ErrInvalidRequest},
		{"unknown assignor", mod(func(r *ConsumerHeartbeatRequest) { r.ServerAssignor = strp("sticky") }), ErrUnsupportedAssignor},
		{"range is known", mod(func(r *ConsumerHeartbeatRequest) { r.ServerAssignor = strp("range") }), ErrNone},
		{"invalid regex", mod(func(r *ConsumerHeartbeatRequest) { r.SubscribedTopicRegex = strp("a(") }), ErrInvalidRegularExpression},
		{"unknown member", func() *ConsumerHeartbeatRequest { return cgBeat("nobody", 2, nil) }, ErrUnknownMemberID},
		{"epoch ahead", func() *ConsumerHeartbeatRequest { return cgBeat("a", 3, nil) }, ErrFencedMemberEpoch},
		{"epoch behind, owned unknown", func() *ConsumerHeartbeatRequest { return cgBeat("a", 1, nil) }, ErrFencedMemberEpoch},
		{"previous epoch, owning a subset", func() *ConsumerHeartbeatRequest { return cgBeat("a", 1, tps("t", 0)) }, ErrNone},
		{"previous epoch, owning more", func() *ConsumerHeartbeatRequest { return cgBeat("a", 1, tps("t", 0, 1, 2, 3)) }, ErrFencedMemberEpoch},
		{"static unknown instance", func() *ConsumerHeartbeatRequest {
			r := cgBeat("s", 2, nil)
			r.InstanceID = strp("i9")
			return r
		}, ErrUnknownMemberID},
		{"static instance held by another id", func() *ConsumerHeartbeatRequest {
			r := cgBeat("a", 2, nil)
			r.InstanceID = strp("i1")
			return r
		}, ErrFencedInstanceID},
		{"static join while the holder is active", mod(func(r *ConsumerHeartbeatRequest) { r.InstanceID = strp("i1") }), ErrUnreleasedInstanceID},
		{"join changing a member's instance id", mod(func(r *ConsumerHeartbeatRequest) { r.MemberID, r.InstanceID = "a", strp("i2") }), ErrInvalidRequest},
		{"leave of an unknown member", func() *ConsumerHeartbeatRequest { return cgBeat("nobody", -1, nil) }, ErrUnknownMemberID},
		{"static leave by another id", func() *ConsumerHeartbeatRequest {
			r := cgBeat("a", -2, nil)
			r.InstanceID = strp("i1")
			return r
		}, ErrFencedInstanceID},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newCGHarness(t, map[string]int32{"t": 4})
			wantResp(t, h.hb(cgJoin("a", "t")), ErrNone, 1, tps("t", 0, 1, 2, 3))
			s := cgJoin("s", "t")
			s.InstanceID = strp("i1")
			wantResp(t, h.hb(s), ErrNone, 2, tps())
			// a moves to epoch 2 keeping t-0,1 (it reports having given up 2,3).
			wantResp(t, h.hb(cgBeat("a", 1, tps("t", 0, 1))), ErrNone, 2, tps("t", 0, 1))
			epoch := h.g.Epoch()
			if got := h.hb(c.req()); got.ErrorCode != c.code {
				t.Fatalf("error %d (%s), want %d", got.ErrorCode, got.ErrorMessage, c.code)
			}
			if c.code != ErrNone && h.g.Epoch() != epoch {
				t.Fatalf("an error bumped the epoch")
			}
		})
	}
	t.Run("heartbeat to a group that does not exist", func(t *testing.T) {
		h := newCGHarness(t, nil)
		wantResp(t, h.hb(cgBeat("a", 1, nil)), ErrGroupIDNotFound, 0, nil)
		wantResp(t, h.hb(cgBeat("a", -1, nil)), ErrGroupIDNotFound, 0, nil)
	})
	t.Run("group max size", func(t *testing.T) {
		h := newCGHarness(t, nil)
		h.cfg.MaxSize = 1
		wantResp(t, h.hb(cgJoin("a", "t")), ErrNone, 1, tps())
		wantResp(t, h.hb(cgJoin("b", "t")), ErrGroupMaxSizeReached, 0, nil)
		wantResp(t, h.hb(cgJoin("a", "t")), ErrNone, 1, tps()) // a known member may rejoin
	})
}

// The reconciliation of the reference's worked trace: a partition reaches
// its new owner only after the previous owner reported it gone.
func TestConsumerReconciliation(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"foo": 6, "bar": 3})
	wantResp(t, h.hb(cgJoin("m1", "foo", "bar")), ErrNone, 1, tps("bar", 0, 1, 2, "foo", 0, 1, 2, 3, 4, 5))
	wantResp(t, h.hb(cgJoin("m2", "foo", "bar")), ErrNone, 2, tps())
	if m2 := h.member("m2"); m2.State != MemberUnreleasedPartitions {
		t.Fatalf("m2 %v, want UNRELEASED_PARTITIONS", m2.State)
	}
	// m1 at epoch 1 must first give up what moves to m2; it stays at epoch 1.
	h.now = h.now.Add(time.Second)
	r := h.hb(cgBeat("m1", 1, tps("bar", 0, 1, 2, "foo", 0, 1, 2, 3, 4, 5)))
	keep := h.member("m1").Assigned
	wantResp(t, r, ErrNone, 1, keep)
	if countParts(keep) != 5 || h.member("m1").State != MemberUnrevokedPartitions {
		t.Fatalf("m1 keeps %s in %v", fmtParts(keep), h.member("m1").State)
	}
	if _, armed := h.timers[cgTimerKey{ConsumerTimerRebalance, "m1"}]; !armed {
		t.Fatal("no rebalance timer while m1 revokes")
	}
	// Duplicate full heartbeats get identical answers while revoking and
	// while waiting for partitions.
	fullM1 := cgBeat("m1", 1, tps("bar", 0, 1, 2, "foo", 0, 1, 2, 3, 4, 5))
	fullM1.RebalanceTimeoutMs, fullM1.SubscribedTopicNames = 30000, []string{"foo", "bar"}
	fullM2 := cgBeat("m2", 2, tps())
	fullM2.RebalanceTimeoutMs, fullM2.SubscribedTopicNames = 30000, []string{"bar", "foo"}
	for range 2 {
		wantResp(t, h.hb(fullM1), ErrNone, 1, keep)
		wantResp(t, h.hb(fullM2), ErrNone, 2, tps())
	}
	if h.g.Epoch() != 2 {
		t.Fatalf("unchanged full heartbeats bumped the epoch to %d", h.g.Epoch())
	}
	// m2 heartbeats: still nothing, everything it targets is held by m1.
	wantResp(t, h.hb(cgBeat("m2", 2, tps())), ErrNone, 2, nil)
	// A keepalive from m1 (owned unchanged) does not finish the revocation.
	wantResp(t, h.hb(cgBeat("m1", 1, nil)), ErrNone, 1, nil)
	// m1 reports having dropped the revoked partitions: epoch 2, stable.
	wantResp(t, h.hb(cgBeat("m1", 1, keep)), ErrNone, 2, nil)
	if m1 := h.member("m1"); m1.State != MemberStable || len(m1.PendingRevocation) != 0 {
		t.Fatalf("m1 %+v", m1)
	}
	if _, armed := h.timers[cgTimerKey{ConsumerTimerRebalance, "m1"}]; armed {
		t.Fatal("rebalance timer still armed")
	}
	target := h.member("m2").Target
	wantResp(t, h.hb(cgBeat("m2", 2, tps())), ErrNone, 2, target)
	if h.g.State() != "Stable" || countParts(target) != 4 {
		t.Fatalf("group %s, m2 target %s", h.g.State(), fmtParts(target))
	}
	// Duplicate full heartbeats get identical answers.
	full := cgBeat("m2", 2, target)
	full.RebalanceTimeoutMs, full.SubscribedTopicNames = 30000, []string{"foo", "bar"}
	first := h.hb(full)
	wantResp(t, first, ErrNone, 2, target)
	wantResp(t, h.hb(full), ErrNone, 2, target)
}

func TestConsumerSessionTimeout(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"t": 4})
	h.hb(cgJoin("a", "t"))
	h.hb(cgJoin("b", "t"))
	h.hb(cgBeat("a", 1, tps("t", 0, 1)))
	h.hb(cgBeat("b", 2, tps()))
	// a keeps heartbeating, b falls silent; b's session ends at 45s.
	var r ConsumerHeartbeatResponse
	for range 9 {
		h.advance(5 * time.Second)
		r = h.hb(cgBeat("a", 2, nil))
	}
	if len(h.removed) != 1 || h.removed[0] != "b" || h.now.Sub(cgT0) != 45*time.Second {
		t.Fatalf("removed %v at %v, want [b] at 45s", h.removed, h.now.Sub(cgT0))
	}
	wantResp(t, r, ErrNone, 3, tps("t", 0, 1, 2, 3))
	wantResp(t, h.hb(cgBeat("b", 2, tps())), ErrUnknownMemberID, 0, nil)
	// A stale session fire (the member heartbeated since) is re-armed.
	var fx ConsumerEffects
	if h.g.OnTimer(ConsumerTimerSession, "a", h.now, &fx) || len(fx.Timers) != 1 || fx.Timers[0].After != 45*time.Second {
		t.Fatalf("stale fire: %+v", fx)
	}
}

func TestConsumerRebalanceTimeoutFences(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"t": 4})
	a := cgJoin("a", "t")
	a.RebalanceTimeoutMs = 10000
	h.hb(a)
	h.hb(cgJoin("b", "t"))
	h.hb(cgBeat("a", 1, tps("t", 0, 1, 2, 3))) // revoking t-2,3 (or two others)
	// a heartbeats but never revokes; its rebalance timeout ends at 10s.
	for range 2 {
		h.advance(4 * time.Second)
		h.hb(cgBeat("a", 1, tps("t", 0, 1, 2, 3)))
		h.hb(cgBeat("b", 2, tps()))
	}
	h.advance(4 * time.Second)
	if len(h.removed) != 1 || h.removed[0] != "a" {
		t.Fatalf("removed %v", h.removed)
	}
	wantResp(t, h.hb(cgBeat("a", 1, tps("t", 0, 1))), ErrUnknownMemberID, 0, nil)
	wantResp(t, h.hb(cgBeat("b", 2, tps())), ErrNone, 3, tps("t", 0, 1, 2, 3))
}

func TestConsumerStaticMembership(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"t": 4})
	join := func(id string) *ConsumerHeartbeatRequest {
		r := cgJoin(id, "t")
		r.InstanceID = strp("i-" + id[:1])
		return r
	}
	h.hb(join("a1"))
	h.hb(join("b1"))
	h.hb(cgBeat("a1", 1, tps("t", 0, 1)))
	h.hb(cgBeat("b1", 2, tps()))
	aHas, epoch := h.member("a1").Assigned, h.g.Epoch()
	// a1 restarts: leaves with -2, keeps its seat and partitions.
	leave := cgBeat("a1", 2, nil)
	leave.MemberEpoch, leave.InstanceID = EpochStaticLeave, strp("i-a")
	wantResp(t, h.hb(leave), ErrNone, EpochStaticLeave, nil)
	if h.g.Epoch() != epoch || h.member("a1").MemberEpoch != EpochStaticLeave {
		t.Fatalf("static leave bumped or lost the member")
	}
	// b1 gets nothing of a1's meanwhile.
	h.advance(10 * time.Second)
	wantResp(t, h.hb(cgBeat("b1", 2, nil)), ErrNone, 2, nil)
	// a2 takes instance i-a: same partitions, no epoch bump.
	wantResp(t, h.hb(join("a2")), ErrNone, epoch, aHas)
	if h.g.Epoch() != epoch {
		t.Fatalf("same-subscription static rejoin bumped the epoch to %d", h.g.Epoch())
	}
	wantResp(t, h.hb(cgBeat("a1", 2, nil)), ErrUnknownMemberID, 0, nil)
	// A static member that does not come back within its session is removed.
	leave = cgBeat("a2", epoch, nil)
	leave.MemberEpoch, leave.InstanceID = EpochStaticLeave, strp("i-a")
	h.hb(leave)
	for range 10 {
		h.advance(5 * time.Second)
		h.hb(cgBeat("b1", h.member("b1").MemberEpoch, tps("t", 0, 1, 2, 3)))
	}
	if len(h.removed) != 1 || h.removed[0] != "a2" {
		t.Fatalf("removed %v", h.removed)
	}
	if b := h.member("b1"); countParts(b.Assigned) != 4 {
		t.Fatalf("b1 holds %s", fmtParts(b.Assigned))
	}
	// The holder's own epoch-0 rejoin is handled in place (apache/kafka#23542).
	r := cgJoin("b1", "t")
	r.InstanceID = strp("i-b")
	wantResp(t, h.hb(r), ErrNone, h.g.Epoch(), tps("t", 0, 1, 2, 3))
}

func TestConsumerRegexAndTopicChanges(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"orders": 2, "orders-dlq": 1, "x-orders": 1})
	j := cgJoin("a")
	j.SubscribedTopicNames, j.SubscribedTopicRegex = nil, strp("orders.*")
	// The join is answered before its regex is resolved: an epoch and
	// nothing yet (Kafka's answer to a brand-new regex).
	wantResp(t, h.hb(j), ErrNone, 1, tps())
	h.advance(0) // the resolution the new regex asked for
	// Full match: x-orders does not match.
	wantResp(t, h.hb(cgBeat("a", 1, tps())), ErrNone, 2, tps("orders", 0, 1, "orders-dlq", 0))
	h.setTopics(map[string]int32{"orders": 2, "orders-dlq": 1, "x-orders": 1, "unrelated": 5})
	h.advance(10 * time.Second) // a resolution, 10 s after the last one
	if h.g.Epoch() != 2 || h.g.regex.runs != 2 {
		t.Fatalf("an unrelated topic: epoch %d after %d resolutions, want 2 after 2", h.g.Epoch(), h.g.regex.runs)
	}
	// Growth is seen at once; a new matching topic at the resolution the
	// catalog change asks for, 10 s after the last one.
	h.setTopics(map[string]int32{"orders": 3, "orders-dlq": 1, "orders-new": 1, "x-orders": 1})
	if h.g.Epoch() != 3 {
		t.Fatalf("growth: epoch %d, want 3", h.g.Epoch())
	}
	h.advance(9 * time.Second)
	if h.g.Epoch() != 3 {
		t.Fatalf("a resolution within 10 s of the last: epoch %d", h.g.Epoch())
	}
	h.advance(time.Second)
	if h.g.Epoch() != 4 {
		t.Fatalf("a new matching topic: epoch %d, want 4", h.g.Epoch())
	}
	wantResp(t, h.hb(cgBeat("a", 2, nil)), ErrNone, 4, tps("orders", 0, 1, 2, "orders-dlq", 0, "orders-new", 0))
	// Deleting a topic revokes it at once.
	h.setTopics(map[string]int32{"orders": 3, "orders-new": 1})
	r := h.hb(cgBeat("a", 4, tps("orders", 0, 1, 2, "orders-dlq", 0, "orders-new", 0)))
	wantResp(t, r, ErrNone, 4, tps("orders", 0, 1, 2, "orders-new", 0))
	wantResp(t, h.hb(cgBeat("a", 4, tps("orders", 0, 1, 2, "orders-new", 0))), ErrNone, 5, nil)
	// Switching to names drops the regex topics.
	b := cgBeat("a", 5, tps("orders", 0, 1, 2, "orders-new", 0))
	b.SubscribedTopicNames, b.SubscribedTopicRegex = []string{"orders"}, strp("")
	wantResp(t, h.hb(b), ErrNone, 5, tps("orders", 0, 1, 2))
}

func TestConsumerLeaveAndEmptyGroup(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"t": 2})
	h.hb(cgJoin("a", "t"))
	wantResp(t, h.hb(cgBeat("a", -1, nil)), ErrNone, -1, nil)
	if h.g.State() != "Empty" || h.g.Epoch() != 2 || h.g.AssignmentEpoch() != 2 || len(h.g.owners) != 0 {
		t.Fatalf("after the last leave: %s epoch %d/%d owners %v", h.g.State(), h.g.Epoch(), h.g.AssignmentEpoch(), h.g.owners)
	}
	wantResp(t, h.hb(cgJoin("b", "t")), ErrNone, 3, tps("t", 0, 1))
	if h.g.AssignorName() != "uniform" {
		t.Fatalf("assignor %s", h.g.AssignorName())
	}
	r := cgBeat("b", 3, nil)
	r.ServerAssignor = strp("range")
	h.hb(r)
	if h.g.AssignorName() != "range" || h.g.Epoch() != 4 {
		t.Fatalf("assignor %s epoch %d", h.g.AssignorName(), h.g.Epoch())
	}
}

func TestConsumerConfigValidate(t *testing.T) {
	if err := DefaultConsumerConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	bad := DefaultConsumerConfig()
	bad.HeartbeatInterval = bad.SessionTimeout
	bad.MaxSize = -1
	bad.Assignors = append(bad.Assignors, bad.Assignors[0])
	bad.RegexRefreshInterval = 5 * time.Second // below Kafka's 10 s
	err := bad.Validate()
	for _, want := range []string{"heartbeat interval", "max size", "listed twice", "regex refresh interval must be positive and at least 10s, got 5s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}

// With ServerAssignor "range" every member gets the same partition numbers
// of co-partitioned topics.
func TestConsumerRangeCoPartitions(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"a": 4, "b": 4})
	var epochs = map[string]int32{}
	for _, id := range []string{"m1", "m2"} {
		j := cgJoin(id, "a", "b")
		j.ServerAssignor = strp("range")
		epochs[id] = h.hb(j).MemberEpoch
	}
	for range 3 {
		for _, id := range []string{"m1", "m2"} {
			r := h.hb(cgBeat(id, epochs[id], h.member(id).Assigned))
			epochs[id] = r.MemberEpoch
		}
	}
	if h.g.State() != "Stable" || h.g.AssignorName() != "range" {
		t.Fatalf("group %s with %s", h.g.State(), h.g.AssignorName())
	}
	for id, want := range map[string]string{"m1": "a[0 1] b[0 1] ", "m2": "a[2 3] b[2 3] "} {
		if got := fmtParts(h.member(id).Assigned); got != want {
			t.Errorf("%s holds %s, want %s", id, got, want)
		}
	}
}

// franz-go leaves a static member with -2 but without its instance id:
// taken as that member's static leave (Kafka answers INVALID_REQUEST, so a
// kgo static member could not restart within its session), while a -2
// without an instance id from a dynamic member stays INVALID_REQUEST.
func TestConsumerStaticLeaveWithoutInstanceID(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"t": 2})
	static := cgJoin("a1", "t")
	static.InstanceID = strp("i-a")
	h.hb(static)
	h.hb(cgJoin("d", "t"))
	h.hb(cgBeat("a1", 1, tps("t", 0, 1)))
	h.hb(cgBeat("d", 2, tps()))
	h.hb(cgBeat("a1", 2, h.member("a1").Assigned))
	epoch, has := h.g.Epoch(), h.member("a1").Assigned
	wantResp(t, h.hb(cgBeat("d", EpochStaticLeave, nil)), ErrInvalidRequest, 0, nil)
	wantResp(t, h.hb(cgBeat("a1", EpochStaticLeave, nil)), ErrNone, EpochStaticLeave, nil)
	if h.g.Epoch() != epoch || h.member("a1").MemberEpoch != EpochStaticLeave {
		t.Fatalf("static leave without instance id: epoch %d, member epoch %d", h.g.Epoch(), h.member("a1").MemberEpoch)
	}
	// The restarted client takes its place back with the same partitions.
	again := cgJoin("a2", "t")
	again.InstanceID = strp("i-a")
	wantResp(t, h.hb(again), ErrNone, epoch, has)
}
