package actors

import (
	"bytes"
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

func startObserved(t *testing.T) (*Service, *Observer, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	obs := NewObserver(reg)
	system := actor.NewActorSystem(quietLogs())
	svc, err := Start(system, Options{Config: testConfig(), Store: raftfsm.NewMemoryStore(), Logger: quietLogger(), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		svc.Stop()
		system.Shutdown()
	})
	return svc, obs, reg
}

// The history records each generation with its cause, how long it took and
// who joined and left; the metrics count the rebalances and the group.
func TestObserverRecordsRebalances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc, obs, reg := startObserved(t)
		ids, gen := formGroup(t, svc, "g", 2)
		live, dead := ids[0], ids[1]
		for range 3 {
			time.Sleep(3 * time.Second)
			ask[*pb.HeartbeatResponse](t, svc, &pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: live})
		}
		time.Sleep(1*time.Second + time.Millisecond) // dead's 10 s session ends
		j := ask[*pb.JoinGroupResponse](t, svc, joinReq("g", "c0", live))
		if j.ErrorCode != coordinator.ErrNone || j.GenerationId != 2 {
			t.Fatalf("rejoin: %v", j)
		}
		s := ask[*pb.SyncGroupResponse](t, svc, &pb.SyncGroupRequest{GroupId: "g", GenerationId: 2, MemberId: live,
			Assignments: []*pb.SyncGroupAssignment{{MemberId: live, Assignment: []byte("x")}}})
		if s.ErrorCode != coordinator.ErrNone {
			t.Fatalf("sync: %v", s)
		}
		g, ok := obs.Group("g")
		if !ok {
			t.Fatal("no view of group g")
		}
		if g.State != "Stable" || g.Generation != 2 || len(g.Members) != 1 || g.Members[0].MemberID != live || g.Protocol != "range" {
			t.Fatalf("view: %+v", g)
		}
		if len(g.History) != 2 {
			t.Fatalf("history of %d entries, want 2: %+v", len(g.History), g.History)
		}
		first, second := g.History[0], g.History[1]
		if first.Generation != 1 || first.Cause != CauseJoin || len(first.Joined) != 2 || len(first.Left) != 0 {
			t.Fatalf("generation 1: %+v", first)
		}
		if second.Generation != 2 || second.Cause != CauseExpiry || len(second.Joined) != 0 || len(second.Left) != 1 || second.Left[0] != dead {
			t.Fatalf("generation 2: %+v", second)
		}
		// The first waited out the initial delay; the expiry came 1 ms
		// before live rejoined.
		if first.Duration() < 100*time.Millisecond || second.Duration() != time.Millisecond {
			t.Fatalf("durations %v and %v", first.Duration(), second.Duration())
		}
		if n := testutil.ToFloat64(obs.rebalances.WithLabelValues(CauseJoin)); n != 1 {
			t.Fatalf("join rebalances %v, want 1", n)
		}
		if n := testutil.ToFloat64(obs.rebalances.WithLabelValues(CauseExpiry)); n != 1 {
			t.Fatalf("expiry rebalances %v, want 1", n)
		}
		want := `
# HELP cohort_group_members Members of the groups this node coordinates.
# TYPE cohort_group_members gauge
cohort_group_members 1
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cohort_group_members"); err != nil {
			t.Fatal(err)
		}
		c := ask[*pb.OffsetCommitResponse](t, svc, &pb.OffsetCommitRequest{GroupId: "g", GenerationId: 2, MemberId: live,
			Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 5, CommitTimestampMs: -1}, {Partition: 1, Offset: 7, CommitTimestampMs: -1}}}}})
		if c.GetTopics()[0].GetPartitions()[0].GetErrorCode() != coordinator.ErrNone {
			t.Fatalf("commit: %v", c)
		}
		if n := testutil.ToFloat64(obs.commits); n != 2 {
			t.Fatalf("commits %v, want 2", n)
		}
	})
}

// syncAll sends every member's SyncGroup at once, the leader's with
// assignments (member id to encoded assignment), and checks each member
// gets its own.
func syncAll(t *testing.T, svc *Service, group string, gen int32, leader string, assignments map[string][]byte) {
	t.Helper()
	var wg sync.WaitGroup
	for id, want := range assignments {
		wg.Go(func() {
			req := &pb.SyncGroupRequest{GroupId: group, GenerationId: gen, MemberId: id}
			if id == leader {
				for m, a := range assignments {
					req.Assignments = append(req.Assignments, &pb.SyncGroupAssignment{MemberId: m, Assignment: a})
				}
			}
			if r := ask[*pb.SyncGroupResponse](t, svc, req); r.ErrorCode != coordinator.ErrNone || !bytes.Equal(r.Assignment, want) {
				t.Errorf("sync %s: %v", id, r)
			}
		})
	}
	wg.Wait()
}

// The view keeps no member list, yet Observer.Group lists the members with
// their assignments (it asks the group), and the history entry of the
// rebalance a leave caused has the right Joined, Left and Moved.
func TestObserverGroupListsMembersAfterLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc, obs, _ := startObserved(t)
		joins := joinAll(t, svc, "g", 3)
		clients := map[string]string{} // member id to client id
		ids := make([]string, len(joins))
		for i, j := range joins {
			if j == nil || j.ErrorCode != coordinator.ErrNone || j.GenerationId != 1 {
				t.Fatalf("join %d: %v", i, j)
			}
			ids[i], clients[j.MemberId] = j.MemberId, fmt.Sprintf("c%d", i)
		}
		leader := joins[0].Leader
		slices.Sort(ids)
		a, b, c := ids[0], ids[1], ids[2]
		syncAll(t, svc, "g", 1, leader, map[string][]byte{a: encodeAssignment(t, "t", 0), b: encodeAssignment(t, "t", 1), c: encodeAssignment(t, "t", 2)})
		if g, ok := obs.Group("g"); !ok || g.State != "Stable" || len(g.Members) != 3 || fmt.Sprint(g.Members[2].Assignment()) != "map[t:[2]]" {
			t.Fatalf("view after forming: %+v", g)
		}

		// c leaves; a and b join again and t/2 goes to a.
		lv := ask[*pb.LeaveGroupResponse](t, svc, &pb.LeaveGroupRequest{GroupId: "g", Members: []*pb.MemberIdentity{{MemberId: c}}})
		if lv.ErrorCode != coordinator.ErrNone {
			t.Fatalf("leave: %v", lv)
		}
		var wg sync.WaitGroup
		rejoins := map[string]*pb.JoinGroupResponse{}
		var mu sync.Mutex
		for _, id := range []string{a, b} {
			wg.Go(func() {
				r := ask[*pb.JoinGroupResponse](t, svc, joinReq("g", clients[id], id))
				mu.Lock()
				rejoins[id] = r
				mu.Unlock()
			})
		}
		wg.Wait()
		if r := rejoins[a]; r.ErrorCode != coordinator.ErrNone || r.GenerationId != 2 {
			t.Fatalf("rejoin: %v", r)
		}
		syncAll(t, svc, "g", 2, rejoins[a].Leader, map[string][]byte{a: encodeAssignment(t, "t", 2, 0), b: encodeAssignment(t, "t", 1)})

		g, ok := obs.Group("g")
		if !ok || g.State != "Stable" || g.Generation != 2 || g.MemberCount != 2 || len(g.Members) != 2 {
			t.Fatalf("view after the leave: %+v", g)
		}
		for i, want := range []struct{ id, assignment string }{{a, "map[t:[0 2]]"}, {b, "map[t:[1]]"}} {
			m := g.Members[i]
			if m.MemberID != want.id || m.ClientID != clients[want.id] || fmt.Sprint(m.Assignment()) != want.assignment {
				t.Fatalf("member %d: %+v with %v, want %s (%s) with %s", i, m, m.Assignment(), want.id, clients[want.id], want.assignment)
			}
		}
		if len(g.History) != 2 {
			t.Fatalf("history of %d entries, want 2: %+v", len(g.History), g.History)
		}
		if first := g.History[0]; first.Cause != CauseJoin || !slices.Equal(first.Joined, ids) || first.Left != nil ||
			!slices.Equal(first.Moved, []Move{{"t", 0, "", a}, {"t", 1, "", b}, {"t", 2, "", c}}) {
			t.Fatalf("generation 1: %+v", first)
		}
		last := g.History[1]
		if last.Generation != 2 || last.Cause != CauseLeave || last.State != "Stable" || last.Joined != nil || !slices.Equal(last.Left, []string{c}) ||
			!slices.Equal(last.Moved, []Move{{"t", 2, c, a}}) {
			t.Fatalf("generation 2: %+v", last)
		}

		// The group list does not describe the members; it counts them.
		all := obs.Groups()
		if len(all) != 1 || all[0].ID != "g" || all[0].MemberCount != 2 || all[0].Members != nil || len(all[0].History) != 2 {
			t.Fatalf("groups: %+v", all)
		}
		if _, ok := obs.Group("nope"); ok {
			t.Fatal("a view of a group never seen")
		}
	})
}

func TestMovesAndMembershipDiff(t *testing.T) {
	prev := []memberAssignment{
		{id: "a", assignment: encodeAssignment(t, "t", 0, 1)},
		{id: "b", assignment: encodeAssignment(t, "t", 2)},
	}
	cur := []memberAssignment{
		{id: "a", assignment: encodeAssignment(t, "t", 0)},
		{id: "c", assignment: encodeAssignment(t, "t", 2, 1)},
	}
	joined, left := diffMembers(prev, cur)
	if len(joined) != 1 || joined[0] != "c" || len(left) != 1 || left[0] != "b" {
		t.Fatalf("joined %v left %v", joined, left)
	}
	got := moves(prev, cur)
	want := []Move{{"t", 1, "a", "c"}, {"t", 2, "b", "c"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("moves %v, want %v", got, want)
	}
}

// Joined, Left and Moved hold exactly their entries (no spare capacity kept
// in the history), in id and partition order, and are nil when empty.
func TestDiffListsAtTheirLength(t *testing.T) {
	prev := []memberAssignment{
		{id: "a", assignment: encodeAssignment(t, "t", 0)},
		{id: "b", assignment: encodeAssignment(t, "t", 1)},
		{id: "d", assignment: encodeAssignment(t, "t", 2)},
		{id: "f"},
	}
	cur := []memberAssignment{
		{id: "a", assignment: encodeAssignment(t, "t", 0, 2)},
		{id: "c", assignment: encodeAssignment(t, "t", 1)},
		{id: "e"},
		{id: "g", assignment: encodeAssignment(t, "u", 0)},
	}
	joined, left := diffMembers(prev, cur)
	if fmt.Sprint(joined) != "[c e g]" || cap(joined) != 3 || fmt.Sprint(left) != "[b d f]" || cap(left) != 3 {
		t.Fatalf("joined %v (cap %d), left %v (cap %d)", joined, cap(joined), left, cap(left))
	}
	got := moves(prev, cur)
	want := []Move{{"t", 1, "b", "c"}, {"t", 2, "d", "a"}, {"u", 0, "", "g"}}
	if !slices.Equal(got, want) || cap(got) != len(want) {
		t.Fatalf("moves %v (cap %d), want %v", got, cap(got), want)
	}
	if got := moves(cur, nil); fmt.Sprint(got) != "[{t 0 a } {t 1 c } {t 2 a } {u 0 g }]" || cap(got) != 4 {
		t.Fatalf("moves when every member left: %v (cap %d)", got, cap(got))
	}
	joined, left = diffMembers(cur, cur)
	if joined != nil || left != nil || moves(cur, cur) != nil {
		t.Fatalf("no change gave joined %v, left %v, moves %v", joined, left, moves(cur, cur))
	}
}

// moves agrees with decoding every assignment into a map of owners, over
// random memberships: partitions claimed twice (the later member's), members
// without an assignment, and assignments that do not decode.
func TestMovesMatchDecodedOwners(t *testing.T) {
	oracle := func(prev, cur []memberAssignment) []Move {
		type tp struct {
			topic     string
			partition int32
		}
		owners := func(ms []memberAssignment) map[tp]string {
			out := map[tp]string{}
			for _, m := range ms {
				as, err := assignor.DecodeAssignment(m.assignment)
				if len(m.assignment) == 0 || err != nil {
					continue
				}
				for _, t := range as.Topics {
					for _, p := range t.Partitions {
						out[tp{t.Topic, p}] = m.id
					}
				}
			}
			return out
		}
		before, after := owners(prev), owners(cur)
		var out []Move
		for k, to := range after {
			if from := before[k]; from != to {
				out = append(out, Move{k.topic, k.partition, from, to})
			}
		}
		for k, from := range before {
			if _, ok := after[k]; !ok {
				out = append(out, Move{k.topic, k.partition, from, ""})
			}
		}
		slices.SortFunc(out, func(a, b Move) int {
			return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		})
		return out
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	members := func() []memberAssignment {
		var ms []memberAssignment
		for i := range rnd.IntN(6) {
			m := memberAssignment{id: fmt.Sprintf("m%d", rnd.IntN(8)+i*10)}
			if rnd.IntN(5) > 0 {
				var a assignor.Assignment
				for _, topic := range []string{"t", "u", "tt"}[:rnd.IntN(4)] {
					tp := assignor.TopicPartitions{Topic: topic}
					for range rnd.IntN(4) {
						tp.Partitions = append(tp.Partitions, int32(rnd.IntN(6)))
					}
					a.Topics = append(a.Topics, tp)
				}
				m.assignment = a.AppendTo(nil)
				if rnd.IntN(8) == 0 {
					m.assignment = m.assignment[:len(m.assignment)-1] // does not decode
				}
			}
			ms = append(ms, m)
		}
		return ms
	}
	for i := range 5000 {
		prev, cur := members(), members()
		if got, want := moves(prev, cur), oracle(prev, cur); !slices.Equal(got, want) {
			t.Fatalf("case %d: moves %v, decoded owners give %v\nprev %v\ncur %v", i, got, want, prev, cur)
		}
	}
}

// Loading counts the stored groups not loaded yet: none once ListGroups
// (which waits for them) answers after Activate.
func TestLoadingCountsStoredGroups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		system := actor.NewActorSystem(quietLogs())
		svc, err := Start(system, Options{Config: testConfig(), Store: stableStore(50, 2), Logger: quietLogger(), Fenced: true})
		if err != nil {
			t.Fatal(err)
		}
		defer system.Shutdown()
		defer svc.Stop()
		if n := svc.Loading(); n != 0 {
			t.Fatalf("fenced: %d loading", n)
		}
		if err := svc.Activate(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		l := ask[*pb.ListGroupsResponse](t, svc, &pb.ListGroupsRequest{})
		if len(l.Groups) != 50 || svc.Loading() != 0 {
			t.Fatalf("%d groups listed, %d loading", len(l.Groups), svc.Loading())
		}
	})
}

func encodeAssignment(t *testing.T, topic string, partitions ...int32) []byte {
	t.Helper()
	a := assignor.Assignment{Topics: []assignor.TopicPartitions{{Topic: topic, Partitions: partitions}}}
	return a.AppendTo(nil)
}

func TestMemberViewAssignment(t *testing.T) {
	m := MemberView{MemberID: "a", assignment: encodeAssignment(t, "t", 2, 0, 1)}
	if got := m.Assignment(); len(got) != 1 || fmt.Sprint(got["t"]) != "[0 1 2]" {
		t.Fatalf("assignment %v, want t: [0 1 2]", got)
	}
	if got := (MemberView{MemberID: "b", assignment: []byte{0xff}}).Assignment(); got != nil {
		t.Fatalf("undecodable assignment gave %v, want nil", got)
	}
	if got := (MemberView{MemberID: "c"}).Assignment(); got != nil {
		t.Fatalf("no assignment gave %v, want nil", got)
	}
}

// A join gives the cause metadata when its member is known, join otherwise.
func TestCauseOf(t *testing.T) {
	cfg := coordinator.DefaultConfig()
	now := time.Unix(1000, 0)
	g := coordinator.New("g", &cfg, now)
	var fx coordinator.Effects
	g.Join(now, &pb.JoinGroupRequest{GroupId: "g", ClientId: "c", SessionTimeoutMs: 10000, RebalanceTimeoutMs: 10000, ProtocolType: "consumer",
		Protocols: []*pb.Protocol{{Name: "range"}}}, "1", "caller", &fx)
	ids := g.MemberIDs()
	if len(ids) != 1 {
		t.Fatalf("members %q", ids)
	}
	for _, c := range []struct {
		req  any
		want string
	}{
		{&pb.JoinGroupRequest{MemberId: ids[0]}, CauseMetadata},
		{&pb.JoinGroupRequest{MemberId: "other"}, CauseJoin},
		{&pb.JoinGroupRequest{}, CauseJoin},
		{&pb.LeaveGroupRequest{}, CauseLeave},
		{&pb.SyncGroupRequest{}, CauseEnforced},
	} {
		if got := causeOf(g, c.req); got != c.want {
			t.Errorf("causeOf(%v) = %q, want %q", c.req, got, c.want)
		}
	}
}
