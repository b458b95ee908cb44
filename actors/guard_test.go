package actors

import (
	"github.com/cohort-coord/cohort/internal/testlog"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// kgoJoin is a v3 JoinGroup listing names the way kgo does: owned
// partitions of topic "t" only in the cooperative-sticky metadata.
func kgoJoin(group, client, memberID string, owned []int32, names ...string) *pb.JoinGroupRequest {
	req := &pb.JoinGroupRequest{GroupId: group, MemberId: memberID, ClientId: client, ApiVersion: 3,
		SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 30_000, ProtocolType: "consumer"}
	for _, n := range names {
		var tps []assignor.TopicPartitions
		if n == "cooperative-sticky" && len(owned) > 0 {
			tps = []assignor.TopicPartitions{{Topic: "t", Partitions: owned}}
		}
		s := assignor.NewSubscription([]string{"t"}, tps, -1, "", nil)
		req.Protocols = append(req.Protocols, &pb.Protocol{Name: n, Metadata: s.AppendTo(nil)})
	}
	return req
}

func assigned(ps ...int32) []byte {
	a := assignor.Assignment{Version: 3, Topics: []assignor.TopicPartitions{{Topic: "t", Partitions: ps}}}
	return a.AppendTo(nil)
}

// The guard's decisions reach the service's counters and its log, with the
// group: a downgrade round withholds one partition, the owner's heartbeat
// starts the follow-up.
func TestGuardCountedAndLogged(t *testing.T) {
	var logs testlog.Buffer
	system := actor.NewActorSystem(quietLogs())
	defer system.Shutdown()
	svc, err := Start(system, Options{Config: testConfig(), Store: raftfsm.NewMemoryStore(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	const group = "guarded"
	join := func(reqs ...*pb.JoinGroupRequest) []*pb.JoinGroupResponse {
		out := make([]*pb.JoinGroupResponse, len(reqs))
		var wg sync.WaitGroup
		for i, r := range reqs {
			wg.Go(func() { out[i] = ask[*pb.JoinGroupResponse](t, svc, r) })
			if i == 0 {
				// The first join starts the phase the others join.
				deadline := time.Now().Add(10 * time.Second)
				for ask[*pb.DescribeGroupResponse](t, svc, &pb.DescribeGroupRequest{GroupId: group}).GetState() != coordinator.PreparingRebalance.String() {
					if time.Now().After(deadline) {
						t.Fatal("no join phase")
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		}
		wg.Wait()
		return out
	}
	syncAll := func(gen int32, leader string, ids []string, plan map[string][]byte) map[string][]byte {
		out := map[string][]byte{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Go(func() {
				req := &pb.SyncGroupRequest{GroupId: group, GenerationId: gen, MemberId: id}
				if id == leader {
					for m, a := range plan {
						req.Assignments = append(req.Assignments, &pb.SyncGroupAssignment{MemberId: m, Assignment: a})
					}
				}
				r := ask[*pb.SyncGroupResponse](t, svc, req)
				mu.Lock()
				out[id] = r.GetAssignment()
				mu.Unlock()
			})
		}
		wg.Wait()
		return out
	}
	first := join(kgoJoin(group, "a", "", nil, "cooperative-sticky", "range"), kgoJoin(group, "b", "", nil, "cooperative-sticky", "range"))
	a, b := first[0].GetMemberId(), first[1].GetMemberId()
	syncAll(first[0].GetGenerationId(), first[0].GetLeader(), []string{a, b}, map[string][]byte{a: assigned(0, 1), b: assigned(2, 3)})

	second := join(kgoJoin(group, "c", "", nil, "range"),
		kgoJoin(group, "a", a, []int32{0, 1}, "cooperative-sticky", "range"),
		kgoJoin(group, "b", b, []int32{2, 3}, "cooperative-sticky", "range"))
	c, gen := second[0].GetMemberId(), second[0].GetGenerationId()
	if second[0].GetProtocolName() != "range" {
		t.Fatalf("selected %q", second[0].GetProtocolName())
	}
	got := syncAll(gen, second[0].GetLeader(), []string{a, b, c}, map[string][]byte{a: assigned(0, 1), b: assigned(2), c: assigned(3)})
	if ca, err := assignor.DecodeAssignment(got[c]); err != nil || len(ca.Topics) != 0 {
		t.Fatalf("c was given %+v (%v), want nothing while b owns 3", ca, err)
	}
	if s := svc.GuardStats(); s.Withheld != 1 || s.FollowUps != 0 {
		t.Fatalf("stats %+v", s)
	}
	hb := ask[*pb.HeartbeatResponse](t, svc, &pb.HeartbeatRequest{GroupId: group, MemberId: b, GenerationId: gen})
	if hb.GetErrorCode() != coordinator.ErrRebalanceInProgress {
		t.Fatalf("owner's heartbeat: %d", hb.GetErrorCode())
	}
	if s := svc.GuardStats(); s.Withheld != 1 || s.FollowUps != 1 {
		t.Fatalf("stats %+v", s)
	}
	out := logs.String()
	for _, want := range []string{"ownership guard withheld", "ownership guard starts a follow-up"} {
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, want) {
				line = l
			}
		}
		if !strings.Contains(line, "group="+group) {
			t.Fatalf("no %q line with the group in:\n%s", want, out)
		}
	}
}
