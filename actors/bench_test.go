package actors

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stableStore returns a store holding groups x members Stable groups, as a
// coordinator finds them after a restart.
func stableStore(groups, members int) *raftfsm.MemoryStore {
	s := raftfsm.NewMemoryStore()
	for g := range groups {
		gid := fmt.Sprintf("group-%d", g)
		rec := &pb.GroupRecord{GroupId: gid, ProtocolType: "consumer", Generation: 1, ProtocolName: strPtr("range")}
		for m := range members {
			rec.Members = append(rec.Members, &pb.MemberRecord{
				MemberId: fmt.Sprintf("m-%d", m), ClientId: "bench", ClientHost: "/127.0.0.1",
				SessionTimeoutMs: 45_000, RebalanceTimeoutMs: 300_000,
				Subscription: []byte{0, 0, 0, 0, 0, 0}, Assignment: []byte{0, 0},
			})
		}
		rec.Leader = strPtr(rec.Members[0].MemberId)
		s.Append(gid, []*pb.Record{{Kind: &pb.Record_Group{Group: rec}}}, nil, func(error) {})
	}
	return s
}

func strPtr(s string) *string { return &s }

// startStable starts a service over stableStore(groups, members) and returns
// it with one heartbeat request per member. ListGroups waits for the stored
// groups to load, so the service is warm when it returns.
func startStable(b *testing.B, groups, members int) (*Service, []*pb.HeartbeatRequest) {
	return startStableWith(b, coordinator.DefaultConfig(), groups, members)
}

// startStableWith is startStable with the given configuration.
func startStableWith(b *testing.B, cfg coordinator.Config, groups, members int) (*Service, []*pb.HeartbeatRequest) {
	b.Helper()
	system := actor.NewActorSystem(quietLogs())
	svc, err := Start(system, Options{Config: cfg, Store: stableStore(groups, members), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { svc.Stop(); system.Shutdown() })
	r, err := svc.Call(context.Background(), &pb.ListGroupsRequest{})
	if err != nil || len(r.(*pb.ListGroupsResponse).Groups) != groups {
		b.Fatalf("groups loaded: %v %v", r, err)
	}
	reqs := make([]*pb.HeartbeatRequest, groups*members)
	for i := range reqs {
		reqs[i] = &pb.HeartbeatRequest{GroupId: fmt.Sprintf("group-%d", i/members), GenerationId: 1, MemberId: fmt.Sprintf("m-%d", i%members)}
	}
	return svc, reqs
}

// BenchmarkHeartbeats: closed-loop heartbeats through the router and group
// actors, 10,000 groups x 10 members on one node, 16 x GOMAXPROCS callers.
func BenchmarkHeartbeats(b *testing.B) {
	svc, reqs := startStable(b, 10_000, 10)
	ctx := context.Background()
	var failed atomic.Int64
	b.SetParallelism(16) // x GOMAXPROCS callers, each with one request in flight
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	b.RunParallel(func(pb_ *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		for pb_.Next() {
			res, err := svc.Call(ctx, reqs[rng.IntN(len(reqs))])
			if err != nil || res.(*pb.HeartbeatResponse).ErrorCode != coordinator.ErrNone {
				failed.Add(1)
			}
		}
	})
	el, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d heartbeats failed", f)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "heartbeats/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/heartbeat")
}

// BenchmarkHeartbeatCadence: 100,000 members (10,000 groups of 10)
// heartbeating at a client's pace, each once every 3 s, through the router
// and group actors, for 9 s of wall time an iteration (run it with
// -benchtime 1x): the CPU per heartbeat, with the periodic session check
// that carries sessions over takeovers (every second in each group) and
// without it, so the check's share of a realistic load shows.
func BenchmarkHeartbeatCadence(b *testing.B) {
	const groups, members, every, span = 10_000, 10, 3 * time.Second, 9 * time.Second
	if testing.Short() {
		b.Skip("a paced load of 9 s a run")
	}
	for _, mode := range []struct {
		name     string
		interval time.Duration
	}{{"checks", time.Second}, {"off", 0}} {
		b.Run(mode.name, func(b *testing.B) {
			cfg := coordinator.DefaultConfig()
			cfg.SessionCheckInterval = mode.interval
			svc, reqs := startStableWith(b, cfg, groups, members)
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(1, 2))
			rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
			const tick = 10 * time.Millisecond
			perTick := len(reqs) / int(every/tick)
			var sent, failed atomic.Int64
			var cpu time.Duration
			for b.Loop() {
				c0 := cpuTime()
				work := make(chan *pb.HeartbeatRequest, perTick)
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						for req := range work {
							res, err := svc.Call(ctx, req)
							if err != nil || res.(*pb.HeartbeatResponse).ErrorCode != coordinator.ErrNone {
								failed.Add(1)
							}
							sent.Add(1)
						}
					})
				}
				t := time.NewTicker(tick)
				next := 0
				for start := time.Now(); time.Since(start) < span; <-t.C {
					for range perTick {
						work <- reqs[next]
						next = (next + 1) % len(reqs)
					}
				}
				t.Stop()
				close(work)
				wg.Wait()
				cpu += cpuTime() - c0
			}
			if f := failed.Load(); f > 0 {
				b.Fatalf("%d heartbeats failed", f)
			}
			b.ReportMetric(float64(sent.Load())/(float64(b.N)*span.Seconds()), "heartbeats/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(sent.Load()), "cpu-ns/heartbeat")
		})
	}
}

// BenchmarkTakeover: a node takes over 10,000 stored groups of 10 members
// (Deactivate, then activate and wait until every group is loaded), with
// the members' sessions carried over (ActivateAfter: each group reads its
// MemberSessions and estimates every member's session end) and with fresh
// sessions (Activate).
func BenchmarkTakeover(b *testing.B) {
	for _, carry := range []bool{true, false} {
		name := "carried"
		if !carry {
			name = "fresh"
		}
		b.Run(name, func(b *testing.B) {
			svc, _ := startStable(b, 10_000, 10)
			var cpu time.Duration
			for b.Loop() {
				if err := svc.Deactivate(time.Minute); err != nil {
					b.Fatal(err)
				}
				c0 := cpuTime()
				var err error
				if carry {
					err = svc.ActivateAfter(time.Minute, time.Now().Add(-time.Second))
				} else {
					err = svc.Activate(time.Minute)
				}
				if err != nil {
					b.Fatal(err)
				}
				for svc.Loading() > 0 {
					time.Sleep(time.Millisecond)
				}
				cpu += cpuTime() - c0
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/1000, "cpu-ms/takeover")
		})
	}
}

// BenchmarkHeartbeatOneGroupSeq: one caller, one group: the per-request cost
// of the local path without contention or a large heap.
func BenchmarkHeartbeatOneGroupSeq(b *testing.B) {
	svc, reqs := startStable(b, 1, 10)
	ctx := context.Background()
	req := reqs[1]
	svc.Call(ctx, req)
	b.ReportAllocs()
	c0 := cpuTime()
	for b.Loop() {
		svc.Call(ctx, req)
	}
	b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkHeartbeatScaling: one caller, heartbeats to random members of
// N groups x 10 members: how the per-request cost grows with the working set.
func BenchmarkHeartbeatScaling(b *testing.B) {
	for _, groups := range []int{1, 100, 1000, 10000} {
		b.Run(fmt.Sprint(groups), func(b *testing.B) {
			svc, reqs := startStable(b, groups, 10)
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(1, 2))
			c0 := cpuTime()
			b.ResetTimer()
			for b.Loop() {
				svc.Call(ctx, reqs[rng.IntN(len(reqs))])
			}
			b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkJoin1000: one 1,000-member group forms from nothing (initial
// delay 0). Every member behaves like a Kafka consumer: the v4+ two-step
// JoinGroup, SyncGroup, heartbeats after that, and a re-join whenever the
// coordinator answers REBALANCE_IN_PROGRESS. One op is the time until all
// members hold an assignment of the same generation.
func BenchmarkJoin1000(b *testing.B) {
	const n = 1000
	cfg := coordinator.DefaultConfig()
	cfg.InitialRebalanceDelay = 0
	system := actor.NewActorSystem(quietLogs())
	svc, err := Start(system, Options{Config: cfg, Store: raftfsm.NewMemoryStore(), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer system.Shutdown()
	defer svc.Stop()
	var rounds int
	for i := 0; b.Loop(); i++ {
		t := &joinTracker{n: n, synced: map[int32]int{}, done: make(chan struct{})}
		ctx, cancel := context.WithCancel(context.Background())
		group := fmt.Sprintf("join-%d", i)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { memberLoop(ctx, b, svc, group, t) })
		}
		select {
		case <-t.done:
		case <-time.After(2 * time.Minute):
			b.Fatal("the group did not stabilise")
		}
		cancel()
		wg.Wait()
		rounds += int(t.gen)
	}
	b.ReportMetric(float64(rounds)/float64(b.N), "generations/op")
}

type joinTracker struct {
	mu     sync.Mutex
	n      int
	synced map[int32]int
	gen    int32
	done   chan struct{}
}

func (t *joinTracker) synced1(gen int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.synced[gen]++
	if t.synced[gen] == t.n && t.gen == 0 {
		t.gen = gen
		close(t.done)
	}
}

// memberLoop is a minimal Kafka consumer's group loop.
func memberLoop(ctx context.Context, b *testing.B, svc *Service, group string, t *joinTracker) {
	memberID := ""
	call := func(req proto.Message) proto.Message {
		res, err := svc.Call(ctx, req)
		if err != nil {
			if ctx.Err() == nil {
				b.Error(err)
			}
			return nil
		}
		return res
	}
	for ctx.Err() == nil {
		res := call(&pb.JoinGroupRequest{GroupId: group, MemberId: memberID, ClientId: "bench", ApiVersion: 7,
			SessionTimeoutMs: 45_000, RebalanceTimeoutMs: 60_000, ProtocolType: "consumer",
			Protocols: []*pb.Protocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 0}}}})
		if res == nil {
			return
		}
		j := res.(*pb.JoinGroupResponse)
		switch j.ErrorCode {
		case coordinator.ErrNone:
		case coordinator.ErrMemberIDRequired:
			memberID = j.MemberId
			continue
		case coordinator.ErrUnknownMemberID:
			memberID = ""
			continue
		default:
			continue
		}
		memberID = j.MemberId
		sreq := &pb.SyncGroupRequest{GroupId: group, GenerationId: j.GenerationId, MemberId: memberID}
		if j.Leader == memberID {
			for _, m := range j.Members {
				sreq.Assignments = append(sreq.Assignments, &pb.SyncGroupAssignment{MemberId: m.MemberId, Assignment: []byte{0, 0, 0, 0, 0, 0, 0, 0}})
			}
		}
		res = call(sreq)
		if res == nil {
			return
		}
		if res.(*pb.SyncGroupResponse).ErrorCode != coordinator.ErrNone {
			continue
		}
		t.synced1(j.GenerationId)
		// Stable: heartbeat until the coordinator asks for a re-join.
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
			res = call(&pb.HeartbeatRequest{GroupId: group, GenerationId: j.GenerationId, MemberId: memberID})
			if res == nil {
				return
			}
			if res.(*pb.HeartbeatResponse).ErrorCode != coordinator.ErrNone {
				break
			}
		}
	}
}
