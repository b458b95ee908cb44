package kafkabench

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/node"
)

// Scenarios beside BenchmarkGroups, each comparing cohort (one node, and a
// cluster of three child-process nodes with fsync on every node) with
// kfake in the same run:
//
//	go -C cluster-test test -run '^$' -bench 'Formation|Memory|Commit|JoinStorm' -benchtime 1x ./kafkabench/
//
// BenchmarkFormation forms COHORT_BENCH_FORM_GROUPS groups (10,000) of 5
// members, COHORT_BENCH_FORM_PARALLEL (200) at a time, and reports groups/s
// from the first JoinGroup to the last SyncGroup and the server CPU per
// group. BenchmarkMemory forms COHORT_BENCH_MEM_GROUPS groups (2,000) of 50
// idle members and reports the growth of the server's resident memory and
// Go heap per member. BenchmarkConnMemory opens COHORT_BENCH_CONNS (5,000)
// idle connections twice (closing the first set) and reports the resident
// memory each costs the server. BenchmarkCommit runs closed-loop OffsetCommits with
// 1,024 in flight for the BenchmarkGroups members (COHORT_BENCH_COMMIT_CONNS
// connections of 16 in flight each, 64) and reports req/s, CPU per commit
// summed over the nodes, and p50/p99 latency. COHORT_BENCH_SERVERS
// (a comma list of cohort, cohort3, kfake) picks the servers. With -short
// every count is small, for runs that only check that the benchmarks work.

const (
	formMembers = 5
	memMembers  = 50
	memParallel = 40
	memSettle   = 2 * time.Second
	// commitConns x benchDepth requests in flight.
	commitConns = 64
)

// formRuns numbers the formations of a test process: a server may see
// several (-count runs a sub-benchmark again on the same server), and each
// must form new groups, not join those of an earlier one.
var formRuns atomic.Int64

// benchCount is the env knob name's value, def without it, short under
// -short.
func benchCount(name string, def, short int) int {
	if testing.Short() {
		def = short
	}
	return envInt(name, def)
}

// benchServers returns the servers a scenario compares: def, or those of
// COHORT_BENCH_SERVERS that def has.
func benchServers(def ...string) []string {
	v := os.Getenv("COHORT_BENCH_SERVERS")
	if v == "" {
		return def
	}
	var out []string
	for _, n := range strings.Split(v, ",") {
		for _, d := range def {
			if d == strings.TrimSpace(n) {
				out = append(out, d)
			}
		}
	}
	return out
}

// startServer starts a server by scenario name: "cohort" (one node),
// "cohort3" (a three-node cluster; its leader answers) or "kfake".
func startServer(b *testing.B, name string) *benchServer {
	b.Helper()
	if name != "cohort3" {
		return startBenchServer(b, name)
	}
	leader := startBenchServer(b, "cohort-node", "COHORT_BENCH_NODE=node1")
	leader.name = name
	fmt.Fprintln(leader.stdin, "remote")
	line, err := leader.stdout.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "REMOTE ") {
		leader.stop()
		b.Fatalf("cluster leader: %q %v", line, err)
	}
	remote := strings.TrimSpace(strings.TrimPrefix(line, "REMOTE "))
	for i := 2; i <= 3; i++ {
		leader.peers = append(leader.peers, startBenchServer(b, "cohort-node", fmt.Sprintf("COHORT_BENCH_NODE=node%d", i), "COHORT_BENCH_JOIN="+remote))
	}
	deadline := time.Now().Add(time.Minute)
	for leader.ask("voters", "VOTERS") < 3 {
		if time.Now().After(deadline) {
			leader.stop()
			b.Fatal("cluster: the nodes did not join in time")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return leader
}

// serveClusterNode runs one node of a benchmark cluster until stdin closes:
// the first (no COHORT_BENCH_JOIN) bootstraps and answers "remote" (its
// native API address) and "voters"; the others join it.
func serveClusterNode() int {
	dir, err := os.MkdirTemp("", "cohort-bench-")
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	defer os.RemoveAll(dir)
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.RemoteAddr = dir, "127.0.0.1:0"
	cfg.Kafka.Addr = "127.0.0.1:0"
	cfg.Group.InitialRebalanceDelay, cfg.Group.MinSessionTimeout = 0, time.Second
	cfg.Raft.RaftAddr = "127.0.0.1:0"
	cfg.Raft.NodeID = os.Getenv("COHORT_BENCH_NODE")
	// hashicorp/raft's own timeouts rather than cohort's shorter ones: on
	// the shared two-core machine a leader change in the middle of a run
	// would fail it, and failover is not what these benchmarks measure.
	cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout, cfg.Raft.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
	cfg.Join = os.Getenv("COHORT_BENCH_JOIN")
	cfg.Bootstrap = cfg.Join == ""
	cfg.Logger = slog.New(slog.DiscardHandler)
	n, err := node.Start(cfg)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	if cfg.Bootstrap {
		if err := n.WaitActive(30 * time.Second); err != nil {
			fmt.Println("ERR", err)
			return 1
		}
	}
	fmt.Println("ADDR", n.KafkaAddr())
	serveCommands(func(cmd, _ string) bool {
		switch cmd {
		case "remote":
			fmt.Println("REMOTE", n.RemoteAddr())
		case "voters":
			fmt.Println("VOTERS", len(n.Raft().Voters()))
		default:
			return raftIndex(n, cmd)
		}
		return true
	})
	n.Close()
	return 0
}

func BenchmarkFormation(b *testing.B) {
	groups := benchCount("COHORT_BENCH_FORM_GROUPS", 10000, 50)
	parallel := benchCount("COHORT_BENCH_FORM_PARALLEL", 200, 10)
	for _, name := range benchServers("cohort", "cohort3", "kfake") {
		s := startServer(b, name)
		createBenchTopic(b, s.addr)
		b.Run(name, func(b *testing.B) {
			defer s.profile("formation." + name)()
			var took, cpu, client time.Duration
			var gens, reads, writes int64
			j0, s0, h0 := formRequests.joins.Load(), formRequests.syncs.Load(), formRequests.heartbeats.Load()
			m0 := readMachineTimes()
			ab0, gc0, e0 := s.allocBytes(), s.gcs(), s.ask("raftindex", "RAFTINDEX")
			for range b.N {
				cpu0, client0 := s.cpu(), selfCPU()
				r0, w0 := s.syscalls()
				ms, start := formGroups(b, s.addr, fmt.Sprintf("form%d", formRuns.Add(1)), groups, formMembers, parallel)
				cpu += s.cpu() - cpu0
				client += selfCPU() - client0
				r1, w1 := s.syscalls()
				reads, writes = reads+r1-r0, writes+w1-w0
				for i := 0; i < len(ms); i += formMembers {
					gens += int64(ms[i].gen)
				}
				var last time.Time
				for _, m := range ms {
					if m.synced.After(last) {
						last = m.synced
					}
				}
				took += last.Sub(start)
			}
			reportMachine(b, m0)
			ab1, gc1, e1 := s.allocBytes(), s.gcs(), s.ask("raftindex", "RAFTINDEX")
			b.ReportMetric(float64(ab1-ab0)/float64(groups*b.N), "server-alloc-B/group")
			if e1 > e0 {
				// Raft entries per group: each costs every node a log
				// write with its fsyncs and a round of replication.
				b.ReportMetric(float64(e1-e0)/float64(groups*b.N), "raft-entries/group")
			}
			b.ReportMetric(float64(gc1-gc0)*1000/float64(groups*b.N), "server-gcs/1k-groups")
			b.ReportMetric(float64(groups*b.N)/took.Seconds(), "groups/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(groups*b.N), "server-cpu-µs/group")
			// The load generator shares the cores with the server: what it
			// spends per group bounds how fast any server can be measured
			// to form groups here.
			b.ReportMetric(float64(client.Microseconds())/float64(groups*b.N), "client-cpu-µs/group")
			// What each group took: generations to its last, and requests.
			per := func(n int64) float64 { return float64(n) / float64(groups*b.N) }
			b.ReportMetric(per(gens), "generations/group")
			b.ReportMetric(per(formRequests.joins.Load()-j0), "joins/group")
			b.ReportMetric(per(formRequests.syncs.Load()-s0), "syncs/group")
			b.ReportMetric(per(formRequests.heartbeats.Load()-h0), "heartbeats/group")
			// Read and write system calls (Raft's and the log's included):
			// on loopback each write also runs the receiver's side of TCP.
			b.ReportMetric(per(reads), "server-reads/group")
			b.ReportMetric(per(writes), "server-writes/group")
		})
		s.stop()
	}
}

// selfCPU returns the CPU time this process (the load generator) has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rss returns the resident memory of the server's process.
func (s *benchServer) rss() uint64 { return s.status("VmRSS") }

// status returns a size field of the server process's /proc status (VmRSS,
// RssAnon, RssFile), in bytes.
func (s *benchServer) status(field string) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func BenchmarkMemory(b *testing.B) {
	groups := benchCount("COHORT_BENCH_MEM_GROUPS", 2000, 20)
	for _, name := range benchServers("cohort", "kfake") {
		s := startServer(b, name)
		createBenchTopic(b, s.addr)
		b.Run(name, func(b *testing.B) {
			heap0 := s.ask("mem", "MEM")
			live0 := s.ask("live", "LIVE")
			rss0, file0 := s.rss(), s.status("RssFile")
			for range b.N {
				formGroups(b, s.addr, fmt.Sprintf("mem%d", formRuns.Add(1)), groups, memMembers, memParallel)
			}
			// The members are idle now: let the server close the
			// connections they joined through before measuring.
			time.Sleep(memSettle)
			if prefix := os.Getenv("COHORT_BENCH_CPUPROFILE"); prefix != "" {
				fmt.Fprintf(s.stdin, "heap %s.memory.%s\n", prefix, s.name)
			}
			heap1 := s.ask("mem", "MEM")
			live1 := s.ask("live", "LIVE")
			rss1, file1 := s.rss(), s.status("RssFile")
			members := float64(groups * memMembers * b.N)
			b.ReportMetric((float64(rss1)-float64(rss0))/members, "rss-B/member")
			// The part of that growth that is file pages mapped into the
			// process (the Raft log's bbolt file is memory-mapped), which
			// the kernel can reclaim; the rest is the process's own memory.
			b.ReportMetric((float64(file1)-float64(file0))/members, "rss-file-B/member")
			b.ReportMetric((float64(heap1)-float64(heap0))/members, "heap-B/member")
			b.ReportMetric((float64(live1)-float64(live0))/members, "live-B/member")
			b.ReportMetric(float64(rss1)/(1<<20), "rss-MiB")
		})
		s.stop()
	}
}

// BenchmarkConnMemory measures what an idle client connection (a member
// that only heartbeats) costs the server in resident memory: the connection
// asks for the API versions and sends one heartbeat, then idles. The first
// set of connections is closed and a second opened, as clients reconnect
// over a deploy: the second set lands in heap the first one used, which the
// runtime hands out zeroed, so what it costs is resident in full.
func BenchmarkConnMemory(b *testing.B) {
	n := benchCount("COHORT_BENCH_CONNS", 5000, 100)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && int(lim.Cur)/2-100 < n {
		n = max(int(lim.Cur)/2-100, 1) // this process and the server each hold one descriptor per connection
	}
	for _, name := range benchServers("cohort", "kfake") {
		s := startServer(b, name)
		b.Run(name, func(b *testing.B) {
			var fresh, reused float64
			for range b.N {
				s.ask("mem", "MEM") // collected, and freed memory returned
				rss0 := float64(s.rss())
				conns := idleConns(b, s.addr, n)
				s.ask("gc", "GC")
				fresh += (float64(s.rss()) - rss0) / float64(n)
				closeIdle(conns)
				// Collected but not returned, as between a deploy's
				// disconnects and reconnects.
				s.ask("gc", "GC")
				conns = idleConns(b, s.addr, n)
				s.ask("gc", "GC")
				reused += (float64(s.rss()) - rss0) / float64(n)
				closeIdle(conns)
			}
			b.ReportMetric(fresh/float64(b.N), "rss-B/conn-fresh")
			b.ReportMetric(reused/float64(b.N), "rss-B/conn")
			b.ReportMetric(float64(n), "conns")
		})
		s.stop()
	}
}

// closeIdle closes conns and gives the server time to close its side.
func closeIdle(conns []*pconn) {
	for _, c := range conns {
		c.close()
	}
	time.Sleep(memSettle)
}

// idleConns opens n connections to addr, each answered an ApiVersions and a
// Heartbeat (of a group that does not exist: the answer is an error code).
func idleConns(b *testing.B, addr string, n int) []*pconn {
	b.Helper()
	versions := kmsg.NewPtrApiVersionsRequest()
	versions.SetVersion(3)
	versions.ClientSoftwareName, versions.ClientSoftwareVersion = "conn-bench", "1"
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	hb.Group, hb.Generation, hb.MemberID = "conn-bench", 1, "conn-bench-member"
	conns := make([]*pconn, 0, n)
	for range n {
		c, err := dialP(addr)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
		for _, req := range []kmsg.Request{versions, hb} {
			if _, err := c.do(req); err != nil {
				b.Fatal(err)
			}
		}
	}
	return conns
}

func BenchmarkCommit(b *testing.B) {
	for _, name := range benchServers("cohort", "cohort3", "kfake") {
		s := startServer(b, name)
		createBenchTopic(b, s.addr)
		ms := joinAll(b, s.addr)
		b.Run(name+"/offsetcommit", func(b *testing.B) {
			loadConns(b, s, "commit."+name, envInt("COHORT_BENCH_COMMIT_CONNS", commitConns), ms, offsetCommit, offsetCommitOK)
		})
		s.stop()
	}
}

// BenchmarkJoinStorm forms one group of COHORT_BENCH_STORM_MEMBERS members
// (1,000), all joining at once, and reports the time from the first
// JoinGroup to the last SyncGroup.
func BenchmarkJoinStorm(b *testing.B) {
	members := benchCount("COHORT_BENCH_STORM_MEMBERS", 1000, 20)
	for _, name := range benchServers("cohort", "kfake") {
		s := startServer(b, name)
		createBenchTopic(b, s.addr)
		b.Run(name, func(b *testing.B) {
			var took time.Duration
			for range b.N {
				ms, start := formGroups(b, s.addr, fmt.Sprintf("storm%d", formRuns.Add(1)), 1, members, 1)
				var last time.Time
				for _, m := range ms {
					if m.synced.After(last) {
						last = m.synced
					}
				}
				took += last.Sub(start)
			}
			b.ReportMetric(float64(took.Milliseconds())/float64(b.N), "ms/storm")
		})
		s.stop()
	}
}
