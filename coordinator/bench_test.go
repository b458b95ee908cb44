package coordinator

import (
	"fmt"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// stableGroup returns a Stable group of ten members at generation 5, and
// the Effects to reuse with it.
func stableGroup() (*Group, *Effects) {
	cfg := DefaultConfig()
	g := Restore(&cfg, stableRecord(10), nil, t0)
	fx := &Effects{}
	g.Start(t0, fx)
	return g, fx
}

// BenchmarkHeartbeat is one heartbeat of a Stable member with a reused
// Effects: it must not allocate.
func BenchmarkHeartbeat(b *testing.B) {
	g, fx := stableGroup()
	req := &pb.HeartbeatRequest{GroupId: "g", MemberId: "m3", GenerationId: 5}
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		fx.Reset()
		now = now.Add(time.Millisecond)
		if code := g.Heartbeat(now, req, fx); code != ErrNone {
			b.Fatalf("heartbeat %d", code)
		}
	}
	// The last heartbeat moved the session's end: past the armed timer
	// (sessions.go), or by arming it when it was the first.
	m := g.members.get("m3")
	if want := g.sinceEpoch(now) + int64(m.sessionTimeout()); m.sessionUntil != want && (len(fx.Timers) != 1 || fx.Timers[0].Key != memberKey("m3")) {
		b.Fatalf("session ends at %d, want %d; effects %v", m.sessionUntil, want, fx.Timers)
	}
}

// BenchmarkHeartbeatColdMembers is a heartbeat of one of 100,000 members
// in 2,000 groups, taken in an order that leaves little of the last ones
// in cache, as a coordinator's heartbeats do: it prices the member lookup
// and the cache lines a heartbeat touches.
func BenchmarkHeartbeatColdMembers(b *testing.B) {
	const groups, members = 2000, 50
	cfg := DefaultConfig()
	gs := make([]*Group, groups)
	reqs := make([]*pb.HeartbeatRequest, 0, groups*members)
	fx := &Effects{}
	for i := range gs {
		rec := stableRecord(members)
		for _, m := range rec.Members {
			m.MemberId = fmt.Sprintf("consumer-%d-%s-%d", i, "0f8fad5b-d9cb-469f-a165-70867728950e", len(reqs)%members)
			reqs = append(reqs, &pb.HeartbeatRequest{GroupId: "g", MemberId: m.MemberId, GenerationId: 5})
		}
		rec.Leader = strp(rec.Members[0].MemberId)
		gs[i] = Restore(&cfg, rec, nil, t0)
		fx.Reset()
		gs[i].Start(t0, fx)
	}
	// A fixed stride through the members: consecutive heartbeats are of
	// far apart groups and members.
	const stride = 7919 // prime, so every member comes up
	now := t0
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		n = (n + stride) % len(reqs)
		fx.Reset()
		now = now.Add(time.Microsecond)
		if code := gs[n/members].Heartbeat(now, reqs[n], fx); code != ErrNone {
			b.Fatalf("heartbeat %d", code)
		}
	}
}

// TestHeartbeatDoesNotAllocate keeps the zero-allocation property checked by
// plain test runs.
func TestHeartbeatDoesNotAllocate(t *testing.T) {
	g, fx := stableGroup()
	req := &pb.HeartbeatRequest{GroupId: "g", MemberId: "m3", GenerationId: 5}
	allocs := testing.AllocsPerRun(1000, func() {
		fx.Reset()
		g.Heartbeat(t0, req, fx)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per heartbeat", allocs)
	}
}

// commitOnce is one OffsetCommit of one partition by a Stable member and the
// write's completion, with a reused Effects.
func commitOnce(tb testing.TB, g *Group, fx *Effects, req *pb.OffsetCommitRequest, now time.Time) {
	fx.Reset()
	g.Commit(now, req, 1, fx)
	if len(fx.Persists) != 1 {
		tb.Fatalf("commit wrote %d times", len(fx.Persists))
	}
	token := fx.Persists[0].Token
	fx.Reset()
	g.OnPersisted(now, token, nil, fx)
	if len(fx.Replies) != 1 {
		tb.Fatalf("commit answered %d times", len(fx.Replies))
	}
	if code := fx.Replies[0].Msg.(*pb.OffsetCommitResponse).GetTopics()[0].GetPartitions()[0].GetErrorCode(); code != ErrNone {
		tb.Fatalf("commit error %d", code)
	}
}

func commitRequest() *pb.OffsetCommitRequest {
	return &pb.OffsetCommitRequest{GroupId: "g", MemberId: "m3", GenerationId: 5, RetentionTimeMs: -1,
		Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 3, Offset: 42, LeaderEpoch: -1, CommitTimestampMs: -1}}}}}
}

// BenchmarkCommit is commitOnce: the machine's part of a durable commit.
func BenchmarkCommit(b *testing.B) {
	g, fx := stableGroup()
	req := commitRequest()
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		commitOnce(b, g, fx, req, now)
	}
}

// TestCommitAllocations keeps a one-partition commit at three allocations:
// the write with its record, the committed offset (its own: the store
// keeps it) and the answer.
func TestCommitAllocations(t *testing.T) {
	g, fx := stableGroup()
	req := commitRequest()
	commitOnce(t, g, fx, req, t0)
	if allocs := testing.AllocsPerRun(1000, func() { commitOnce(t, g, fx, req, t0) }); allocs > 3 {
		t.Fatalf("%v allocations per commit, want at most 3", allocs)
	}
	if o := g.Fetch(&pb.OffsetFetchRequest{GroupId: "g", Topics: []*pb.TopicPartitions{{Name: "t", Partitions: []int32{3}}}}); o.GetTopics()[0].GetPartitions()[0].GetOffset() != 42 {
		t.Fatalf("fetch %v", o)
	}
}

// BenchmarkJoin1000: 1,000 JoinGroup v3 members join an Empty group (initial
// delay 0), the join timer fires, the leader syncs: time to Stable.
func BenchmarkJoin1000(b *testing.B) {
	const n = 1000
	cfg := DefaultConfig()
	cfg.InitialRebalanceDelay = 0
	reqs := make([]*pb.JoinGroupRequest, n)
	suffixes := make([]string, n)
	handles := make([]ReplyTo, n)
	for i := range n {
		reqs[i] = &pb.JoinGroupRequest{GroupId: "g", ApiVersion: 3, ClientId: "consumer", SessionTimeoutMs: 45_000, RebalanceTimeoutMs: 300_000,
			ProtocolType: "consumer", Protocols: []*pb.Protocol{{Name: "range", Metadata: consumerMeta("orders", "payments")}}}
		suffixes[i] = fmt.Sprintf("%08d", i)
		handles[i] = i
	}
	assignments := make([]*pb.SyncGroupAssignment, n)
	for i := range n {
		assignments[i] = &pb.SyncGroupAssignment{MemberId: "consumer-" + suffixes[i], Assignment: []byte{0, 0, 0, 0, 0, 1, 0, 6, 'o', 'r', 'd', 'e', 'r', 's', 0, 0, 0, 1, 0, 0, 0, byte(i % 64)}}
	}
	sync := &pb.SyncGroupRequest{GroupId: "g", GenerationId: 1, MemberId: "consumer-" + suffixes[0], Assignments: assignments}
	var fx Effects
	b.ReportAllocs()
	for b.Loop() {
		g := New("g", &cfg, t0)
		fx.Reset()
		g.Start(t0, &fx)
		for i := range n {
			fx.Reset()
			g.Join(t0, reqs[i], suffixes[i], handles[i], &fx)
		}
		for g.State() == PreparingRebalance {
			fx.Reset()
			g.OnTimer(t0, TimerKey{Kind: TimerJoin}, &fx)
		}
		// The answers follow the write that reserves the generation.
		if g.State() != CompletingRebalance || len(fx.Persists) != 1 {
			b.Fatalf("state %v, %d writes", g.State(), len(fx.Persists))
		}
		reserve := fx.Persists[0].Token
		fx.Reset()
		g.OnPersisted(t0, reserve, nil, &fx)
		if len(fx.Replies) != n {
			b.Fatalf("%d join answers", len(fx.Replies))
		}
		fx.Reset()
		g.Sync(t0, sync, -1, &fx)
		if len(fx.Persists) != 1 {
			b.Fatalf("persists %d", len(fx.Persists))
		}
		tok := fx.Persists[0].Token
		fx.Reset()
		g.OnPersisted(t0, tok, nil, &fx)
		if g.State() != Stable || g.NumMembers() != n {
			b.Fatalf("state %v with %d members", g.State(), g.NumMembers())
		}
	}
}

// BenchmarkJoin1000Owned is BenchmarkJoin1000 with version 3 subscriptions
// and a leader plan that moves every partition to the next member. With
// owned=true every member lists one owned partition (cooperative): the
// ownership guard decodes every subscription and assignment and withholds
// all of them. With owned=false the members list nothing (eager, as kgo's
// range members do): the guard only decodes the subscriptions.
func BenchmarkJoin1000Owned(b *testing.B) {
	for _, owned := range []bool{true, false} {
		for _, guard := range []bool{true, false} {
			b.Run(fmt.Sprintf("owned=%v/guard=%v", owned, guard), func(b *testing.B) { benchJoinOwned(b, guard, owned) })
		}
	}
}

func benchJoinOwned(b *testing.B, guard, owned bool) {
	const n = 1000
	cfg := DefaultConfig()
	cfg.InitialRebalanceDelay = 0
	cfg.OwnershipGuard = guard
	reqs := make([]*pb.JoinGroupRequest, n)
	suffixes := make([]string, n)
	handles := make([]ReplyTo, n)
	for i := range n {
		var tps []assignor.TopicPartitions
		if owned {
			tps = []assignor.TopicPartitions{{Topic: "orders", Partitions: []int32{int32(i)}}}
		}
		sub := assignor.NewSubscription([]string{"orders"}, tps, 1, "", nil)
		reqs[i] = &pb.JoinGroupRequest{GroupId: "g", ApiVersion: 3, ClientId: "consumer", SessionTimeoutMs: 45_000, RebalanceTimeoutMs: 300_000,
			ProtocolType: "consumer", Protocols: []*pb.Protocol{{Name: "cooperative-sticky", Metadata: sub.AppendTo(nil)}}}
		suffixes[i] = fmt.Sprintf("%08d", i)
		handles[i] = i
	}
	assignments := make([]*pb.SyncGroupAssignment, n)
	for i := range n {
		a := assignor.Assignment{Version: 3, Topics: []assignor.TopicPartitions{{Topic: "orders", Partitions: []int32{int32((i + 1) % n)}}}}
		assignments[i] = &pb.SyncGroupAssignment{MemberId: "consumer-" + suffixes[i], Assignment: a.AppendTo(nil)}
	}
	sync := &pb.SyncGroupRequest{GroupId: "g", GenerationId: 1, MemberId: "consumer-" + suffixes[0], Assignments: assignments}
	var fx Effects
	b.ReportAllocs()
	for b.Loop() {
		g := New("g", &cfg, t0)
		fx.Reset()
		g.Start(t0, &fx)
		for i := range n {
			fx.Reset()
			g.Join(t0, reqs[i], suffixes[i], handles[i], &fx)
		}
		for g.State() == PreparingRebalance {
			fx.Reset()
			g.OnTimer(t0, TimerKey{Kind: TimerJoin}, &fx)
		}
		reserve := fx.Persists[0].Token
		fx.Reset()
		g.OnPersisted(t0, reserve, nil, &fx)
		fx.Reset()
		g.Sync(t0, sync, -1, &fx)
		tok := fx.Persists[0].Token
		fx.Reset()
		g.OnPersisted(t0, tok, nil, &fx)
		want := uint64(0)
		if guard && owned {
			want = n
		}
		if g.State() != Stable || g.GuardStats().Withheld != want {
			b.Fatalf("state %v, %+v", g.State(), g.GuardStats())
		}
	}
}
