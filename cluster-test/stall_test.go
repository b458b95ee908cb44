package clustertest

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// cohortdTimings are cohortd's default Raft timings
// (raftfsm.DefaultConfig), which the harness's shorter test timings
// replace elsewhere.
func cohortdTimings(o *Options) {
	o.HeartbeatTimeout, o.ElectionTimeout, o.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, 2*time.Second
}

// Each node in turn stopped (SIGSTOP) for 0.4 s and for 1 s, as a GC pause, a
// stalled disk or a VM's stolen time stops a process, while a load
// generator commits offsets to every group's coordinator on pipelined
// connections: no shard changes leader, no commit is answered
// NOT_COORDINATOR, REQUEST_TIMED_OUT or any other error, and every group's
// offset reads back as its last acknowledged commit.
//
// COHORT_STALL_GROUPS (default 160) sets the groups, COHORT_STALL_PAUSES
// (default "400ms,1s,400ms,1s,400ms,1s") the stalls, one node each in
// turn, and COHORT_BENCH_RAFT other Raft timings. With COHORT_STALL_MOVES=1 (stalls
// longer than the heartbeat timeout) the stalled node's shards may move:
// the changes are counted, not failed; every other check holds.
func TestStallKeepsLeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts cohortd processes")
	}
	groups := envInt(t, "COHORT_STALL_GROUPS", 160)
	pauses := []time.Duration{400 * time.Millisecond, time.Second, 400 * time.Millisecond, time.Second, 400 * time.Millisecond, time.Second}
	if v := os.Getenv("COHORT_STALL_PAUSES"); v != "" {
		pauses = nil
		for _, p := range splitList(v) {
			d, err := time.ParseDuration(p)
			if err != nil {
				t.Fatalf("COHORT_STALL_PAUSES=%q: %v", v, err)
			}
			pauses = append(pauses, d)
		}
	}
	const shards = 16
	c := StartCluster(t, 3, cohortdTimings, benchOptions(t), func(o *Options) {
		o.Args = append(o.Args, "--shards", strconv.Itoa(shards), "--shard-move-interval", "1s",
			"--group-max-session-timeout", "5m")
	})
	waitShardsEven(t, c, shards, 90*time.Second)
	members := formGroups(t, c, groups)
	before := shardTerms(t, c)

	load := startCommitLoad(t, members, 4, 64)
	time.Sleep(2 * time.Second)
	for i, d := range pauses {
		n := c.Running()[i%3]
		stopFor(t, n, d)
		t.Logf("stopped %s for %v (load average %s)", n.ID, d, loadAverage())
		time.Sleep(3 * time.Second)
	}
	res := load.stop()
	t.Logf("%d commits answered, %d acknowledged; error answers by code %v; connection errors %d", res.answered, res.acked, res.codes, res.connErrs)

	after := shardTerms(t, c)
	moves := os.Getenv("COHORT_STALL_MOVES") == "1"
	changed := 0
	for k, b := range before {
		if a := after[k]; a != b {
			changed++
			if moves {
				continue
			}
			t.Errorf("shard %d: leader %s in term %d before, %s in term %d after", k, b.leader, b.term, a.leader, a.term)
		}
	}
	t.Logf("%d of %d shards changed leader or term", changed, len(before))
	for code, n := range res.codes {
		t.Errorf("%d commits answered with error code %d", n, code)
	}
	if res.connErrs > 0 {
		t.Errorf("%d connections failed", res.connErrs)
	}
	if res.acked == 0 {
		t.Fatal("no commit acknowledged")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conns := NewConns("stall-fetch")
	defer conns.Close()
	var notCoord, wrong int
	for _, m := range members {
		want, ok := res.last[m.group]
		if !ok {
			continue
		}
		got, code, err := fetchOffset(ctx, conns, m.addr, m.group)
		switch {
		case err != nil:
			t.Fatalf("%s: offset fetch: %v", m.group, err)
		case code == 16:
			notCoord++
		case code != 0 || got != want:
			if wrong++; wrong <= 5 {
				t.Errorf("%s: offset fetch from %s: code %d offset %d, last acknowledged commit %d", m.group, m.addr, code, got, want)
			}
		}
	}
	if notCoord+wrong > 0 {
		t.Errorf("offset fetches after the run: %d NOT_COORDINATOR, %d not the last acknowledged commit", notCoord, wrong)
	}
}

func splitList(v string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(v); i++ {
		if i == len(v) || v[i] == ',' {
			if i > start {
				out = append(out, v[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// loadAverage is the machine's 1-, 5- and 15-minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil || len(b) < 14 {
		return "?"
	}
	return string(b[:14])
}

// stopFor stops node n's process for d, then continues it.
func stopFor(t *testing.T, n *Node, d time.Duration) {
	t.Helper()
	if err := n.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, n.Cmd.Process.Pid)
	time.Sleep(d)
	if err := n.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

type shardTerm struct {
	leader string
	term   uint64
}

// shardTerms is each shard's leader and term, as the leaders see them.
func shardTerms(t *testing.T, c *Cluster) map[uint32]shardTerm {
	t.Helper()
	out := map[uint32]shardTerm{}
	sts, errs := c.StatusOf(c.Running(), 10*time.Second)
	for i, st := range sts {
		if st == nil {
			t.Fatalf("status of %s: %v", c.Running()[i].ID, errs[i])
		}
		for _, sh := range st.GetShards() {
			if sh.GetState() == "Leader" {
				out[sh.GetId()] = shardTerm{leader: c.Running()[i].ID, term: sh.GetTerm()}
			}
		}
	}
	return out
}

// commitLoad commits offsets for every member to its coordinator on
// pipelined connections: each group on one connection, its offsets
// rising, so the last acknowledged commit of a group is the one answered
// last.
type commitLoad struct {
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	res  loadOutcome
}

type loadOutcome struct {
	answered, acked int64
	codes           map[int16]int64
	connErrs        int
	last            map[string]int64 // group -> last acknowledged offset
}

func startCommitLoad(t *testing.T, members []benchMember, connsPerNode, window int) *commitLoad {
	l := &commitLoad{done: make(chan struct{}), res: loadOutcome{codes: map[int16]int64{}, last: map[string]int64{}}}
	byAddr := map[string][]benchMember{}
	for _, m := range members {
		byAddr[m.addr] = append(byAddr[m.addr], m)
	}
	var offset atomic.Int64
	for addr, ms := range byAddr {
		for k := range connsPerNode {
			var mine []benchMember
			for i := k; i < len(ms); i += connsPerNode {
				mine = append(mine, ms[i])
			}
			if len(mine) == 0 {
				continue
			}
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				if err := l.pipeline(addr, mine, window, &offset); err != nil {
					t.Logf("%s: %v", addr, err)
					l.mu.Lock()
					l.res.connErrs++
					l.mu.Unlock()
				}
			}()
		}
	}
	return l
}

// stop ends the load, waits for every answer in flight, and returns the
// outcome.
func (l *commitLoad) stop() loadOutcome {
	close(l.done)
	l.wg.Wait()
	return l.res
}

type sentCommit struct {
	group  string
	offset int64
}

func (l *commitLoad) pipeline(addr string, members []benchMember, window int, offset *atomic.Int64) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	inflight := make(chan sentCommit, window)
	readErr := make(chan error, 1)
	go func() {
		r := bufio.NewReaderSize(conn, 64<<10)
		var size [4]byte
		buf := make([]byte, 0, 256)
		for sent := range inflight {
			if _, err := io.ReadFull(r, size[:]); err != nil {
				readErr <- err
				return
			}
			n := binary.BigEndian.Uint32(size[:])
			buf = append(buf[:0], make([]byte, n)...)
			if _, err := io.ReadFull(r, buf); err != nil {
				readErr <- err
				return
			}
			code := answerCode("commit", buf[4:])
			l.mu.Lock()
			l.res.answered++
			if code == 0 {
				l.res.acked++
				l.res.last[sent.group] = sent.offset
			} else {
				l.res.codes[code]++
			}
			l.mu.Unlock()
		}
		readErr <- nil
	}()
	w := bufio.NewWriterSize(conn, 64<<10)
	var corr uint32
	finish := func() error {
		close(inflight)
		w.Flush()
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		return <-readErr
	}
	for i := 0; ; i = (i + 1) % len(members) {
		m := members[i]
		sent := sentCommit{group: m.group, offset: offset.Add(1)}
		select {
		case <-l.done:
			return finish()
		case err := <-readErr:
			return fmt.Errorf("connection failed: %w", err)
		case inflight <- sent:
		}
		r := kmsg.NewPtrOffsetCommitRequest()
		r.Version = 7
		r.Group, r.Generation, r.MemberID = m.group, m.gen, m.memberID
		tp := kmsg.NewOffsetCommitRequestTopic()
		tp.Topic = "bench"
		p := kmsg.NewOffsetCommitRequestTopicPartition()
		p.Partition, p.Offset, p.LeaderEpoch = 0, sent.offset, -1
		tp.Partitions = append(tp.Partitions, p)
		r.Topics = append(r.Topics, tp)
		f := frame(r)
		corr++
		binary.BigEndian.PutUint32(f[8:], corr)
		w.Write(f)
		if len(inflight) == cap(inflight) || w.Buffered() > 32<<10 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// fetchOffset reads the group's committed offset of bench/0 from the node
// at addr, and the answer's error code.
func fetchOffset(ctx context.Context, conns *Conns, addr, group string) (int64, int16, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version, req.Group = 5, group
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = "bench", []int32{0}
	req.Topics = []kmsg.OffsetFetchRequestTopic{ft}
	res, err := conns.Request(ctx, addr, req)
	if err != nil {
		return 0, 0, err
	}
	r := res.(*kmsg.OffsetFetchResponse)
	if r.ErrorCode != 0 {
		return 0, r.ErrorCode, nil
	}
	for _, tp := range r.Topics {
		for _, p := range tp.Partitions {
			return p.Offset, p.ErrorCode, nil
		}
	}
	return 0, 0, fmt.Errorf("no partition in the answer")
}
