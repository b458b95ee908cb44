package member_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/assignor"
	clustertest "github.com/cohort-coord/cohort/cluster-test"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// countingTransport counts the heartbeats a member sends.
type countingTransport struct {
	member.Transport
	heartbeats *atomic.Int64
}

func (c countingTransport) Send(req any, done func(any, error)) {
	if _, ok := req.(*pb.HeartbeatRequest); ok {
		c.heartbeats.Add(1)
	}
	c.Transport.Send(req, done)
}

func counting(f member.TransportFactory, n *atomic.Int64) member.TransportFactory {
	return func(env member.TransportEnv) (member.Transport, error) {
		tr, err := f(env)
		if err != nil {
			return nil, err
		}
		return countingTransport{tr, n}, nil
	}
}

func cpuSelf() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuOf reads a process's user+system CPU time from /proc.
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100) // USER_HZ
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// BenchmarkIdleMembers starts 10,000 member actors (1,000 groups of 10, one
// process, native transport) against one cohortd, waits until every one is
// stable, then lets them heartbeat for a while. It reports the memory each
// member adds (heap and stacks after GC) and the CPU per heartbeat of the
// member process and of cohortd. Run with -benchtime=1x.
func BenchmarkIdleMembers(b *testing.B) {
	members := 10000
	if v := os.Getenv("COHORT_BENCH_MEMBERS"); v != "" {
		members, _ = strconv.Atoi(v)
	}
	const perGroup = 10
	c := clustertest.StartCluster(b, 1)
	node := c.Node(0)
	system := c.Admin.System()
	var hb atomic.Int64
	tf := counting(member.Native(node.RemoteAddr), &hb)
	opts := []member.Opt{
		member.Topics("t"), member.Partitions("t", perGroup), member.WithTransport(tf),
		member.SessionTimeout(30 * time.Second), member.HeartbeatInterval(2 * time.Second),
		member.RebalanceTimeout(30 * time.Second), member.RequestTimeout(20 * time.Second),
		member.Balancers(assignor.CooperativeSticky()),
	}
	for range b.N {
		before := heapInUse()
		goroutines := runtime.NumGoroutine()
		ms := make([]*member.Member, 0, members)
		start := time.Now()
		// Members start in waves (COHORT_BENCH_WAVE at a time, default all
		// at once), each wave waiting until every member is stable.
		wave := members
		if v := os.Getenv("COHORT_BENCH_WAVE"); v != "" {
			wave, _ = strconv.Atoi(v)
		}
		for i := range members {
			m, err := member.Start(system, fmt.Sprintf("idle-%d", i/perGroup), opts...)
			if err != nil {
				b.Fatal(err)
			}
			ms = append(ms, m)
			if len(ms)%wave != 0 && len(ms) != members {
				continue
			}
			for {
				stable := 0
				for _, m := range ms {
					if m.Phase().String() == "Stable" && len(m.Assignment()) > 0 {
						stable++
					}
				}
				if stable == len(ms) {
					break
				}
				if time.Since(start) > 10*time.Minute {
					b.Fatalf("%d of %d members stable after 10 minutes", stable, len(ms))
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		b.Logf("%d members stable in %v", members, time.Since(start).Round(time.Millisecond))
		time.Sleep(3 * time.Second) // let the joins' garbage go
		after := heapInUse()
		b.ReportMetric(float64(after-before)/float64(members), "B/member")
		b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/float64(members), "goroutines/member")

		if path := os.Getenv("COHORT_BENCH_CPUPROFILE"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			pprof.StartCPUProfile(f)
			defer f.Close()
		}
		hb0, cpu0, srv0 := hb.Load(), cpuSelf(), cpuOf(node.Cmd.Process.Pid)
		time.Sleep(10 * time.Second)
		pprof.StopCPUProfile()
		beats := hb.Load() - hb0
		b.ReportMetric(float64(cpuSelf()-cpu0)/float64(beats), "member-cpu-ns/heartbeat")
		b.ReportMetric(float64(cpuOf(node.Cmd.Process.Pid)-srv0)/float64(beats), "cohortd-cpu-ns/heartbeat")
		b.ReportMetric(float64(beats)/10, "heartbeats/s")

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		for _, m := range ms {
			m.CommitAsync(nil, nil)
		}
		done := make(chan struct{}, len(ms))
		for _, m := range ms {
			go func() { m.Close(ctx); done <- struct{}{} }()
		}
		for range ms {
			<-done
		}
		cancel()
	}
}

// BenchmarkJoinCooperativeGroup: a 100th member joins a cooperative group of
// 99 members (1,000 partitions); the time until every member holds its
// final assignment, for cohort members (native transport) and for franz-go
// members (kgo, Kafka protocol) against the same cohortd. Run with
// -benchtime=1x (each iteration joins once per client).
func BenchmarkJoinCooperativeGroup(b *testing.B) {
	c := clustertest.StartCluster(b, 1)
	node := c.Node(0)
	const size, partitions = 100, 1000
	createTopic(b, []string{node.KafkaAddr}, "t", partitions) // also sizes kgo's Metadata
	want := allPartitions("t", partitions)
	system := c.Admin.System()
	var cohortSum, kgoSum time.Duration
	for i := range b.N {
		// cohort members
		g := newGroupOn(b, system, nativeDescriber(system, node.RemoteAddr, fmt.Sprintf("join-cohort-%d", i)), fmt.Sprintf("join-cohort-%d", i),
			append(timing(), member.WithTransport(member.Native(node.RemoteAddr)), member.Partitions("t", partitions),
				member.Topics("t"), member.Balancers(assignor.CooperativeSticky()))...)
		for range size - 1 {
			g.addSlow(0)
		}
		settle(b, g.h, g.participants(), want, g.describe, 2*time.Minute)
		start := time.Now()
		g.addSlow(0)
		settle(b, g.h, g.participants(), want, g.describe, 2*time.Minute)
		g.h.mu.Lock()
		cohort := g.h.last.Sub(start)
		g.h.mu.Unlock()
		closeAll(g)

		// kgo members
		name := fmt.Sprintf("join-kgo-%d", i)
		h := newHistory(b)
		var ks []participant
		var kgos []*kgoMember
		for j := range size - 1 {
			k := startKgo(b, h, fmt.Sprintf("k%d", j), node.KafkaAddr, name, kgo.CooperativeStickyBalancer())
			kgos = append(kgos, k)
			ks = append(ks, k)
		}
		desc := kafkaDescriber(b, node.KafkaAddr, name)
		settle(b, h, ks, want, desc, 2*time.Minute)
		start = time.Now()
		k := startKgo(b, h, "knew", node.KafkaAddr, name, kgo.CooperativeStickyBalancer())
		kgos = append(kgos, k)
		ks = append(ks, k)
		settle(b, h, ks, want, desc, 2*time.Minute)
		h.mu.Lock()
		kgoTime := h.last.Sub(start)
		h.mu.Unlock()
		for _, k := range kgos {
			k.close()
		}
		b.Logf("join %d: cohort %v, kgo %v", i, cohort.Round(time.Millisecond), kgoTime.Round(time.Millisecond))
		cohortSum += cohort
		kgoSum += kgoTime
	}
	b.ReportMetric(float64(cohortSum.Milliseconds())/float64(b.N), "cohort-ms/join")
	b.ReportMetric(float64(kgoSum.Milliseconds())/float64(b.N), "kgo-ms/join")
}

// closeAll closes a group's members in parallel.
func closeAll(g *group) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan struct{}, len(g.members))
	for _, m := range g.members {
		go func() { m.m.Close(ctx); done <- struct{}{} }()
	}
	for range g.members {
		<-done
	}
	g.members = nil
}
