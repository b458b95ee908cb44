package kafkabench

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cohort-coord/cohort/node"
)

// The benchmark compares cohort with franz-go's kfake broker on the same
// machine in the same run. Each server runs in a child process (this test
// binary, re-executed), so its CPU time can be read from /proc while this
// process generates load over loopback with pipelined connections.
//
//	go -C cluster-test test -run '^$' -bench BenchmarkGroups -benchtime 200000x ./kafkabench/
//
// COHORT_BENCH_CPUPROFILE=prefix writes a CPU profile of each server for
// each measured phase, to prefix.heartbeat.<server> and
// prefix.offsetcommit.<server> (a cluster's other nodes to the same name
// with .peer1, .peer2 added).
//
// Before measuring, 10,000 groups of 10 members each join and sync (100,000
// members; COHORT_BENCH_GROUPS=n changes the group count for quick runs).
// Then closed-loop Heartbeat and OffsetCommit requests for those
// members are sent round-robin over benchConns connections with
// benchDepth requests in flight on each.

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

const (
	benchMembers  = 10
	benchConns    = 32
	benchDepth    = 16
	setupParallel = 100
	benchTopic    = "bench"
	benchSession  = 10 * time.Minute
)

func TestMain(m *testing.M) {
	if os.Getenv("COHORT_BENCH_SERVER") != "" && os.Getenv("COHORT_BENCH_MEMRATE1") != "" {
		runtime.MemProfileRate = 1
	}
	switch os.Getenv("COHORT_BENCH_SERVER") {
	case "cohort":
		os.Exit(serveCohort(false))
	case "cohort-nometrics":
		os.Exit(serveCohort(true))
	case "cohort-node":
		os.Exit(serveClusterNode())
	case "kfake":
		os.Exit(serveKfake())
	}
	os.Exit(m.Run())
}

// serveCohort runs a cohort node (coordinator + Kafka listener) until stdin
// closes.
func serveCohort(metricsOff bool) int {
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
	cfg.Consumer.SessionTimeout = benchSession
	cfg.Raft.RaftAddr = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.DiscardHandler)
	if os.Getenv("COHORT_BENCH_SERVER_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cfg.MetricsOff = metricsOff
	n, err := node.Start(cfg)
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	if err := n.WaitActive(30 * time.Second); err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println("ADDR", n.KafkaAddr())
	serveCommands(func(cmd, _ string) bool { return raftIndex(n, cmd) })
	n.Close()
	return 0
}

// raftIndex answers "raftindex", the node's last Raft log index (entries
// written so far).
func raftIndex(n *node.Node, cmd string) bool {
	if cmd != "raftindex" {
		return false
	}
	fmt.Println("RAFTINDEX", n.Raft().LastIndex())
	return true
}

// serveCommands reads the benchmark's commands from stdin until it closes:
// "profile <path>" starts a CPU profile and writes a heap profile (with
// allocations so far) to <path>.heap0, "stop" ends the CPU profile and
// writes <path>.heap1; pprof -diff_base shows what a phase allocated.
// "mem" collects garbage, returns freed memory to the system and answers
// the Go heap in use, so that the parent reads a resident size without
// garbage in it; "live", asked after "mem", answers the bytes of the
// objects in that heap; "gc" only collects (freed memory stays with the
// process, as between collections). "allocs", "allocbytes" and "gcs" answer
// the heap allocations, bytes allocated and collections so far. Commands
// extra knows (it returns true) are its own.
func serveCommands(extra func(cmd, arg string) bool) {
	var prof *os.File
	heap := func(path string) {
		runtime.GC() // the allocs profile is as of the last collection
		if f, err := os.Create(path); err == nil {
			pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
	}
	stop := func() {
		if prof != nil {
			pprof.StopCPUProfile()
			heap(prof.Name() + ".heap1")
			prof.Close()
			prof = nil
		}
	}
	defer stop()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch cmd, arg, _ := strings.Cut(sc.Text(), " "); cmd {
		case "profile":
			stop()
			if os.Getenv("COHORT_BENCH_MEMRATE1") != "" {
				runtime.MemProfileRate = 1
			}
			heap(arg + ".heap0")
			if f, err := os.Create(arg); err == nil && pprof.StartCPUProfile(f) == nil {
				prof = f
			}
		case "stop":
			stop()
		case "allocs", "allocbytes", "gcs":
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			n := map[string]uint64{"allocs": ms.Mallocs, "allocbytes": ms.TotalAlloc, "gcs": uint64(ms.NumGC)}[cmd]
			fmt.Println(strings.ToUpper(cmd), n)
		case "gc":
			runtime.GC() // freed memory stays with the process
			fmt.Println("GC 1")
		case "heap":
			heap(arg)
		case "mem":
			debug.FreeOSMemory() // runs a collection first
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Println("MEM", ms.HeapInuse)
		case "live":
			// The bytes of live objects (after the collection "mem" ran):
			// what the heap in use holds beyond them is the free space of
			// partly used spans.
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Println("LIVE", ms.HeapAlloc)
		default:
			if extra == nil || !extra(cmd, arg) {
				fmt.Println("ERR unknown command", cmd)
			}
		}
	}
}

func serveKfake() int {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(benchMembers, benchTopic), kfake.GroupMaxSessionTimeout(30*time.Minute),
		kfake.BrokerConfigs(map[string]string{"group.consumer.session.timeout.ms": strconv.Itoa(int(benchSession.Milliseconds()))}))
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	fmt.Println("ADDR", c.ListenAddrs()[0])
	serveCommands(nil)
	c.Close()
	return 0
}

// benchServer is a server under test: one child process, or the leader
// of a cluster of them (peers are the other nodes; CPU time and allocations
// are summed over all of them).
type benchServer struct {
	name   string
	addr   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	peers  []*benchServer
}

// ask sends a command to this process and returns the number its answer
// carries after prefix.
func (s *benchServer) ask(cmd, prefix string) uint64 {
	fmt.Fprintln(s.stdin, cmd)
	line, err := s.stdout.ReadString('\n')
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, prefix+" ")), 10, 64)
	return n
}

// total asks every node of the server for a count (cmd answers it after
// prefix) and returns the sum.
func (s *benchServer) total(cmd, prefix string) uint64 {
	n := s.ask(cmd, prefix)
	for _, p := range s.peers {
		n += p.total(cmd, prefix)
	}
	return n
}

// allocs returns the number of heap allocations the server made so far,
// allocBytes the bytes, and gcs the collections it ran: what it allocates
// per request sets how often it collects.
func (s *benchServer) allocs() uint64     { return s.total("allocs", "ALLOCS") }
func (s *benchServer) allocBytes() uint64 { return s.total("allocbytes", "ALLOCBYTES") }
func (s *benchServer) gcs() uint64        { return s.total("gcs", "GCS") }

func startBenchServer(b *testing.B, name string, env ...string) *benchServer {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "COHORT_BENCH_SERVER="+name), env...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		cmd.Process.Kill()
		b.Fatalf("%s server: %q %v", name, line, err)
	}
	return &benchServer{name: name, addr: strings.TrimSpace(strings.TrimPrefix(line, "ADDR ")), cmd: cmd, stdin: stdin, stdout: out}
}

func (s *benchServer) stop() {
	for _, p := range s.peers {
		p.stop()
	}
	s.stdin.Close()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

// cpu returns the server's user+system CPU time (of every node).
func (s *benchServer) cpu() time.Duration {
	var sum time.Duration
	for _, p := range s.peers {
		sum += p.cpu()
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return sum
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return sum + time.Duration(utime+stime)*(time.Second/100) // USER_HZ
}

// machineTimes is the machine's CPU time so far, from /proc/stat, in
// USER_HZ ticks: all of it, idle (waiting for I/O included), and stolen (a
// virtual machine's CPUs running something else of the host's).
type machineTimes struct{ total, idle, steal uint64 }

func readMachineTimes() machineTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var t machineTimes
	for i, v := range f[1:] {
		if i >= 8 {
			break // guest time is counted in user already
		}
		n, _ := strconv.ParseUint(v, 10, 64)
		t.total += n
		switch i {
		case 3, 4:
			t.idle += n
		case 7:
			t.steal += n
		}
	}
	return t
}

// reportMachine reports how much of the machine's CPU time since m0 was
// idle and how much was stolen: a run on a host that takes a third of the
// CPUs away is not comparable with one where it takes none, and the
// servers compared in one run may have met different shares.
func reportMachine(b *testing.B, m0 machineTimes) {
	m1 := readMachineTimes()
	if d := m1.total - m0.total; d > 0 && m1.total > m0.total {
		b.ReportMetric(100*float64(m1.idle-m0.idle)/float64(d), "machine-idle-%")
		b.ReportMetric(100*float64(m1.steal-m0.steal)/float64(d), "machine-steal-%")
	}
}

// syscalls returns the server's read and write system call counts.
func (s *benchServer) syscalls() (reads, writes int64) {
	for _, p := range s.peers {
		r, w := p.syscalls()
		reads, writes = reads+r, writes+w
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", s.cmd.Process.Pid))
	if err != nil {
		return reads, writes
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "syscr":
			reads += n
		case "syscw":
			writes += n
		}
	}
	return reads, writes
}

// profile starts CPU profiles of a server's processes for a phase
// when COHORT_BENCH_CPUPROFILE=prefix is set: prefix.phase for the node the
// client talks to, prefix.phase.peerN for the other nodes of a cluster. The
// function it returns stops them.
func (s *benchServer) profile(phase string) (stop func()) {
	prefix := os.Getenv("COHORT_BENCH_CPUPROFILE")
	if prefix == "" {
		return func() {}
	}
	fmt.Fprintf(s.stdin, "profile %s.%s\n", prefix, phase)
	for i, p := range s.peers {
		fmt.Fprintf(p.stdin, "profile %s.%s.peer%d\n", prefix, phase, i+1)
	}
	return func() {
		fmt.Fprintln(s.stdin, "stop")
		for _, p := range s.peers {
			fmt.Fprintln(p.stdin, "stop")
		}
	}
}

// With COHORT_BENCH_METRICS_COST=1 the run compares cohort without its
// metrics and group views (cohort-nometrics) to cohort with them, instead
// of cohort to kfake, in alternating order from one -count to the next.
func BenchmarkGroups(b *testing.B) {
	names := []string{"cohort", "kfake"}
	if os.Getenv("COHORT_BENCH_METRICS_COST") != "" {
		names = []string{"cohort-nometrics", "cohort"}
		if benchRuns%2 == 1 {
			names[0], names[1] = names[1], names[0]
		}
		benchRuns++
	}
	for _, name := range names {
		s := startBenchServer(b, name)
		createBenchTopic(b, s.addr)
		ms := joinAll(b, s.addr)
		b.Run(name+"/heartbeat", func(b *testing.B) { load(b, s, "heartbeat."+name, ms, heartbeat, heartbeatOK) })
		b.Run(name+"/offsetcommit", func(b *testing.B) { load(b, s, "offsetcommit."+name, ms, offsetCommit, offsetCommitOK) })
		s.stop()
	}
}
