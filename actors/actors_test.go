package actors

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

func testConfig() coordinator.Config {
	cfg := coordinator.DefaultConfig()
	cfg.InitialRebalanceDelay = 100 * time.Millisecond
	return cfg
}

// startService starts a coordinator on a fresh actor system; it stops when
// the test ends.
func startService(t *testing.T, store Store) *Service {
	t.Helper()
	system := actor.NewActorSystem(quietLogs())
	svc, err := Start(system, Options{Config: testConfig(), Store: store, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		svc.Stop()
		system.Shutdown()
	})
	return svc
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func quietLogs() actor.ConfigOption {
	return actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLogger() })
}

func ask[T proto.Message](t *testing.T, svc *Service, req proto.Message) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := svc.Call(ctx, req)
	if err != nil {
		t.Fatalf("%T: %v", req, err)
	}
	r, ok := res.(T)
	if !ok {
		t.Fatalf("%T: answer is %T", req, res)
	}
	return r
}

func joinReq(group, client, memberID string) *pb.JoinGroupRequest {
	return &pb.JoinGroupRequest{
		GroupId: group, MemberId: memberID, ClientId: client, ApiVersion: 5,
		SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 30_000, ProtocolType: "consumer",
		Protocols: []*pb.Protocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 0}}},
	}
}

// joinAll runs the v5 two-step join for n clients concurrently and returns
// their JoinGroup answers in client order.
func joinAll(t *testing.T, svc *Service, group string, n int) []*pb.JoinGroupResponse {
	t.Helper()
	out := make([]*pb.JoinGroupResponse, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			client := fmt.Sprintf("c%d", i)
			first := ask[*pb.JoinGroupResponse](t, svc, joinReq(group, client, ""))
			if first.ErrorCode != coordinator.ErrMemberIDRequired {
				t.Errorf("first join: %d", first.ErrorCode)
				return
			}
			out[i] = ask[*pb.JoinGroupResponse](t, svc, joinReq(group, client, first.MemberId))
		})
	}
	wg.Wait()
	return out
}

// formGroup forms a Stable group of n members and returns the member ids
// (leader first is not guaranteed) and the generation.
func formGroup(t *testing.T, svc *Service, group string, n int) ([]string, int32) {
	t.Helper()
	joins := joinAll(t, svc, group, n)
	var leader string
	ids := make([]string, n)
	for i, j := range joins {
		if j == nil || j.ErrorCode != coordinator.ErrNone {
			t.Fatalf("join %d: %v", i, j)
		}
		ids[i] = j.MemberId
		leader = j.Leader
	}
	gen := joins[0].GenerationId
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			req := &pb.SyncGroupRequest{GroupId: group, GenerationId: gen, MemberId: id}
			if id == leader {
				for _, m := range ids {
					req.Assignments = append(req.Assignments, &pb.SyncGroupAssignment{MemberId: m, Assignment: []byte("to-" + m)})
				}
			}
			r := ask[*pb.SyncGroupResponse](t, svc, req)
			if r.ErrorCode != coordinator.ErrNone || string(r.Assignment) != "to-"+ids[i] {
				t.Errorf("sync %s: %v", id, r)
			}
		})
	}
	wg.Wait()
	return ids, gen
}

func TestGroupFormsThroughActors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := startService(t, raftfsm.NewMemoryStore())
		ids, gen := formGroup(t, svc, "g1", 3)
		if gen != 1 {
			t.Fatalf("generation %d, want 1", gen)
		}
		d := ask[*pb.DescribeGroupResponse](t, svc, &pb.DescribeGroupRequest{GroupId: "g1"})
		if d.State != "Stable" || d.ProtocolData != "range" || len(d.Members) != 3 {
			t.Fatalf("describe: %v", d)
		}
		for _, m := range d.Members {
			if string(m.Assignment) != "to-"+m.MemberId {
				t.Fatalf("member %s assignment %q", m.MemberId, m.Assignment)
			}
		}
		for _, id := range ids {
			hb := ask[*pb.HeartbeatResponse](t, svc, &pb.HeartbeatRequest{GroupId: "g1", GenerationId: gen, MemberId: id})
			if hb.ErrorCode != coordinator.ErrNone {
				t.Fatalf("heartbeat: %d", hb.ErrorCode)
			}
		}
		l := ask[*pb.ListGroupsResponse](t, svc, &pb.ListGroupsRequest{})
		if len(l.Groups) != 1 || l.Groups[0].GroupId != "g1" || l.Groups[0].State != "Stable" || l.Groups[0].ProtocolType != "consumer" {
			t.Fatalf("list: %v", l)
		}
	})
}

// Heartbeats replace the session timer: a member that keeps heartbeating
// stays past many session timeouts; one that stops is expired by the timer
// firing through the actor, after its session timeout.
func TestSessionTimerFiresThroughActor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := startService(t, raftfsm.NewMemoryStore())
		ids, gen := formGroup(t, svc, "g", 2)
		live, dead := ids[0], ids[1]
		start := time.Now()
		for time.Since(start) < 9*time.Second {
			time.Sleep(3 * time.Second)
			hb := ask[*pb.HeartbeatResponse](t, svc, &pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: live})
			if hb.ErrorCode != coordinator.ErrNone {
				t.Fatalf("heartbeat at %v: %d", time.Since(start), hb.ErrorCode)
			}
		}
		// dead stopped heartbeating at start: its 10 s session expires now.
		time.Sleep(1*time.Second + time.Millisecond)
		hb := ask[*pb.HeartbeatResponse](t, svc, &pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: live})
		if hb.ErrorCode != coordinator.ErrRebalanceInProgress {
			t.Fatalf("after expiry: heartbeat %d, want REBALANCE_IN_PROGRESS", hb.ErrorCode)
		}
		d := ask[*pb.DescribeGroupResponse](t, svc, &pb.DescribeGroupRequest{GroupId: "g"})
		if len(d.Members) != 1 || d.Members[0].MemberId != live {
			t.Fatalf("members after expiry: %v (dead was %s)", d.Members, dead)
		}
	})
}

// Heartbeats only move the session's end: the timer fires early, is armed
// again for the rest, and the member still expires exactly one session
// timeout after its last heartbeat.
func TestExtendedSessionExpiresOnTimeThroughActor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := startService(t, raftfsm.NewMemoryStore())
		ids, gen := formGroup(t, svc, "g", 1)
		start := time.Now()
		for time.Since(start) < time.Minute { // six times the 10 s session
			time.Sleep(2500 * time.Millisecond)
			hb := ask[*pb.HeartbeatResponse](t, svc, &pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: ids[0]})
			if hb.ErrorCode != coordinator.ErrNone {
				t.Fatalf("heartbeat at %v: %d", time.Since(start), hb.ErrorCode)
			}
		}
		members := func() int {
			return len(ask[*pb.DescribeGroupResponse](t, svc, &pb.DescribeGroupRequest{GroupId: "g"}).Members)
		}
		time.Sleep(10*time.Second - time.Millisecond)
		if n := members(); n != 1 {
			t.Fatalf("%d members just before the session ends, want 1", n)
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if n := members(); n != 0 {
			t.Fatalf("%d members just after the session ended, want 0", n)
		}
	})
}

// The join timer fires through the actor: a member that does not re-join
// within the rebalance timeout is evicted and the group completes.
func TestRebalanceTimeoutEvictsThroughActor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := startService(t, raftfsm.NewMemoryStore())
		ids, gen := formGroup(t, svc, "g", 2)
		start := time.Now()
		// ids[0] re-joins (leader or follower with changed metadata forces a rebalance).
		req := joinReq("g", "c0", ids[0])
		req.Protocols[0].Metadata = []byte{0, 0, 0, 0, 0, 1}
		done := make(chan *pb.JoinGroupResponse)
		go func() { done <- ask[*pb.JoinGroupResponse](t, svc, req) }()
		// Keep the other alive by heartbeats (REBALANCE_IN_PROGRESS), but it never re-joins.
		var r *pb.JoinGroupResponse
		for r == nil {
			select {
			case r = <-done:
			case <-time.After(5 * time.Second):
				ask[*pb.HeartbeatResponse](t, svc, &pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: ids[1]})
			}
		}
		if r.ErrorCode != coordinator.ErrNone || r.GenerationId != gen+1 || len(r.Members) != 1 || r.Leader != ids[0] {
			t.Fatalf("join after rebalance timeout: %v", r)
		}
		if el := time.Since(start); el != 30*time.Second {
			t.Fatalf("join completed after %v, want the 30s rebalance timeout", el)
		}
	})
}

// panicStore panics on the next Append of the armed group: the actor crashes
// in the middle of executing effects.
type panicStore struct {
	*raftfsm.MemoryStore
	armed atomic.Bool
}

func (s *panicStore) Append(groupID string, recs []*pb.Record, fence *pb.WriteFence, done func(error)) {
	if s.armed.CompareAndSwap(true, false) {
		panic("injected store failure")
	}
	s.MemoryStore.Append(groupID, recs, fence, done)
}

// An actor panic does not take the process down; the restarted actor
// rebuilds the group from the store.
func TestPanicRestartsActorFromStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &panicStore{MemoryStore: raftfsm.NewMemoryStore()}
		svc := startService(t, store)
		ids, gen := formGroup(t, svc, "g", 2)
		c := ask[*pb.OffsetCommitResponse](t, svc, &pb.OffsetCommitRequest{GroupId: "g", GenerationId: gen, MemberId: ids[0],
			Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 42}}}}})
		if c.Topics[0].Partitions[0].ErrorCode != coordinator.ErrNone {
			t.Fatalf("commit: %v", c)
		}
		store.armed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := svc.Call(ctx, &pb.OffsetCommitRequest{GroupId: "g", GenerationId: gen, MemberId: ids[0],
			Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 99}}}}})
		cancel()
		if err == nil {
			t.Fatal("the crashed commit was answered")
		}
		// The restarted actor loaded the group: same generation and members,
		// the acknowledged offset, not the crashed one.
		d := ask[*pb.DescribeGroupResponse](t, svc, &pb.DescribeGroupRequest{GroupId: "g"})
		if d.State != "Stable" || d.GenerationId != gen || len(d.Members) != 2 {
			t.Fatalf("after restart: %v", d)
		}
		f := ask[*pb.OffsetFetchResponse](t, svc, &pb.OffsetFetchRequest{GroupId: "g", AllTopics: true})
		if len(f.Topics) != 1 || f.Topics[0].Partitions[0].Offset != 42 {
			t.Fatalf("offsets after restart: %v", f)
		}
		for _, id := range ids {
			hb := ask[*pb.HeartbeatResponse](t, svc, &pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: id})
			if hb.ErrorCode != coordinator.ErrNone {
				t.Fatalf("heartbeat after restart: %d", hb.ErrorCode)
			}
		}
	})
}

// Deleting an Empty group stops its actor; the id then names a new group.
func TestDeleteGroupThenRecreate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := raftfsm.NewMemoryStore()
		svc := startService(t, store)
		c := ask[*pb.OffsetCommitResponse](t, svc, &pb.OffsetCommitRequest{GroupId: "simple", GenerationId: -1,
			Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 3, Offset: 7}}}}})
		if c.Topics[0].Partitions[0].ErrorCode != coordinator.ErrNone {
			t.Fatalf("commit: %v", c)
		}
		if d := ask[*pb.DeleteGroupResponse](t, svc, &pb.DeleteGroupRequest{GroupId: "simple"}); d.ErrorCode != coordinator.ErrNone {
			t.Fatalf("delete: %v", d)
		}
		if d := ask[*pb.DeleteGroupResponse](t, svc, &pb.DeleteGroupRequest{GroupId: "simple"}); d.ErrorCode != coordinator.ErrGroupIDNotFound {
			t.Fatalf("second delete: %v", d)
		}
		if ids, _ := store.Groups(); len(ids) != 0 {
			t.Fatalf("store still has %v", ids)
		}
		f := ask[*pb.OffsetFetchResponse](t, svc, &pb.OffsetFetchRequest{GroupId: "simple", Topics: []*pb.TopicPartitions{{Name: "t", Partitions: []int32{3}}}})
		if f.Topics[0].Partitions[0].Offset != -1 {
			t.Fatalf("offset after delete: %v", f)
		}
		ids, gen := formGroup(t, svc, "simple", 1)
		if gen != 1 || len(ids) != 1 {
			t.Fatalf("recreated group: gen %d", gen)
		}
	})
}

// A restarted node (new actor system, same store) serves the stored groups:
// same generation, and members keep heartbeating without a rebalance.
func TestStoredGroupsLoadOnStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := raftfsm.NewMemoryStore()
		system := actor.NewActorSystem(quietLogs())
		svc, err := Start(system, Options{Config: testConfig(), Store: store, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ids, gen := formGroup(t, svc, "g", 3)
		svc.Stop()
		system.Shutdown()

		svc2 := startService(t, store)
		l := ask[*pb.ListGroupsResponse](t, svc2, &pb.ListGroupsRequest{})
		if len(l.Groups) != 1 || l.Groups[0].State != "Stable" {
			t.Fatalf("list after restart: %v", l)
		}
		for range 5 {
			for _, id := range ids {
				hb := ask[*pb.HeartbeatResponse](t, svc2, &pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: id})
				if hb.ErrorCode != coordinator.ErrNone {
					t.Fatalf("heartbeat after restart: %d", hb.ErrorCode)
				}
			}
			time.Sleep(3 * time.Second)
		}
		d := ask[*pb.DescribeGroupResponse](t, svc2, &pb.DescribeGroupRequest{GroupId: "g"})
		if d.State != "Stable" || d.GenerationId != gen || len(d.Members) != 3 {
			t.Fatalf("after restart: %v", d)
		}
	})
}

// A fenced service (a node that is not the Raft leader) answers
// NOT_COORDINATOR; activated it serves the stored groups with fresh session
// timers; deactivated, parked requests are answered NOT_COORDINATOR.
func TestActivateAndDeactivate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := raftfsm.NewMemoryStore()
		seed := startService(t, store)
		ids, gen := formGroup(t, seed, "g", 2)
		seed.Stop()

		system := actor.NewActorSystem(quietLogs())
		svc, err := Start(system, Options{Config: testConfig(), Store: store, Logger: quietLogger(), Fenced: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Stop(); system.Shutdown() })
		hb := &pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: ids[0]}
		if r := ask[*pb.HeartbeatResponse](t, svc, hb); r.ErrorCode != coordinator.ErrNotCoordinator {
			t.Fatalf("fenced heartbeat: %d", r.ErrorCode)
		}
		if err := svc.Activate(time.Second); err != nil {
			t.Fatal(err)
		}
		if r := ask[*pb.HeartbeatResponse](t, svc, hb); r.ErrorCode != coordinator.ErrNone {
			t.Fatalf("active heartbeat: %d", r.ErrorCode)
		}
		// A follower's metadata change parks a JoinGroup (rebalance); deactivation answers it.
		req := joinReq("g", "c1", ids[1])
		req.Protocols[0].Metadata = []byte{0, 0, 0, 0, 0, 9}
		done := make(chan *pb.JoinGroupResponse)
		go func() { done <- ask[*pb.JoinGroupResponse](t, svc, req) }()
		synctest.Wait()
		if err := svc.Deactivate(time.Second); err != nil {
			t.Fatal(err)
		}
		if r := <-done; r.ErrorCode != coordinator.ErrNotCoordinator || r.MemberId != ids[1] {
			t.Fatalf("parked join after deactivate: %v", r)
		}
		if r := ask[*pb.HeartbeatResponse](t, svc, hb); r.ErrorCode != coordinator.ErrNotCoordinator {
			t.Fatalf("heartbeat after deactivate: %d", r.ErrorCode)
		}
		// Activated again, the group is back at the stored generation.
		if err := svc.Activate(time.Second); err != nil {
			t.Fatal(err)
		}
		d := ask[*pb.DescribeGroupResponse](t, svc, &pb.DescribeGroupRequest{GroupId: "g"})
		if d.State != "Stable" || d.GenerationId != gen || len(d.Members) != 2 {
			t.Fatalf("after re-activation: %v", d)
		}
	})
}

// A request sent to a group's actor just before Deactivate stopped it (the
// sender looked the actor up first) reaches protoactor's dead letters; it is
// answered NOT_COORDINATOR all the same, not left to its caller's bound.
// Once the service coordinates again, such a request reaches the group's new
// actor.
func TestRequestToAStoppedGroupActorIsAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := startService(t, raftfsm.NewMemoryStore())
		ids, gen := formGroup(t, svc, "g", 2)
		hb := &pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: ids[0]}
		stale, ok := svc.env.directory.Load("g")
		if !ok {
			t.Fatal("no actor for the group")
		}
		send := func() *pb.HeartbeatResponse {
			t.Helper()
			reply := make(chan proto.Message, 1)
			svc.system.Root.Send(stale, &call{req: hb, reply: reply})
			synctest.Wait()
			select {
			case m := <-reply:
				return m.(*pb.HeartbeatResponse)
			default:
				t.Fatal("the request to the stopped actor was not answered")
				return nil
			}
		}
		if err := svc.Deactivate(time.Second); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if r := send(); r.ErrorCode != coordinator.ErrNotCoordinator {
			t.Fatalf("heartbeat to the stopped actor after deactivate: %d", r.ErrorCode)
		}
		if err := svc.Activate(time.Second); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if now, _ := svc.env.directory.Load("g"); now == nil || now.Equal(stale) {
			t.Fatalf("group actor after re-activation: %v (stale %v)", now, stale)
		}
		if r := send(); r.ErrorCode != coordinator.ErrNone {
			t.Fatalf("heartbeat to the stopped actor after re-activation: %d", r.ErrorCode)
		}
		// protoactor's dead-letter log throttle keeps a goroutine for a
		// second after the first dead letter; the bubble must outlive it,
		// and end between two of the group's periodic session checks (every
		// second from when the group formed, at 100 ms): a check that wakes
		// a group actor the shutdown stops would start that throttle again.
		time.Sleep(1500 * time.Millisecond)
	})
}
