package assignor

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Benchmarks against franz-go's balancers (kgo.GroupBalancer) on identical
// inputs. See BENCHMARKS.md for the command and the recorded numbers.
//
// Shapes (names in benchmark paths):
//
//	uniform     M members all subscribed to T topics of N partitions
//	nonuniform  M-1 members on all topics, one member on topic 0 only
//	            (Kafka's testLargeAssignmentAndGroupWithNonEqualSubscription)
//	fresh       nobody owns anything
//	join        every member owns its share of the fresh plan (generation 1)
//	            and one new member joins
//
// The big shapes (2,000 members x 1,000,000 partitions over 500 topics) are
// skipped under -short.

type benchInput struct {
	ids    []string
	metas  [][]byte
	topics map[string]int32
	// members is metas decoded once with one Decoder (topic names shared).
	members []Member
}

type shapeKey struct {
	bal        string
	M, T, N    int
	nonUniform bool
	join       bool
}

var (
	shapeMu    sync.Mutex
	shapeCache = map[shapeKey]*benchInput{}
)

func resetShapes() {
	shapeMu.Lock()
	clear(shapeCache)
	shapeMu.Unlock()
	runtime.GC()
}

func topicName(i int) string { return fmt.Sprintf("topic-%04d", i) }

// buildShape builds (and caches) the inputs for one shape, with the
// subscription metadata the given balancer's members would send.
func buildShape(b testing.TB, bal Balancer, k shapeKey) *benchInput {
	shapeMu.Lock()
	defer shapeMu.Unlock()
	k.bal = bal.ProtocolName()
	if in, ok := shapeCache[k]; ok {
		return in
	}
	topics := make(map[string]int32, k.T)
	all := make([]string, k.T)
	for i := range k.T {
		all[i] = topicName(i)
		topics[all[i]] = int32(k.N)
	}
	subsOf := func(m int) []string {
		if k.nonUniform && m == k.M-1 {
			return all[:1]
		}
		return all
	}
	var owned map[string][]TopicPartitions
	if k.join {
		fresh := k
		fresh.join = false
		base := buildShape2(b, bal, fresh, topics, all, subsOf, nil)
		owned = map[string][]TopicPartitions{}
		plan := bal.Balance(base.members, topics)
		for i := range plan.Len() {
			owned[plan.MemberID(i)] = plan.Topics(i)
		}
	}
	in := buildShape2(b, bal, k, topics, all, subsOf, owned)
	shapeCache[k] = in
	return in
}

func buildShape2(_ testing.TB, bal Balancer, k shapeKey, topics map[string]int32, all []string, subsOf func(int) []string, owned map[string][]TopicPartitions) *benchInput {
	in := &benchInput{topics: topics}
	n := k.M
	if k.join {
		n++
	}
	for m := range n {
		id := fmt.Sprintf("member-%05d", m)
		ts := all
		if m < k.M {
			ts = subsOf(m)
		}
		gen := DefaultGeneration
		if o, ok := owned[id]; ok && len(o) > 0 {
			gen = 1
		}
		in.ids = append(in.ids, id)
		in.metas = append(in.metas, bal.Metadata(MemberState{Topics: ts, Owned: owned[id], Generation: gen}))
	}
	var d Decoder
	for i, meta := range in.metas {
		var s Subscription
		if err := d.DecodeSubscription(meta, &s); err != nil {
			panic(err)
		}
		in.members = append(in.members, Member{ID: in.ids[i], Subscription: s})
	}
	return in
}

func (in *benchInput) kmsgMembers() []kmsg.JoinGroupResponseMember {
	out := make([]kmsg.JoinGroupResponseMember, len(in.ids))
	for i := range in.ids {
		out[i] = kmsg.NewJoinGroupResponseMember()
		out[i].MemberID = in.ids[i]
		out[i].ProtocolMetadata = in.metas[i]
	}
	return out
}

func franzFor(bal Balancer) kgo.GroupBalancer {
	switch bal.ProtocolName() {
	case "range":
		return kgo.RangeBalancer()
	case "roundrobin":
		return kgo.RoundRobinBalancer()
	case "sticky":
		return kgo.StickyBalancer()
	}
	return kgo.CooperativeStickyBalancer()
}

// benchPair runs the same assignment through this package and franz-go.
// Decoding the member metadata is outside the timed region for both, and
// each side gets one untimed warm-up call (this package reuses scratch
// buffers across calls; both sides get a heap already grown to size).
func benchPair(b *testing.B, bal Balancer, k shapeKey) {
	b.Run("cohort", func(b *testing.B) {
		in := buildShape(b, bal, k)
		bal.Balance(in.members, in.topics) // warm-up, untimed
		runtime.GC()
		b.ReportAllocs()
		b.ResetTimer()
		var cpu cpuMeter
		cpu.start()
		for range b.N {
			plan := bal.Balance(in.members, in.topics)
			if plan.Len() != len(in.ids) {
				b.Fatal("bad plan")
			}
		}
		cpu.stop()
		cpu.report(b)
	})
	b.Run("franz", func(b *testing.B) {
		in := buildShape(b, bal, k)
		fb := franzFor(bal)
		if mb, _, err := fb.MemberBalancer(in.kmsgMembers()); err == nil { // warm-up, untimed
			franzBalance(b, mb, in.topics)
		}
		b.ReportAllocs()
		b.ResetTimer()
		var cpu cpuMeter
		for range b.N {
			b.StopTimer()
			mb, _, err := fb.MemberBalancer(in.kmsgMembers())
			if err != nil {
				b.Fatal(err)
			}
			runtime.GC()
			b.StartTimer()
			cpu.start()
			if franzBalance(b, mb, in.topics) == nil {
				b.Fatal("nil plan")
			}
			cpu.stop()
		}
		cpu.report(b)
	})
}

// franzBalance calls Balance the way kgo does: through BalanceOrError when
// the member balancer implements it.
func franzBalance(b *testing.B, mb kgo.GroupMemberBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	if be, ok := mb.(kgo.GroupMemberBalancerOrError); ok {
		plan, err := be.BalanceOrError(topics)
		if err != nil {
			b.Fatal(err)
		}
		return plan
	}
	return mb.Balance(topics)
}

func bigShape(nonUniform, join bool) shapeKey {
	return shapeKey{M: 2000, T: 500, N: 2000, nonUniform: nonUniform, join: join}
}

func skipBig(b *testing.B) {
	if testing.Short() {
		b.Skip("big shape skipped under -short")
	}
}

// BenchmarkBig: 2,000 members x 1,000,000 partitions over 500 topics.
func BenchmarkBig(b *testing.B) {
	skipBig(b)
	type c struct {
		name string
		bal  Balancer
		k    shapeKey
	}
	cases := []c{
		{"range/uniform/fresh", Range(), bigShape(false, false)},
		{"range/nonuniform/fresh", Range(), bigShape(true, false)},
		{"roundrobin/uniform/fresh", RoundRobin(), bigShape(false, false)},
		{"roundrobin/nonuniform/fresh", RoundRobin(), bigShape(true, false)},
		{"sticky/uniform/fresh", Sticky(), bigShape(false, false)},
		{"sticky/uniform/join", Sticky(), bigShape(false, true)},
		{"sticky/nonuniform/fresh", Sticky(), bigShape(true, false)},
		{"sticky/nonuniform/join", Sticky(), bigShape(true, true)},
		{"coop/uniform/fresh", CooperativeSticky(), bigShape(false, false)},
		{"coop/uniform/join", CooperativeSticky(), bigShape(false, true)},
		{"coop/nonuniform/fresh", CooperativeSticky(), bigShape(true, false)},
		{"coop/nonuniform/join", CooperativeSticky(), bigShape(true, true)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) { benchPair(b, c.bal, c.k) })
		resetShapes() // keep the live heap small: GC work would distort timings
	}
}

// BenchmarkTypical: 100 members x 1,000 partitions (10 topics of 100).
func BenchmarkTypical(b *testing.B) {
	k := shapeKey{M: 100, T: 10, N: 100}
	kj := k
	kj.join = true
	for _, bal := range []Balancer{Range(), RoundRobin(), Sticky(), CooperativeSticky()} {
		b.Run(bal.ProtocolName()+"/fresh", func(b *testing.B) { benchPair(b, bal, k) })
	}
	for _, bal := range []Balancer{Sticky(), CooperativeSticky()} {
		b.Run(bal.ProtocolName()+"/join", func(b *testing.B) { benchPair(b, bal, kj) })
	}
}

// BenchmarkLeader is the leader's whole job at 2,000 x 1,000,000 with
// cooperative-sticky and every member owning its share (one joins): decode
// 2,001 v3 subscriptions, assign, encode the SyncGroup assignments. It
// reports the peak heap seen while the operation runs (sampled every 100µs,
// including the encoded input held by the benchmark).
func BenchmarkLeader(b *testing.B) {
	skipBig(b)
	bal := CooperativeSticky()
	k := bigShape(false, true)
	defer resetShapes()
	input := func(b *testing.B) *benchInput {
		resetShapes()
		in := buildShape(b, bal, k)
		in = &benchInput{ids: in.ids, metas: in.metas, topics: in.topics} // encoded input only
		resetShapes()
		return in
	}
	cohortLeader := func(b *testing.B, in *benchInput) {
		var d Decoder
		members := make([]Member, len(in.metas))
		for i, meta := range in.metas {
			members[i].ID = in.ids[i]
			if err := d.DecodeSubscription(meta, &members[i].Subscription); err != nil {
				b.Fatal(err)
			}
		}
		if out := bal.Balance(members, in.topics).Encode(); len(out) != len(in.ids) {
			b.Fatal("bad plan")
		}
	}
	fb := franzFor(bal)
	franzLeader := func(b *testing.B, in *benchInput, kms []kmsg.JoinGroupResponseMember) {
		mb, _, err := fb.MemberBalancer(kms)
		if err != nil {
			b.Fatal(err)
		}
		if out := franzBalance(b, mb, in.topics).IntoSyncAssignment(); len(out) != len(in.ids) {
			b.Fatal("bad plan")
		}
	}
	for _, side := range []string{"cohort", "franz"} {
		b.Run(side, func(b *testing.B) {
			in := input(b)
			// prepare is untimed; run is the measured leader work.
			var kms []kmsg.JoinGroupResponseMember
			prepare := func() {}
			run := func() { cohortLeader(b, in) }
			if side == "franz" {
				prepare = func() { kms = in.kmsgMembers() }
				run = func() { franzLeader(b, in, kms) }
			}
			prepare()
			run() // warm-up, untimed
			b.ReportAllocs()
			b.ResetTimer()
			var peak uint64
			var cpu cpuMeter
			for range b.N {
				b.StopTimer()
				prepare()
				runtime.GC()
				stop := sampleHeap(&peak)
				b.StartTimer()
				cpu.start()
				run()
				cpu.stop()
				b.StopTimer()
				stop()
				b.StartTimer()
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			cpu.report(b)
		})
	}
}

// sampleHeap records the maximum of the heap's object bytes into peak until
// the returned function is called.
func sampleHeap(peak *uint64) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for !done.Load() {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > *peak {
				*peak = v
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	return func() { done.Store(true); wg.Wait() }
}

// BenchmarkScale doubles the partition count (500 topics of 2,000, then of
// 4,000 partitions: 1M, then 2M) at 2,000 members; the time ratio between
// the two sizes shows that nothing grows as partitions x members. Both sizes
// exceed the CPU caches, so the ratio is not skewed by one of them fitting.
func BenchmarkScale(b *testing.B) {
	skipBig(b)
	for _, n := range []int{2000, 4000} {
		for _, c := range []struct {
			name string
			bal  Balancer
			non  bool
			join bool
		}{
			{"sticky/uniform/fresh", Sticky(), false, false},
			{"coop/uniform/join", CooperativeSticky(), false, true},
			{"coop/nonuniform/join", CooperativeSticky(), true, true},
			{"roundrobin/nonuniform/fresh", RoundRobin(), true, false},
		} {
			k := shapeKey{M: 2000, T: 500, N: n, nonUniform: c.non, join: c.join}
			b.Run(fmt.Sprintf("%s/P=%dk", c.name, 500*n/1000), func(b *testing.B) {
				in := buildShape(b, c.bal, k)
				c.bal.Balance(in.members, in.topics) // warm-up, untimed
				runtime.GC()
				b.ReportAllocs()
				b.ResetTimer()
				var cpu cpuMeter
				cpu.start()
				for range b.N {
					c.bal.Balance(in.members, in.topics)
				}
				cpu.stop()
				cpu.report(b)
			})
			resetShapes()
		}
	}
}

// cpuMeter accumulates the process's CPU time (user+system, all threads)
// over the measured regions. On a shared machine it is a load-independent
// companion to wall time; with GOMAXPROCS=2 it includes concurrent GC work,
// so it can exceed wall time on an idle machine.
type cpuMeter struct {
	total, t0 time.Duration
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (c *cpuMeter) start() { c.t0 = processCPU() }
func (c *cpuMeter) stop()  { c.total += processCPU() - c.t0 }
func (c *cpuMeter) report(b *testing.B) {
	b.ReportMetric(float64(c.total.Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
