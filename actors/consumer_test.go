package actors

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// startConsumerService starts a coordinator whose catalog holds topic "t"
// with six partitions; allowed gates consumer group creation (nil: allowed).
func startConsumerService(t *testing.T, store Store, allowed func() error) *Service {
	t.Helper()
	system := actor.NewActorSystem(quietLogs())
	topics := map[string]int32{"t": 6}
	svc, err := Start(system, Options{Config: testConfig(), Store: store, Logger: quietLogger(),
		ConsumerGroups: allowed, Topics: func() (uint64, map[string]int32) { return 1, topics }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		svc.Stop()
		system.Shutdown()
	})
	return svc
}

func cgJoin(group, member string) *pb.ConsumerGroupHeartbeatRequest {
	return &pb.ConsumerGroupHeartbeatRequest{GroupId: group, MemberId: member, MemberEpoch: 0, RebalanceTimeoutMs: 30_000,
		SubscribedTopicNamesSet: true, SubscribedTopicNames: []string{"t"}, TopicsSet: true, ApiVersion: 1}
}

// cgBeat is a heartbeat at epoch reporting owned as the member's partitions
// of "t".
func cgBeat(group, member string, epoch int32, owned []int32) *pb.ConsumerGroupHeartbeatRequest {
	req := &pb.ConsumerGroupHeartbeatRequest{GroupId: group, MemberId: member, MemberEpoch: epoch, RebalanceTimeoutMs: -1, TopicsSet: true, ApiVersion: 1}
	if len(owned) > 0 {
		req.Topics = []*pb.TopicPartitions{{Name: "t", Partitions: owned}}
	}
	return req
}

// consumerMember is one member as a client keeps it.
type consumerMember struct {
	id    string
	epoch int32
	owned []int32
}

// beat sends m's heartbeat and adopts the answer as a client does.
func (m *consumerMember) beat(t *testing.T, svc *Service, group string) *pb.ConsumerGroupHeartbeatResponse {
	t.Helper()
	var req *pb.ConsumerGroupHeartbeatRequest
	if m.epoch == 0 {
		req = cgJoin(group, m.id)
	} else {
		req = cgBeat(group, m.id, m.epoch, m.owned)
	}
	r := ask[*pb.ConsumerGroupHeartbeatResponse](t, svc, req)
	if r.ErrorCode != coordinator.ErrNone {
		t.Fatalf("%s heartbeat at epoch %d: error %d %s", m.id, m.epoch, r.ErrorCode, r.ErrorMessage)
	}
	m.epoch = r.MemberEpoch
	if r.HasAssignment {
		m.owned = nil
		for _, tp := range r.Assignment {
			m.owned = append(m.owned, tp.Partitions...)
		}
		slices.Sort(m.owned)
	}
	return r
}

// converge heartbeats every member in turn until the group is Stable,
// checking after each answer that no partition is owned twice.
func converge(t *testing.T, svc *Service, group string, members []*consumerMember) *pb.ConsumerGroupDescribeResponse {
	t.Helper()
	for round := 0; round < 10; round++ {
		for _, m := range members {
			m.beat(t, svc, group)
			owner := map[int32]string{}
			for _, o := range members {
				for _, p := range o.owned {
					if prev, ok := owner[p]; ok {
						t.Fatalf("partition %d owned by %s and %s", p, prev, o.id)
					}
					owner[p] = o.id
				}
			}
		}
		d := ask[*pb.ConsumerGroupDescribeResponse](t, svc, &pb.ConsumerGroupDescribeRequest{GroupId: group})
		if d.State == "Stable" {
			return d
		}
	}
	t.Fatalf("group %s did not become Stable", group)
	return nil
}

// A consumer group forms through the group actor: server-side assignment,
// one owner per partition at every answer, commits checked against member
// epochs, ListGroups and ConsumerGroupDescribe report it, and the classic
// protocol is refused for it.
func TestConsumerGroupThroughActor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := startConsumerService(t, raftfsm.NewMemoryStore(), nil)
		a := &consumerMember{id: "member-a"}
		a.beat(t, svc, "g")
		if a.epoch != 1 || !slices.Equal(a.owned, []int32{0, 1, 2, 3, 4, 5}) {
			t.Fatalf("first member: epoch %d owns %v, want epoch 1 and all six", a.epoch, a.owned)
		}
		b := &consumerMember{id: "member-b"}
		d := converge(t, svc, "g", []*consumerMember{a, b})
		if d.GroupEpoch != 2 || d.AssignmentEpoch != 2 || a.epoch != 2 || b.epoch != 2 || len(a.owned) != 3 || len(b.owned) != 3 {
			t.Fatalf("after the second join: group epoch %d, a %d %v, b %d %v", d.GroupEpoch, a.epoch, a.owned, b.epoch, b.owned)
		}
		if d.AssignorName != "uniform" || len(d.Members) != 2 || d.Members[0].State != "STABLE" {
			t.Fatalf("describe: %v", d)
		}

		commit := func(member string, epoch int32) int32 {
			r := ask[*pb.OffsetCommitResponse](t, svc, &pb.OffsetCommitRequest{GroupId: "g", GenerationId: epoch, MemberId: member,
				Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: a.owned[0], Offset: 42}}}}})
			return r.Topics[0].Partitions[0].ErrorCode
		}
		if code := commit(a.id, a.epoch); code != coordinator.ErrNone {
			t.Fatalf("commit at the member epoch: %d", code)
		}
		if code := commit(a.id, a.epoch-1); code != coordinator.ErrStaleMemberEpoch {
			t.Fatalf("commit at an older epoch: %d, want STALE_MEMBER_EPOCH", code)
		}
		if code := commit("", -1); code != coordinator.ErrUnknownMemberID {
			t.Fatalf("commit without a member to a group with members: %d, want UNKNOWN_MEMBER_ID", code)
		}
		f := ask[*pb.OffsetFetchResponse](t, svc, &pb.OffsetFetchRequest{GroupId: "g", AllTopics: true, MemberEpoch: -1})
		if len(f.Topics) != 1 || f.Topics[0].Partitions[0].Offset != 42 {
			t.Fatalf("offsets: %v", f)
		}
		// OffsetFetch v9 names the member: checked against its epoch.
		fetch := func(member string, epoch int32) int32 {
			return ask[*pb.OffsetFetchResponse](t, svc, &pb.OffsetFetchRequest{GroupId: "g", AllTopics: true, MemberId: &member, MemberEpoch: epoch}).ErrorCode
		}
		if code := fetch(a.id, a.epoch); code != coordinator.ErrNone {
			t.Fatalf("fetch at the member epoch: %d", code)
		}
		if code := fetch(a.id, a.epoch-1); code != coordinator.ErrStaleMemberEpoch {
			t.Fatalf("fetch at an older epoch: %d, want STALE_MEMBER_EPOCH", code)
		}
		if code := fetch("nobody", 1); code != coordinator.ErrUnknownMemberID {
			t.Fatalf("fetch by an unknown member: %d, want UNKNOWN_MEMBER_ID", code)
		}

		l := ask[*pb.ListGroupsResponse](t, svc, &pb.ListGroupsRequest{TypesFilter: []string{"consumer"}})
		if len(l.Groups) != 1 || l.Groups[0].GroupType != "consumer" || l.Groups[0].State != "Stable" || l.Groups[0].ProtocolType != "consumer" {
			t.Fatalf("list consumer groups: %v", l.Groups)
		}
		if l := ask[*pb.ListGroupsResponse](t, svc, &pb.ListGroupsRequest{TypesFilter: []string{"classic"}}); len(l.Groups) != 0 {
			t.Fatalf("list classic groups: %v", l.Groups)
		}
		// A classic member joins the consumer group as such (online
		// migration): a v4+ join without an id is given one first.
		j := ask[*pb.JoinGroupResponse](t, svc, joinReq("g", "classic", ""))
		if j.ErrorCode != coordinator.ErrMemberIDRequired || j.MemberId == "" {
			t.Fatalf("classic join to a consumer group: %v, want MEMBER_ID_REQUIRED with an id", j)
		}
		if dg := ask[*pb.DescribeGroupResponse](t, svc, &pb.DescribeGroupRequest{GroupId: "g"}); dg.ErrorCode != coordinator.ErrGroupIDNotFound {
			t.Fatalf("DescribeGroups of a consumer group: %v", dg)
		}
		if dd := ask[*pb.DeleteGroupResponse](t, svc, &pb.DeleteGroupRequest{GroupId: "g"}); dd.ErrorCode != coordinator.ErrNonEmptyGroup {
			t.Fatalf("deleting a consumer group with members: %d, want NON_EMPTY_GROUP", dd.ErrorCode)
		}
	})
}

// A heartbeat to a group nobody has joined, or a describe of one, is
// answered GROUP_ID_NOT_FOUND without creating it; a classic group whose
// assignments are not the consumer protocol's cannot be upgraded and
// refuses consumer members; a refused creation answers
// UNSUPPORTED_VERSION (clients fall back to the classic protocol).
func TestConsumerGroupRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		off := atomic.Bool{}
		off.Store(true)
		svc := startConsumerService(t, raftfsm.NewMemoryStore(), func() error {
			if off.Load() {
				return errors.New("consumer groups are off")
			}
			return nil
		})
		if r := ask[*pb.ConsumerGroupHeartbeatResponse](t, svc, cgBeat("none", "m", 3, nil)); r.ErrorCode != coordinator.ErrGroupIDNotFound {
			t.Fatalf("heartbeat to no group: %d", r.ErrorCode)
		}
		if r := ask[*pb.ConsumerGroupDescribeResponse](t, svc, &pb.ConsumerGroupDescribeRequest{GroupId: "none"}); r.ErrorCode != coordinator.ErrGroupIDNotFound {
			t.Fatalf("describe of no group: %d", r.ErrorCode)
		}
		if r := ask[*pb.ConsumerGroupHeartbeatResponse](t, svc, cgJoin("g", "")); r.ErrorCode != coordinator.ErrInvalidRequest {
			t.Fatalf("v1 join without a member id: %d, want INVALID_REQUEST", r.ErrorCode)
		}
		if r := ask[*pb.ConsumerGroupHeartbeatResponse](t, svc, cgJoin("g", "m")); r.ErrorCode != coordinator.ErrUnsupportedVersion || r.ErrorMessage != "consumer groups are off" {
			t.Fatalf("join while consumer groups are off: %d %q", r.ErrorCode, r.ErrorMessage)
		}
		off.Store(false)
		formGroup(t, svc, "classic", 1)
		if r := ask[*pb.ConsumerGroupHeartbeatResponse](t, svc, cgJoin("classic", "m")); r.ErrorCode != coordinator.ErrGroupIDNotFound {
			t.Fatalf("join to a classic group with members: %d, want GROUP_ID_NOT_FOUND", r.ErrorCode)
		}
		if l := ask[*pb.ListGroupsResponse](t, svc, &pb.ListGroupsRequest{}); len(l.Groups) != 1 || l.Groups[0].GroupType != "classic" {
			t.Fatalf("groups: %v", l.Groups)
		}
	})
}

// A coordinator that takes a consumer group over (a new service on the
// same store) serves it from the replicated records: same epochs and
// assignments, members keep heartbeating at their epochs, and a member that
// stopped is expired one session timeout after the takeover.
func TestConsumerGroupTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := raftfsm.NewMemoryStore()
		first := startConsumerService(t, store, nil)
		a, b := &consumerMember{id: "member-a"}, &consumerMember{id: "member-b"}
		a.beat(t, first, "g")
		before := converge(t, first, "g", []*consumerMember{a, b})
		first.Stop()

		svc := startConsumerService(t, store, nil)
		after := ask[*pb.ConsumerGroupDescribeResponse](t, svc, &pb.ConsumerGroupDescribeRequest{GroupId: "g"})
		if after.GroupEpoch != before.GroupEpoch || after.AssignmentEpoch != before.AssignmentEpoch || fmt.Sprint(after.Members) != fmt.Sprint(before.Members) {
			t.Fatalf("after takeover:\n%v\nbefore:\n%v", after, before)
		}
		start := time.Now()
		for time.Since(start) < 40*time.Second {
			time.Sleep(5 * time.Second)
			if r := a.beat(t, svc, "g"); r.MemberEpoch != before.GroupEpoch {
				t.Fatalf("a's epoch moved to %d while b was alive", r.MemberEpoch)
			}
		}
		// b's 45 s session from the takeover ends: it is removed, the group
		// epoch moves on and a gets all six.
		time.Sleep(6 * time.Second)
		converge(t, svc, "g", []*consumerMember{a})
		if a.epoch != before.GroupEpoch+1 || len(a.owned) != 6 {
			t.Fatalf("after b expired: a epoch %d owns %v", a.epoch, a.owned)
		}
	})
}

// failingStore fails the writes of one group while armed.
type failingStore struct {
	*raftfsm.MemoryStore
	fail atomic.Bool
}

func (s *failingStore) Append(groupID string, recs []*pb.Record, fence *pb.WriteFence, done func(error)) {
	if s.fail.Load() {
		done(fmt.Errorf("injected: %w", coordinator.ErrStoreUnavailable))
		return
	}
	s.MemoryStore.Append(groupID, recs, fence, done)
}

// A heartbeat whose records cannot be written is answered
// COORDINATOR_NOT_AVAILABLE, and the group is rebuilt from the store: the
// join that was not written never happened.
func TestConsumerGroupFailedWriteRebuilds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &failingStore{MemoryStore: raftfsm.NewMemoryStore()}
		svc := startConsumerService(t, store, nil)
		a := &consumerMember{id: "member-a"}
		a.beat(t, svc, "g")
		store.fail.Store(true)
		r := ask[*pb.ConsumerGroupHeartbeatResponse](t, svc, cgJoin("g", "member-b"))
		if r.ErrorCode != coordinator.ErrCoordinatorNotAvailable {
			t.Fatalf("join whose write failed: %d, want COORDINATOR_NOT_AVAILABLE", r.ErrorCode)
		}
		store.fail.Store(false)
		d := ask[*pb.ConsumerGroupDescribeResponse](t, svc, &pb.ConsumerGroupDescribeRequest{GroupId: "g"})
		if d.GroupEpoch != 1 || len(d.Members) != 1 || d.Members[0].MemberId != "member-a" {
			t.Fatalf("after the failed write: %v", d)
		}
		b := &consumerMember{id: "member-b"}
		if converge(t, svc, "g", []*consumerMember{a, b}); a.epoch != 2 || len(b.owned) != 3 {
			t.Fatalf("after retrying: a %d %v, b %d %v", a.epoch, a.owned, b.epoch, b.owned)
		}
	})
}

// What operators see of a consumer group: its type, epochs and state; one
// history entry per group epoch that reached Stable, with who joined and
// which partitions moved; members with their epochs, reconciliation state
// and targets; and the consumer group gauge.
func TestConsumerGroupObserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		obs := NewObserver(reg)
		system := actor.NewActorSystem(quietLogs())
		topics := map[string]int32{"t": 6}
		svc, err := Start(system, Options{Config: testConfig(), Store: raftfsm.NewMemoryStore(), Logger: quietLogger(), Observer: obs,
			Topics: func() (uint64, map[string]int32) { return 1, topics }})
		if err != nil {
			t.Fatal(err)
		}
		defer system.Shutdown()
		defer svc.Stop()
		a, b := &consumerMember{id: "member-a"}, &consumerMember{id: "member-b"}
		a.beat(t, svc, "g")
		converge(t, svc, "g", []*consumerMember{a, b})
		views := obs.Groups()
		if len(views) != 1 || views[0].Type != "consumer" || views[0].State != "Stable" || views[0].Generation != 2 || views[0].AssignmentEpoch != 2 || views[0].MemberCount != 2 {
			t.Fatalf("views: %+v", views)
		}
		h := views[0].History
		if len(h) != 1 || h[0].Generation != 2 || h[0].Cause != CauseJoin || !slices.Equal(h[0].Joined, []string{"member-b"}) || len(h[0].Moved) != 3 {
			t.Fatalf("history: %+v", h)
		}
		for _, mv := range h[0].Moved {
			if mv.From != "member-a" || mv.To != "member-b" {
				t.Fatalf("move %+v", mv)
			}
		}
		v, ok := obs.Group("g")
		if !ok || len(v.Members) != 2 {
			t.Fatalf("group view: %+v", v)
		}
		for _, m := range v.Members {
			if m.MemberEpoch != 2 || m.Reconciliation != "STABLE" || len(m.Target["t"]) != 3 || !slices.Equal(m.Assignment()["t"], m.Target["t"]) {
				t.Fatalf("member view %+v (holds %v)", m, m.Assignment())
			}
		}
		if got := testutil.ToFloat64(mustGauge(t, reg, "cohort_consumer_groups", "Stable")); got != 1 {
			t.Fatalf("cohort_consumer_groups{state=Stable} = %v", got)
		}
	})
}

// mustGauge returns the collector of one labelled sample of a gathered
// metric, as testutil reads it.
func mustGauge(t *testing.T, reg *prometheus.Registry, name, state string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == state {
				return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x"}, m.GetGauge().GetValue)
			}
		}
	}
	t.Fatalf("no %s{state=%q}", name, state)
	return nil
}

// reorderStore reports a group's first two writes the second first, and
// the others as they come: the Raft store completes each entry from a
// goroutine of its own, so a later write may be reported before an earlier
// one.
type reorderStore struct {
	*raftfsm.MemoryStore
	mu      sync.Mutex
	writes  int
	pending func()
}

func (s *reorderStore) Append(groupID string, recs []*pb.Record, fence *pb.WriteFence, done func(error)) {
	s.MemoryStore.Append(groupID, recs, fence, func(err error) {
		s.mu.Lock()
		s.writes++
		n, first := s.writes, s.pending
		if n == 1 {
			s.pending = func() { done(err) }
		}
		s.mu.Unlock()
		if n == 1 {
			return
		}
		done(err)
		if n == 2 {
			first()
		}
	})
}

// Writes reported out of order hold no answer back: every heartbeat is
// answered once the writes before it are done, whatever order the store
// reports them in.
func TestConsumerGroupWritesReportedOutOfOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := startConsumerService(t, &reorderStore{MemoryStore: raftfsm.NewMemoryStore()}, nil)
		a, b := &consumerMember{id: "member-a"}, &consumerMember{id: "member-b"}
		var wg sync.WaitGroup
		wg.Go(func() { a.beat(t, svc, "g") }) // its write is reported after b's
		synctest.Wait()
		b.beat(t, svc, "g")
		wg.Wait()
		// Both writes are reported: an answer that writes nothing comes at
		// once (it waited forever when the last report was the earlier
		// write's).
		if d := ask[*pb.ConsumerGroupDescribeResponse](t, svc, &pb.ConsumerGroupDescribeRequest{GroupId: "g"}); d.GroupEpoch != 2 {
			t.Fatalf("describe: %v", d)
		}
		converge(t, svc, "g", []*consumerMember{a, b})
		if a.epoch != 2 || b.epoch != 2 || len(a.owned)+len(b.owned) != 6 {
			t.Fatalf("a %d %v, b %d %v", a.epoch, a.owned, b.epoch, b.owned)
		}
	})
}

// A consumer group's regex through the actor, in virtual time: the join is
// answered before the regex is resolved, the resolution follows at once;
// a topic created later that no heartbeat brings to the group is found by
// the resolution the refresh interval arms (the actor reads the catalog
// before it resolves), and not before.
func TestConsumerRegexThroughActor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		version, topics := uint64(1), map[string]int32{"orders-eu": 2, "audit": 3}
		catalog := func() (uint64, map[string]int32) {
			mu.Lock()
			defer mu.Unlock()
			return version, maps.Clone(topics)
		}
		cc := coordinator.DefaultConsumerConfig()
		cc.RegexRefreshInterval = 30 * time.Second
		system := actor.NewActorSystem(quietLogs())
		svc, err := Start(system, Options{Config: testConfig(), Store: raftfsm.NewMemoryStore(), Logger: quietLogger(), Consumer: &cc, Topics: catalog})
		if err != nil {
			t.Fatal(err)
		}
		defer system.Shutdown()
		defer svc.Stop()
		describe := func() (int32, string) {
			d := ask[*pb.ConsumerGroupDescribeResponse](t, svc, &pb.ConsumerGroupDescribeRequest{GroupId: "g"})
			if len(d.Members) != 1 {
				t.Fatalf("members %v", d.Members)
			}
			return d.GroupEpoch, fmt.Sprint(d.Members[0].TargetAssignment)
		}

		join := &pb.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "m", RebalanceTimeoutMs: 30_000,
			SubscribedTopicRegex: proto.String("orders-.*"), TopicsSet: true, ApiVersion: 1}
		r := ask[*pb.ConsumerGroupHeartbeatResponse](t, svc, join)
		if r.ErrorCode != coordinator.ErrNone || r.MemberEpoch != 1 || len(r.Assignment) != 0 {
			t.Fatalf("join: %v", r)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if e, target := describe(); e != 2 || target != fmt.Sprint([]*pb.TopicPartitions{{Name: "orders-eu", Partitions: []int32{0, 1}}}) {
			t.Fatalf("after the first resolution: epoch %d target %s", e, target)
		}
		start := time.Now()
		mu.Lock()
		version++
		topics["orders-us"] = 1
		mu.Unlock()
		time.Sleep(30*time.Second - time.Since(start) - time.Second)
		synctest.Wait()
		if e, _ := describe(); e != 2 {
			t.Fatalf("29 s after the resolution, before the refresh: epoch %d", e)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		e, target := describe()
		want := []*pb.TopicPartitions{{Name: "orders-eu", Partitions: []int32{0, 1}}, {Name: "orders-us", Partitions: []int32{0}}}
		if e != 3 || target != fmt.Sprint(want) {
			t.Fatalf("at the refresh interval: epoch %d target %s", e, target)
		}
		r = ask[*pb.ConsumerGroupHeartbeatResponse](t, svc, &pb.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "m", MemberEpoch: 1, RebalanceTimeoutMs: -1, ApiVersion: 1})
		if r.ErrorCode != coordinator.ErrNone || r.MemberEpoch != 3 || fmt.Sprint(r.Assignment) != fmt.Sprint(want) {
			t.Fatalf("heartbeat after the refresh: %v", r)
		}
	})
}
