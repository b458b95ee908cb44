package kafka_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/node"
)

// The benchmark compares cohort with franz-go's kfake broker on the same
// machine in the same run. Each server runs in a child process (this test
// binary, re-executed), so its CPU time can be read from /proc while this
// process generates load over loopback with pipelined connections.
//
//	go test -run '^$' -bench BenchmarkGroups -benchtime 200000x ./kafka/
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
	cfg.Raft.RaftAddr = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.DiscardHandler)
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
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(benchMembers, benchTopic), kfake.GroupMaxSessionTimeout(30*time.Minute))
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

// pconn is a pipelined Kafka connection: any number of goroutines may call
// do; answers are matched to requests in order.
type pconn struct {
	nc      net.Conn
	wmu     sync.Mutex
	corr    int32
	buf     []byte
	fm      *kmsg.RequestFormatter
	waiters chan *waiter
	dead    chan struct{}
	err     error
}

type waiter struct {
	req  kmsg.Request
	resp kmsg.Response
	err  error
	done chan struct{}
}

func dialP(addr string) (*pconn, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &pconn{nc: nc, fm: kmsg.NewRequestFormatter(kmsg.FormatterClientID("bench")), waiters: make(chan *waiter, 1024), dead: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

func (c *pconn) readLoop() {
	br := bufio.NewReaderSize(c.nc, 64<<10)
	var size [4]byte
	for w := range c.waiters {
		var err error
		if _, err = io.ReadFull(br, size[:]); err == nil {
			frame := make([]byte, binary.BigEndian.Uint32(size[:]))
			if _, err = io.ReadFull(br, frame); err == nil {
				body := frame[4:]
				resp := w.req.ResponseKind()
				resp.SetVersion(w.req.GetVersion())
				// ApiVersions answers with a header without tags at every version.
				if resp.IsFlexible() && w.req.Key() != kmsg.ApiVersions.Int16() && len(body) > 0 {
					body = body[1:]
				}
				err = resp.ReadFrom(body)
				w.resp = resp
			}
		}
		w.err = err
		close(w.done)
		if err != nil {
			c.err = err
			close(c.dead)
			for w := range c.waiters {
				w.err = err
				close(w.done)
			}
			return
		}
	}
}

func (c *pconn) do(req kmsg.Request) (kmsg.Response, error) {
	w := &waiter{req: req, done: make(chan struct{})}
	c.wmu.Lock()
	select {
	case <-c.dead:
		c.wmu.Unlock()
		return nil, c.err
	default:
	}
	c.corr++
	c.buf = c.fm.AppendRequest(c.buf[:0], req, c.corr)
	c.waiters <- w
	_, err := c.nc.Write(c.buf)
	c.wmu.Unlock()
	if err != nil {
		return nil, err
	}
	<-w.done
	return w.resp, w.err
}

func (c *pconn) close() {
	c.nc.Close()
	c.wmu.Lock()
	close(c.waiters)
	c.wmu.Unlock()
}

type member struct {
	group, id string
	gen       int32
	partition int32
	// synced is when the member's SyncGroup of its final generation was
	// answered.
	synced time.Time
}

// formRequests counts the requests joinGroup sends, so that a formation
// benchmark can show how many each group took on each server.
var formRequests struct{ joins, syncs, heartbeats atomic.Int64 }

// joinPoll is how long a synced member waits between heartbeats while it
// waits for the rest of its group to sync in the same generation.
const joinPoll = 10 * time.Millisecond

// joinGroup brings len(conns) members into group through conns (one per
// member, so a parked JoinGroup never blocks another member). Each member
// behaves like a client: join, sync (the leader assigns one partition per
// member), then heartbeat until all are stable in one generation, re-joining
// when told to.
func joinGroup(conns []*pconn, group string) ([]member, error) {
	var (
		mu     sync.Mutex
		synced = make([]int32, len(conns))
		out    = make([]member, len(conns))
		errs   = make([]error, len(conns))
		done   atomic.Bool
		wg     sync.WaitGroup
	)
	deadline := time.Now().Add(2 * time.Minute)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := ""
			for !done.Load() {
				if time.Now().After(deadline) {
					errs[i] = fmt.Errorf("group %s member %d: not stable in time", group, i)
					return
				}
				j := kmsg.NewPtrJoinGroupRequest()
				j.SetVersion(3)
				j.Group, j.MemberID, j.ProtocolType = group, id, "consumer"
				j.SessionTimeoutMillis, j.RebalanceTimeoutMillis = int32(benchSession.Milliseconds()), 60000
				meta := kmsg.NewConsumerMemberMetadata()
				meta.Topics = []string{benchTopic}
				p := kmsg.NewJoinGroupRequestProtocol()
				p.Name, p.Metadata = "range", meta.AppendTo(nil)
				j.Protocols = append(j.Protocols, p)
				formRequests.joins.Add(1)
				r, err := c.do(j)
				if err != nil {
					errs[i] = err
					return
				}
				jr := r.(*kmsg.JoinGroupResponse)
				if jr.ErrorCode != 0 {
					if jr.ErrorCode == 25 { // UNKNOWN_MEMBER_ID
						id = ""
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				id = jr.MemberID
				s := kmsg.NewPtrSyncGroupRequest()
				s.SetVersion(3)
				s.Group, s.Generation, s.MemberID = group, jr.Generation, id
				if jr.LeaderID == id {
					for k, m := range jr.Members {
						a := kmsg.NewConsumerMemberAssignment()
						at := kmsg.NewConsumerMemberAssignmentTopic()
						at.Topic, at.Partitions = benchTopic, []int32{int32(k % benchMembers)}
						a.Topics = append(a.Topics, at)
						ga := kmsg.NewSyncGroupRequestGroupAssignment()
						ga.MemberID, ga.MemberAssignment = m.MemberID, a.AppendTo(nil)
						s.GroupAssignment = append(s.GroupAssignment, ga)
					}
				}
				formRequests.syncs.Add(1)
				r, err = c.do(s)
				if err != nil {
					errs[i] = err
					return
				}
				sr := r.(*kmsg.SyncGroupResponse)
				if sr.ErrorCode != 0 {
					continue
				}
				var a kmsg.ConsumerMemberAssignment
				if err := a.ReadFrom(sr.MemberAssignment); err != nil || len(a.Topics) != 1 || len(a.Topics[0].Partitions) != 1 {
					continue
				}
				mu.Lock()
				synced[i] = jr.Generation
				out[i] = member{group: group, id: id, gen: jr.Generation, partition: a.Topics[0].Partitions[0], synced: time.Now()}
				mu.Unlock()
				for !done.Load() {
					h := kmsg.NewPtrHeartbeatRequest()
					h.SetVersion(3)
					h.Group, h.Generation, h.MemberID = group, jr.Generation, id
					formRequests.heartbeats.Add(1)
					r, err := c.do(h)
					if err != nil {
						errs[i] = err
						return
					}
					if r.(*kmsg.HeartbeatResponse).ErrorCode != 0 {
						break
					}
					mu.Lock()
					all := true
					for _, g := range synced {
						all = all && g == jr.Generation
					}
					mu.Unlock()
					if all {
						done.Store(true)
						return
					}
					time.Sleep(joinPoll)
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, m := range out {
		if m.gen != out[0].gen {
			return nil, fmt.Errorf("group %s: members at generations %d and %d", group, out[0].gen, m.gen)
		}
	}
	return out, nil
}

func joinAll(b *testing.B, addr string) []member {
	b.Helper()
	groups := benchCount("COHORT_BENCH_GROUPS", 10000, 20)
	start := time.Now()
	all, _ := formGroups(b, addr, "bench", groups, benchMembers, setupParallel)
	b.Logf("joined %d members in %d groups in %v", len(all), groups, time.Since(start).Round(time.Millisecond))
	return all
}

// formGroups forms groups groups of members members each, parallel groups
// at a time (each worker has a connection per member and forms one group
// after another), and returns every member, groups in order, and when the
// first JoinGroup was sent (the connections are dialed before).
func formGroups(b *testing.B, addr, prefix string, groups, members, parallel int) ([]member, time.Time) {
	b.Helper()
	jobs := make(chan int)
	results := make([][]member, groups)
	var firstErr atomic.Value
	var wg sync.WaitGroup
	parallel = min(parallel, groups)
	workers := make([][]*pconn, parallel)
	for w := range workers {
		conns := make([]*pconn, members)
		for i := range conns {
			c, err := dialP(addr)
			if err != nil {
				b.Fatal(err)
			}
			conns[i] = c
		}
		workers[w] = conns
	}
	for _, conns := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				for _, c := range conns {
					c.close()
				}
			}()
			for g := range jobs {
				ms, err := joinGroup(conns, fmt.Sprintf("%s-%05d", prefix, g))
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				results[g] = ms
			}
		}()
	}
	start := time.Now()
	for g := range groups {
		jobs <- g
	}
	close(jobs)
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	var all []member
	for _, ms := range results {
		all = append(all, ms...)
	}
	return all, start
}

func createBenchTopic(b *testing.B, addr string) {
	c, err := dialP(addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.close()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.SetVersion(4)
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = benchTopic, benchMembers, 1
	req.Topics = append(req.Topics, t)
	r, err := c.do(req)
	if err != nil {
		b.Fatal(err)
	}
	if code := r.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; code != 0 && code != 36 { // 36: already exists
		b.Fatalf("create topic: error %d", code)
	}
}

// load sends b.N requests built by mk for members round-robin, closed loop,
// and reports throughput and the server's CPU and system calls per request.
// Each connection keeps benchDepth requests in flight: its writer sends, in
// one write, a new request for every answer its reader has taken since the
// last write, as a pipelining client with a fixed window does. Both servers
// get exactly the same load.
func load(b *testing.B, s *benchServer, phase string, ms []member, mk func(m member) kmsg.Request, ok func(kmsg.Response) bool) {
	loadConns(b, s, phase, benchConns, ms, mk, ok)
}

// loadConns is load over nconns connections (benchDepth requests in flight
// on each); it also reports the answers' latency (p50, p99).
func loadConns(b *testing.B, s *benchServer, phase string, nconns int, ms []member, mk func(m member) kmsg.Request, ok func(kmsg.Response) bool) {
	conns := make([]net.Conn, nconns)
	for i := range conns {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = c
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	defer s.profile(phase)()
	var next, bad atomic.Int64
	var firstBad atomic.Value
	take := func() (kmsg.Request, bool) {
		n := next.Add(1) - 1
		if n >= int64(b.N) {
			return nil, false
		}
		return mk(ms[int(n)%len(ms)]), true
	}
	b.ResetTimer()
	a0, e0 := s.allocs(), s.ask("raftindex", "RAFTINDEX")
	ab0, gc0 := s.allocBytes(), s.gcs()
	r0, w0 := s.syscalls()
	cpu0, t0, m0 := s.cpu(), time.Now(), readMachineTimes()
	errs := make([]error, len(conns))
	lats := make([][]time.Duration, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = window(c, benchDepth, take, func(r kmsg.Response, lat time.Duration) {
				if !ok(r) {
					if bad.Add(1) == 1 {
						firstBad.Store(r)
					}
				}
				lats[i] = append(lats[i], lat)
			})
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(t0), s.cpu()-cpu0
	r1, w1 := s.syscalls()
	a1, e1 := s.allocs(), s.ask("raftindex", "RAFTINDEX")
	ab1, gc1 := s.allocBytes(), s.gcs()
	b.StopTimer()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	if bad.Load() > 0 {
		b.Fatalf("%d of %d answers carried an error, the first: %+v", bad.Load(), b.N, firstBad.Load())
	}
	reportMachine(b, m0)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "server-cpu-µs/req")
	b.ReportMetric(float64(a1-a0)/float64(b.N), "server-allocs/req")
	b.ReportMetric(float64(ab1-ab0)/float64(b.N), "server-alloc-B/req")
	b.ReportMetric(float64(gc1-gc0)*10000/float64(b.N), "server-gcs/10k-req")
	b.ReportMetric(float64(r1-r0)/float64(b.N), "server-reads/req")
	b.ReportMetric(float64(w1-w0)/float64(b.N), "server-writes/req")
	if e1 > e0 {
		// Raft entries the leader wrote: requests per entry is how well
		// the store batches.
		b.ReportMetric(float64(b.N)/float64(e1-e0), "req/raft-entry")
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	}
}

// window runs a closed loop of requests from take over nc with depth in
// flight, handing every decoded answer to check, until take has no more and
// every request sent was answered.
func window(nc net.Conn, depth int, take func() (kmsg.Request, bool), check func(kmsg.Response, time.Duration)) error {
	type sentReq struct {
		req kmsg.Request
		at  time.Time
	}
	credits := make(chan struct{}, depth)
	sent := make(chan sentReq, depth)
	for range depth {
		credits <- struct{}{}
	}
	readErr := make(chan error, 1)
	go func() {
		br := bufio.NewReaderSize(nc, 64<<10)
		var frame []byte
		for sr := range sent {
			req := sr.req
			var size [4]byte
			if _, err := io.ReadFull(br, size[:]); err != nil {
				readErr <- err
				return
			}
			n := int(binary.BigEndian.Uint32(size[:]))
			if cap(frame) < n {
				frame = make([]byte, n)
			}
			frame = frame[:n]
			if _, err := io.ReadFull(br, frame); err != nil || n < 4 {
				readErr <- fmt.Errorf("short answer: %v", err)
				return
			}
			body := frame[4:]
			resp := req.ResponseKind()
			resp.SetVersion(req.GetVersion())
			if resp.IsFlexible() && len(body) > 0 {
				body = body[1:]
			}
			if err := resp.ReadFrom(body); err != nil {
				readErr <- err
				return
			}
			check(resp, time.Since(sr.at))
			credits <- struct{}{}
		}
		readErr <- nil
	}()
	fm := kmsg.NewRequestFormatter(kmsg.FormatterClientID("bench"))
	var buf []byte
	var corr int32
	var pending []kmsg.Request
	err := func() error {
		defer close(sent)
		for more := true; more; {
			select {
			case <-credits:
			case err := <-readErr:
				return fmt.Errorf("reader stopped: %v", err)
			}
			buf = buf[:0]
			for {
				req, ok := take()
				if !ok {
					more = false
					break
				}
				corr++
				// AppendRequest writes the frame length at the start of
				// the slice it is given, so give it the free tail only.
				buf = append(buf, fm.AppendRequest(buf[len(buf):], req, corr)...)
				pending = append(pending, req)
				if len(credits) == 0 { // this loop is the only taker
					break
				}
				<-credits
			}
			if len(buf) > 0 {
				at := time.Now()
				for _, req := range pending {
					sent <- sentReq{req, at}
				}
				pending = pending[:0]
				if _, err := nc.Write(buf); err != nil {
					return err
				}
			}
		}
		return nil
	}()
	if err != nil {
		nc.Close()
		<-readErr
		return err
	}
	return <-readErr
}

func heartbeat(m member) kmsg.Request {
	h := kmsg.NewPtrHeartbeatRequest()
	h.SetVersion(4)
	h.Group, h.Generation, h.MemberID = m.group, m.gen, m.id
	return h
}

func heartbeatOK(r kmsg.Response) bool { return r.(*kmsg.HeartbeatResponse).ErrorCode == 0 }

var commitSeq atomic.Int64

func offsetCommit(m member) kmsg.Request {
	c := kmsg.NewPtrOffsetCommitRequest()
	c.SetVersion(8)
	c.Group, c.Generation, c.MemberID = m.group, m.gen, m.id
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = benchTopic
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Partition, p.Offset = m.partition, commitSeq.Add(1)
	t.Partitions = append(t.Partitions, p)
	c.Topics = append(c.Topics, t)
	return c
}

// benchRuns counts BenchmarkGroups runs, to alternate the server order.
var benchRuns int

func offsetCommitOK(r kmsg.Response) bool {
	for _, t := range r.(*kmsg.OffsetCommitResponse).Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return false
			}
		}
	}
	return true
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
