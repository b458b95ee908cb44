package clustertest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestBenchShards measures where the work of a 3-node cluster runs and how
// far it goes, at 1 shard and at 16 (COHORT_BENCH_SHARDS, default "1,16"),
// in one sitting:
//
//	COHORT_CLUSTER_BENCH=1 go -C cluster-test test . -run TestBenchShards -v -timeout 60m
//
// Each node may be capped at COHORT_BENCH_CPU cores (a cgroup v1 CPU quota
// per cohortd process; default 0.5, 0 for none), the load generator (this
// process) stays outside the caps. COHORT_BENCH_GROUPS groups (default
// 2000) of one member each are formed, then the generator sends, for
// COHORT_BENCH_DURATION (default 15s) each, heartbeats and then offset
// commits to every group's coordinator as fast as the cluster answers
// (pipelined, COHORT_BENCH_WINDOW requests in flight per connection,
// default 64). It reports operations per second, each node's CPU over the
// phase and its share of the cluster's, and server CPU per operation.
func TestBenchShards(t *testing.T) {
	benchEnabled(t)
	shardCounts := envInts(t, "COHORT_BENCH_SHARDS", []int{1, 16})
	quota := 0.5
	if v := os.Getenv("COHORT_BENCH_CPU"); v != "" {
		q, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatal(err)
		}
		quota = q
	}
	groups := envInt(t, "COHORT_BENCH_GROUPS", 2000)
	window := envInt(t, "COHORT_BENCH_WINDOW", 64)
	dur := envDuration(t, "COHORT_BENCH_DURATION", 15*time.Second)
	var rows []string
	for _, shards := range shardCounts {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			c := StartCluster(t, 3, benchOptions(t), func(o *Options) {
				o.Args = append(o.Args, "--shards", strconv.Itoa(shards), "--shard-move-interval", "1s",
					"--group-max-session-timeout", "5m")
				o.HTTP = true // the shared log's counters
			})
			if shards > 1 {
				waitShardsEven(t, c, shards, 90*time.Second)
			}
			if quota > 0 {
				for _, n := range c.Running() {
					capCPU(t, n, quota)
				}
			}
			members := formGroups(t, c, groups)
			for _, phase := range []string{"heartbeat", "commit"} {
				r := runLoad(t, c, members, phase, window, dur)
				perEntry := 0.0
				if r.entries > 0 {
					perEntry = float64(r.ops) / float64(r.entries)
				}
				row := fmt.Sprintf("%d\t%s\t%.0f\t%s\t%.1f\t%.2f\t%.0f\t%d", shards, phase, r.rate, r.cpuCells(), r.perOp(), r.spread(), perEntry, r.errors)
				t.Logf("shards %d %s: %.0f/s, node CPU %s, %.1f µs server CPU per op, busiest/idlest %.2f, %d Raft entries (%.0f ops each), %d errors",
					shards, phase, r.rate, r.cpuCells(), r.perOp(), r.spread(), r.entries, perEntry, r.errors)
				if r.logTxs > 0 {
					t.Logf("shards %d %s: the shared logs committed %.0f transactions a second per node, %.1f shard writes each",
						shards, phase, r.logTxs/dur.Seconds()/3, r.logWrites/r.logTxs)
				}
				rows = append(rows, row)
			}
		})
	}
	t.Logf("\nshards\tphase\tops/s\tCPU per node (s, share)\tµs/op\tbusiest/idlest\tops/entry\terrors\n%s", strings.Join(rows, "\n"))
}

// waitShardsEven waits until each running node leads ⌊S/N⌋ or ⌈S/N⌉ of
// shards shards.
func waitShardsEven(t *testing.T, c *Cluster, shards int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		sts, _ := c.StatusOf(c.Running(), 2*time.Second)
		counts := map[string]int{}
		total := 0
		for i, st := range sts {
			if st == nil {
				continue
			}
			for _, sh := range st.GetShards() {
				if sh.GetState() == "Leader" && sh.GetActive() {
					counts[c.Running()[i].ID]++
					total++
				}
			}
		}
		lo, hi := shards/3, (shards+2)/3
		even := total == shards && len(counts) == 3
		for _, k := range counts {
			even = even && k >= lo && k <= hi
		}
		if even {
			t.Logf("shard leaders: %v", counts)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("shard leaders not even within %v", timeout)
}

// capCPU puts node n's process in a cgroup (v1) whose CPU quota is cores.
func capCPU(t *testing.T, n *Node, cores float64) {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup/cpu", fmt.Sprintf("cohort-bench-%s-%d", n.ID, os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("no cgroup CPU controller to cap nodes with: %v", err)
	}
	t.Cleanup(func() {
		// Move what is left back to the root group, then remove ours.
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				os.WriteFile("/sys/fs/cgroup/cpu/cgroup.procs", []byte(pid), 0o644)
			}
		}
		os.Remove(dir)
	})
	write := func(name, v string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatalf("cgroup %s: %v", name, err)
		}
	}
	write("cpu.cfs_period_us", "100000")
	write("cpu.cfs_quota_us", strconv.Itoa(int(cores*100000)))
	write("cgroup.procs", strconv.Itoa(n.Cmd.Process.Pid))
}

// cpuSeconds is the user+system CPU a process used so far.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // clock ticks at USER_HZ=100
}

// benchMember is a formed group's only member.
type benchMember struct {
	group, memberID string
	gen             int32
	addr            string // the group's coordinator
}

// formGroups forms n groups of one member each, 32 at a time.
func formGroups(t *testing.T, c *Cluster, n int) []benchMember {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	admin := NewConns("bench-admin")
	defer admin.Close()
	if err := CreateTopic(ctx, &Coordinator{Conns: admin, Seeds: c.KafkaAddrs, Group: "bench"}, "bench", 1); err != nil {
		t.Fatal(err)
	}
	out := make([]benchMember, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns := NewConns(fmt.Sprintf("bench-form-%d", w))
			defer conns.Close()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || failed.Load() != nil {
					return
				}
				m, err := formOne(ctx, conns, c, fmt.Sprintf("bench-g%05d", i))
				if err != nil {
					failed.Store(err)
					return
				}
				out[i] = m
			}
		}()
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, m := range out {
		per[c.NameOf(m.addr)]++
	}
	t.Logf("formed %d groups in %v; groups per coordinator: %v", n, time.Since(start).Round(time.Millisecond), per)
	return out
}

func formOne(ctx context.Context, conns *Conns, c *Cluster, group string) (benchMember, error) {
	// A capped node may lose a shard's leadership between the join and
	// the sync; the new leader does not know a member whose group was
	// never synced, and a client joins again, as here.
	for attempt := 1; ; attempt++ {
		m, err := formOnce(ctx, conns, c, group)
		var re rejoinError
		if !errors.As(err, &re) || attempt == 5 {
			return m, err
		}
	}
}

// rejoinError is a sync answer after which a Kafka client joins again.
type rejoinError struct{ code int16 }

func (e rejoinError) Error() string { return fmt.Sprintf("error %d", e.code) }

func formOnce(ctx context.Context, conns *Conns, c *Cluster, group string) (benchMember, error) {
	coord := &Coordinator{Conns: conns, Seeds: c.KafkaAddrs, Group: group}
	join := func(memberID string) (*kmsg.JoinGroupResponse, string, error) {
		res, addr, err := coord.Retry(ctx, func() kmsg.Request {
			r := kmsg.NewPtrJoinGroupRequest()
			r.Group, r.MemberID, r.ProtocolType = group, memberID, "consumer"
			r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = 300_000, 60_000
			p := kmsg.NewJoinGroupRequestProtocol()
			meta := kmsg.NewConsumerMemberMetadata()
			meta.Topics = []string{"bench"}
			p.Name, p.Metadata = "range", meta.AppendTo(nil)
			r.Protocols = append(r.Protocols, p)
			return r
		}, func(r kmsg.Response) int16 { return r.(*kmsg.JoinGroupResponse).ErrorCode })
		if err != nil {
			return nil, "", err
		}
		return res.(*kmsg.JoinGroupResponse), addr, nil
	}
	jr, _, err := join("")
	if err != nil {
		return benchMember{}, err
	}
	if jr.ErrorCode == 79 { // MEMBER_ID_REQUIRED
		if jr, _, err = join(jr.MemberID); err != nil {
			return benchMember{}, err
		}
	}
	if jr.ErrorCode == 25 || jr.ErrorCode == 27 { // UNKNOWN_MEMBER_ID (a new leader never heard of the pending member), REBALANCE_IN_PROGRESS
		return benchMember{}, fmt.Errorf("%s: join: %w", group, rejoinError{jr.ErrorCode})
	}
	if jr.ErrorCode != 0 {
		return benchMember{}, fmt.Errorf("%s: join: error %d", group, jr.ErrorCode)
	}
	res, addr, err := coord.Retry(ctx, func() kmsg.Request {
		r := kmsg.NewPtrSyncGroupRequest()
		r.Group, r.Generation, r.MemberID = group, jr.Generation, jr.MemberID
		r.ProtocolType, r.Protocol = kmsg.StringPtr("consumer"), jr.Protocol
		a := kmsg.NewSyncGroupRequestGroupAssignment()
		as := kmsg.NewConsumerMemberAssignment()
		tp := kmsg.NewConsumerMemberAssignmentTopic()
		tp.Topic, tp.Partitions = "bench", []int32{0}
		as.Topics = append(as.Topics, tp)
		a.MemberID, a.MemberAssignment = jr.MemberID, as.AppendTo(nil)
		r.GroupAssignment = append(r.GroupAssignment, a)
		return r
	}, func(r kmsg.Response) int16 { return r.(*kmsg.SyncGroupResponse).ErrorCode })
	if err != nil {
		return benchMember{}, err
	}
	switch code := res.(*kmsg.SyncGroupResponse).ErrorCode; code {
	case 0:
	case 22, 25, 27: // ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS
		return benchMember{}, fmt.Errorf("%s: sync: %w", group, rejoinError{code})
	default:
		return benchMember{}, fmt.Errorf("%s: sync: error %d", group, code)
	}
	return benchMember{group: group, memberID: jr.MemberID, gen: jr.Generation, addr: addr}, nil
}

// loadResult is one phase's outcome.
type loadResult struct {
	rate   float64 // answered operations per second
	ops    int64
	errors int64
	cpu    map[string]float64 // node -> CPU seconds in the phase
	nodes  []string
	// entries is how many Raft entries the shards committed in the phase.
	entries uint64
	// logTxs and logWrites are the shared log's transactions and the
	// shard writes they carried, summed over the nodes (0 with one shard).
	logTxs, logWrites float64
}

// sharedLogCounts sums the shared log's counters over the running nodes.
func sharedLogCounts(c *Cluster) (txs, writes float64) {
	for _, n := range c.Running() {
		if m, err := n.Scrape(); err == nil {
			txs += m.Sum("cohort_raft_shared_log_transactions_total")
			writes += m.Sum("cohort_raft_shared_log_writes_total")
		}
	}
	return txs, writes
}

// raftEntries sums the commit indexes of every shard's leader.
func raftEntries(c *Cluster) uint64 {
	sts, _ := c.StatusOf(c.Running(), 5*time.Second)
	var sum uint64
	for _, st := range sts {
		for _, sh := range st.GetShards() {
			if sh.GetState() == "Leader" {
				sum += sh.GetCommitIndex()
			}
		}
	}
	return sum
}

func (r loadResult) total() float64 {
	s := 0.0
	for _, v := range r.cpu {
		s += v
	}
	return s
}

// perOp is server CPU (all nodes) per operation, in µs.
func (r loadResult) perOp() float64 {
	if r.ops == 0 {
		return 0
	}
	return r.total() / float64(r.ops) * 1e6
}

// spread is the busiest node's CPU over the idlest's.
func (r loadResult) spread() float64 {
	lo, hi := -1.0, 0.0
	for _, v := range r.cpu {
		if lo < 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
	}
	if lo <= 0 {
		return 0
	}
	return hi / lo
}

func (r loadResult) cpuCells() string {
	var out []string
	for _, n := range r.nodes {
		out = append(out, fmt.Sprintf("%s %.1f (%.0f%%)", n, r.cpu[n], 100*r.cpu[n]/r.total()))
	}
	return strings.Join(out, ", ")
}

// runLoad sends heartbeats or commits for every member to its coordinator
// for d, on 4 pipelined connections per node, and measures each node's
// CPU over the same time.
func runLoad(t *testing.T, c *Cluster, members []benchMember, phase string, window int, d time.Duration) loadResult {
	t.Helper()
	byAddr := map[string][]benchMember{}
	for _, m := range members {
		byAddr[m.addr] = append(byAddr[m.addr], m)
	}
	nodes := c.Running()
	res := loadResult{cpu: map[string]float64{}}
	entriesBefore := raftEntries(c)
	txsBefore, writesBefore := sharedLogCounts(c)
	before := map[string]float64{}
	for _, n := range nodes {
		res.nodes = append(res.nodes, n.ID)
		before[n.ID] = cpuSeconds(n.Cmd.Process.Pid)
	}
	var ops, errs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for addr, ms := range byAddr {
		const conns = 4
		for k := range conns {
			var mine []benchMember
			for i := k; i < len(ms); i += conns {
				mine = append(mine, ms[i])
			}
			if len(mine) == 0 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := pipeline(addr, mine, phase, window, stop, &ops, &errs); err != nil {
					t.Errorf("%s: %v", addr, err)
				}
			}()
		}
	}
	time.Sleep(d)
	close(stop)
	elapsed := time.Since(start)
	for _, n := range nodes {
		res.cpu[n.ID] = cpuSeconds(n.Cmd.Process.Pid) - before[n.ID]
	}
	wg.Wait()
	res.entries = raftEntries(c) - entriesBefore
	txs, writes := sharedLogCounts(c)
	res.logTxs, res.logWrites = txs-txsBefore, writes-writesBefore
	slices.Sort(res.nodes)
	res.ops, res.errors = ops.Load(), errs.Load()
	if e, _ := firstErr.Swap("").(string); e != "" {
		t.Logf("first error of the %s phase: %s", phase, e)
	}
	res.rate = float64(res.ops) / elapsed.Seconds()
	return res
}

// pipeline keeps window requests in flight on one connection to addr,
// cycling over members, until stop; it counts answers and error codes.
func pipeline(addr string, members []benchMember, phase string, window int, stop chan struct{}, ops, errs *atomic.Int64) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	frames := make([][]byte, len(members))
	for i, m := range members {
		var req kmsg.Request
		switch phase {
		case "heartbeat":
			r := kmsg.NewPtrHeartbeatRequest()
			r.Version = 3
			r.Group, r.Generation, r.MemberID = m.group, m.gen, m.memberID
			req = r
		default:
			r := kmsg.NewPtrOffsetCommitRequest()
			r.Version = 7
			r.Group, r.Generation, r.MemberID = m.group, m.gen, m.memberID
			tp := kmsg.NewOffsetCommitRequestTopic()
			tp.Topic = "bench"
			p := kmsg.NewOffsetCommitRequestTopicPartition()
			p.Partition, p.Offset, p.LeaderEpoch = 0, 1, -1
			tp.Partitions = append(tp.Partitions, p)
			r.Topics = append(r.Topics, tp)
			req = r
		}
		frames[i] = frame(req)
	}
	slots := make(chan struct{}, window)
	readErr := make(chan error, 1)
	go func() {
		r := bufio.NewReaderSize(conn, 64<<10)
		var size [4]byte
		buf := make([]byte, 0, 256)
		for {
			if _, err := io.ReadFull(r, size[:]); err != nil {
				readErr <- err
				return
			}
			n := binary.BigEndian.Uint32(size[:])
			buf = slices.Grow(buf[:0], int(n))[:n]
			if _, err := io.ReadFull(r, buf); err != nil {
				readErr <- err
				return
			}
			ops.Add(1)
			if code := answerCode(phase, buf[4:]); code != 0 {
				if errs.Add(1) == 1 {
					firstErr.Store(fmt.Sprintf("%s answered %s with error code %d", addr, phase, code))
				}
			}
			<-slots
		}
	}()
	w := bufio.NewWriterSize(conn, 64<<10)
	var corr uint32
	for i := 0; ; i = (i + 1) % len(frames) {
		select {
		case slots <- struct{}{}:
		case <-stop:
			w.Flush()
			return nil
		case err := <-readErr:
			return err
		}
		f := frames[i]
		corr++
		binary.BigEndian.PutUint32(f[8:], corr)
		w.Write(f)
		if len(slots) == cap(slots) || w.Buffered() > 32<<10 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
		if len(slots) < cap(slots) {
			continue
		}
		w.Flush()
	}
}

// frame encodes a request with a v1 header (the versions used here are not
// flexible).
func frame(req kmsg.Request) []byte {
	b := make([]byte, 4, 64)
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint16(b, 5)
	b = append(b, "bench"...)
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// firstErr is the first error answer of a load phase, for the log.
var firstErr atomic.Value

// answerCode is the error code of a heartbeat or commit answer (-1: it
// does not decode).
func answerCode(phase string, body []byte) int16 {
	switch phase {
	case "heartbeat":
		r := kmsg.NewPtrHeartbeatResponse()
		r.Version = 3
		if r.ReadFrom(body) != nil {
			return -1
		}
		return r.ErrorCode
	default:
		r := kmsg.NewPtrOffsetCommitResponse()
		r.Version = 7
		if r.ReadFrom(body) != nil {
			return -1
		}
		for _, tp := range r.Topics {
			for _, p := range tp.Partitions {
				if p.ErrorCode != 0 {
					return p.ErrorCode
				}
			}
		}
		return 0
	}
}
