package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	clustertest "github.com/cohort-coord/cohort/cluster-test"
)

// Nemeses are the fault kinds a run can inject.
var Nemeses = []string{"kill", "pause", "partition", "transfer", "membership", "snapshot"}

// ShardNemeses are the nemeses of a run on a sharded cluster: those above
// and "move", planned moves of shard leaders.
var ShardNemeses = append(slices.Clone(Nemeses), "move")

// Config configures one chaos run.
type Config struct {
	Nodes    int
	Duration time.Duration // of the fault phase; the heal and checks come after
	Nemeses  []string
	Seed     uint64
	// Shards is the cluster's shard count (--shards); 0 or 1: one.
	Shards int
	// Bugs switches seeded bugs on (a comma-separated list of
	// seededbug.Names); the run then uses a cohortd built with the
	// seededbugs tag.
	Bugs string
	// Session and rebalance timeout of every member.
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	// Quiet is the shortest quiet window between two faults (a random
	// extra of up to Quiet is added).
	Quiet time.Duration
	// Floor is the workload below which a run is invalid.
	Floor Floor
	// Progress, when set, is called about once a second while faults run.
	Progress func(Progress)
	Logf     func(format string, args ...any)
}

// Floor is the least a run must have done to count.
type Floor struct {
	OKOpsPerSecond float64 // successful group requests per second of the fault phase
	Faults         int
	LeaderChanges  int
}

// Progress is the state of a running run.
type Progress struct {
	Elapsed, Total time.Duration
	Faults         int
	Ops            int
	Leader         string
	Active         string // the fault in force, if any
}

// DefaultConfig is a 3-node run of every nemesis for d.
func DefaultConfig(d time.Duration, seed uint64) Config {
	return Config{
		Nodes: 3, Duration: d, Nemeses: Nemeses, Seed: seed,
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second,
		Quiet: 2 * time.Second,
		Floor: Floor{OKOpsPerSecond: 20, Faults: max(1, int(d/(20*time.Second)))},
	}
}

// MoveLeaders sets the floor of leader changes for nemeses that move
// leadership: at least one a minute of faults (one for shorter runs).
func (c *Config) MoveLeaders() {
	for _, n := range c.Nemeses {
		if n == "kill" || n == "pause" || n == "partition" || n == "transfer" {
			c.Floor.LeaderChanges = max(1, int(c.Duration/time.Minute))
		}
	}
}

// Raft timings of every chaos node (cluster-test's defaults) and the
// snapshot settings that make a follower cut off for a few seconds of
// commits install a snapshot.
const (
	electionTimeout   = 500 * time.Millisecond
	snapshotInterval  = "1s"
	snapshotThreshold = "32"
	trailingLogs      = "16"
)

// run is the state of one run.
type run struct {
	cfg Config
	t   testing.TB
	rng *rand.Rand
	net *Net
	c   *clustertest.Cluster
	w   *clustertest.Workload
	rec *recorder
	hst *clustertest.History
	kg  *kgoGroup
	lgs []*libGroup // member-library groups: dynamic cooperative, static eager
	// clients are the groups of real client libraries (kg and lgs), which
	// the run treats alike.
	clients []clientGroup

	begin   time.Time // the workload started: log times count from here
	stopAux chan struct{}
	auxWG   sync.WaitGroup
	active  atomic.Value // string: the fault in force
	paused  map[int]bool
}

// Run runs one chaos run on t (a test, or NewTB for the runner) and
// returns its record with the checkers' verdict. A failure to set the
// cluster up is an error; what the checkers find is in the Report.
func Run(t testing.TB, cfg Config) (rep *Report, err error) {
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	if cfg.Nodes < 3 {
		return nil, fmt.Errorf("a chaos run needs at least 3 nodes, not %d", cfg.Nodes)
	}
	known := Nemeses
	if cfg.Shards > 1 {
		known = ShardNemeses
	}
	for _, n := range cfg.Nemeses {
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("unknown nemesis %q (known: %s)", n, strings.Join(known, ", "))
		}
	}
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(fatal)
			if !ok {
				panic(p)
			}
			err = errors.New(f.msg)
		}
	}()
	r := &run{cfg: cfg, t: t, rng: rand.New(rand.NewPCG(cfg.Seed, 0x636f686f7274)), rec: &recorder{},
		stopAux: make(chan struct{}), paused: map[int]bool{}}
	r.active.Store("")
	return r.run()
}

// freePort returns a free 127.0.0.1 address for a node's Raft listener,
// which must be known before the node starts (its proxy dials it). The port
// is picked below the kernel's ephemeral range: a port of that range, found
// free and released, can be handed to any other socket (an outgoing
// connection, another test's listener on port 0) before the node binds it,
// and the node then fails to start ("address already in use").
func freePort() (string, error) {
	if lo := ephemeralLow(); lo > minPickedPort+1000 {
		for range 100 {
			p := minPickedPort + rand.IntN(lo-minPickedPort)
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				continue
			}
			l.Close()
			return l.Addr().String(), nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// minPickedPort is the lowest port freePort picks.
const minPickedPort = 10000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			fmt.Sscan(f[0], &lo)
		}
	}
	return lo
}

func (r *run) run() (*Report, error) {
	cfg := r.cfg
	ids := make([]string, cfg.Nodes)
	raftAddrs := map[string]string{}
	for i := range ids {
		ids[i] = fmt.Sprintf("node%d", i+1)
		a, err := freePort()
		if err != nil {
			return nil, err
		}
		raftAddrs[ids[i]] = a
	}
	var err error
	if r.net, err = NewNet(ids, func(id string) string { return raftAddrs[id] }); err != nil {
		return nil, err
	}
	r.t.Cleanup(r.net.Close)
	bin := ""
	if cfg.Bugs != "" {
		if bin, err = seededBinary(); err != nil {
			return nil, err
		}
	}
	r.c = clustertest.StartCluster(r.t, cfg.Nodes, func(o *clustertest.Options) {
		o.Binary = bin
		o.Args = append(o.Args, "--raft-snapshot-interval", snapshotInterval, "--raft-snapshot-threshold", snapshotThreshold, "--raft-trailing-logs", trailingLogs)
		if cfg.Bugs != "" {
			o.Args = append(o.Args, "--seeded-bugs", cfg.Bugs)
		}
		if cfg.Shards > 1 {
			o.Args = append(o.Args, "--shards", strconv.Itoa(cfg.Shards), "--shard-move-interval", "5s")
		}
		o.NodeArgs = func(id string) []string {
			return []string{"--raft-addr", raftAddrs[id], "--raft-peer-addrs", r.net.PeerAddrs(id)}
		}
	})
	if tb, ok := r.t.(*TB); ok {
		for i := range cfg.Nodes {
			tb.mu.Lock()
			tb.logs = append(tb.logs, r.c.Node(i).LogPath)
			tb.mu.Unlock()
		}
	}
	cfg.Logf("cluster of %d up, %d shard(s), seed %d, nemeses %v, bugs %q", cfg.Nodes, max(cfg.Shards, 1), cfg.Seed, cfg.Nemeses, cfg.Bugs)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wc := clustertest.DefaultWorkload()
	wc.Groups, wc.Members, wc.Partitions, wc.StaticGroups = 2, 4, 8, 1
	wc.Member.SessionTimeout, wc.Member.RebalanceTimeout = cfg.SessionTimeout, cfg.RebalanceTimeout
	begin := time.Now()
	if r.w, err = clustertest.StartWorkload(ctx, r.c.KafkaAddrs, wc); err != nil {
		return nil, err
	}
	r.t.Cleanup(r.w.Stop)
	r.hst = r.w.History
	// A workload that does not settle is itself a finding (the checkers
	// see its history): the run goes on.
	settle := 30 * time.Second
	if _, err := r.w.WaitStable(settle, time.Second); err != nil {
		cfg.Logf("emulated groups did not settle before the faults: %v", err)
		settle = 5 * time.Second
	}
	if r.kg, err = startKgoGroup(ctx, r, "group-kgo", "topic-kgo", 6, 3, false, settle); err != nil {
		return nil, err
	}
	r.t.Cleanup(r.kg.close)
	// The same consumers on the consumer group protocol (KIP-848): the
	// coordinator assigns, each member reconciles on its own.
	kg848, err := startKgoGroup(ctx, r, "group-kgo848", "topic-kgo848", 6, 3, true, settle)
	if err != nil {
		return nil, err
	}
	r.t.Cleanup(kg848.close)
	for _, static := range []bool{false, true} {
		name := "group-lib"
		if static {
			name = "group-lib-static"
		}
		lg, err := startLibGroup(ctx, r, name, "topic-"+strings.TrimPrefix(name, "group-"), 6, 3, static, settle)
		if err != nil {
			return nil, err
		}
		r.t.Cleanup(lg.close)
		r.lgs = append(r.lgs, lg)
	}
	r.clients = []clientGroup{r.kg, kg848}
	for _, lg := range r.lgs {
		r.clients = append(r.clients, lg)
	}
	r.w.SetCommits(true)
	start := time.Now()
	for _, g := range r.w.Groups {
		r.auxWG.Add(2)
		go r.fetcher(g.ID, g.Topic, g.Partitions)
		go r.zombie(g)
	}
	for _, g := range r.clients {
		gi := g.info()
		r.auxWG.Add(1)
		go r.fetcher(gi.ID, gi.Topic, gi.Partitions)
	}
	r.auxWG.Add(1)
	go r.sampleLeaders()
	for _, g := range r.clients {
		g.setCommits(true)
	}

	r.begin = begin
	r.nemesisLoop(start, start.Add(cfg.Duration))

	faultsEnd := time.Now()
	cfg.Logf("faults over: healing")
	r.healAll()
	r.c.WaitVoters(ids, 60*time.Second)
	healed := time.Now()
	cfg.Logf("healed in %v", healed.Sub(faultsEnd).Round(time.Millisecond))
	live := map[string][]Violation{}
	r.checkStable(ctx, healed, live)
	for _, g := range r.clients {
		g.setCommits(false)
	}
	if err := r.w.StopCommits(15 * time.Second); err != nil {
		live["I5"] = append(live["I5"], Violation{"I5", time.Now(), err.Error()})
	}
	// A client commit in flight finishes within its 10 s bound; the
	// committing loops check the flag before each one.
	time.Sleep(400 * time.Millisecond)
	close(r.stopAux)
	r.auxWG.Wait()
	final := r.finalFetch(ctx)
	r.checkConverged(live)
	end := time.Now()

	rec := &Record{
		Seed: cfg.Seed, Nodes: ids, KafkaAddrs: map[string]string{}, Nemeses: cfg.Nemeses, Bugs: cfg.Bugs,
		SessionTimeout: cfg.SessionTimeout, RebalanceTimeout: cfg.RebalanceTimeout,
		Start: begin, FaultsStart: start, FaultsEnd: faultsEnd, Healed: healed, End: end,
		Final: final, Live: live, PeakLoad: r.rec.peakLoadNow(),
	}
	for i := range ids {
		n := r.c.Node(i)
		rec.KafkaAddrs[n.ID] = n.KafkaAddr
		rec.SnapshotInstalls += strings.Count(readFile(n.LogPath), "Installed remote snapshot")
	}
	for i, g := range r.w.Groups {
		style := "eager"
		if i < wc.StaticGroups {
			style = "static"
		}
		rec.Groups = append(rec.Groups, GroupInfo{g.ID, g.Topic, g.Partitions, style})
	}
	for _, g := range r.clients {
		rec.Groups = append(rec.Groups, g.info())
	}
	rec.Ops = fromCluster(r.hst.Ops())
	r.rec.mu.Lock()
	rec.Faults, rec.Leaders, rec.Events = r.rec.faults, r.rec.leaders, r.rec.events
	r.rec.mu.Unlock()
	return Check(rec, cfg.Floor), nil
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

var (
	seededOnce sync.Once
	seededBin  string
	seededErr  error
)

// seededBinary builds cohortd with the seededbugs tag once per process.
func seededBinary() (string, error) {
	seededOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cohort-seeded-")
		if err != nil {
			seededErr = err
			return
		}
		root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cohort-coord/cohort").Output()
		if err != nil {
			seededErr = fmt.Errorf("go list -m github.com/cohort-coord/cohort: %w", err)
			return
		}
		seededBin = filepath.Join(dir, "cohortd")
		cmd := exec.Command("go", "build", "-tags", "seededbugs", "-o", seededBin, "./cmd/cohortd")
		cmd.Dir = strings.TrimSpace(string(root))
		if out, err := cmd.CombinedOutput(); err != nil {
			seededErr = fmt.Errorf("go build -tags seededbugs: %v\n%s", err, out)
		}
	})
	return seededBin, seededErr
}

// RemoveSeededBinary deletes the seeded build (call it from TestMain).
func RemoveSeededBinary() {
	if seededBin != "" {
		os.RemoveAll(filepath.Dir(seededBin))
	}
}

// sampleLeaders records the leader every 200 ms until the run ends.
func (r *run) sampleLeaders() {
	defer r.auxWG.Done()
	for {
		select {
		case <-r.stopAux:
			return
		case <-time.After(200 * time.Millisecond):
		}
		nodes := r.c.Running()
		var live []*clustertest.Node
		for _, n := range nodes {
			if !r.isPaused(n.Index) {
				live = append(live, n)
			}
		}
		sts, _ := r.c.StatusOf(live, time.Second)
		best, term := "", uint64(0)
		for _, st := range sts {
			if st != nil && st.State == "Leader" && st.Term >= term {
				best, term = st.NodeId, st.Term
			}
		}
		r.rec.leader(LeaderSample{At: time.Now(), Leader: best, Term: term, Load: loadAverage()})
	}
}

// closeOnce closes ch unless it is closed already, and reports whether it
// did (callers run on one goroutine: the run's cleanup).
func closeOnce(ch chan struct{}) bool {
	select {
	case <-ch:
		return false
	default:
		close(ch)
		return true
	}
}

// loadAverage is the machine's 1-minute load average (0 where /proc has
// none).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	fmt.Sscanf(string(b), "%f", &l)
	return l
}

func (r *run) isPaused(i int) bool {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	return r.paused[i]
}

// fetcher reads a group's committed offsets every 150 ms, as one client
// that sends one request at a time.
func (r *run) fetcher(group, topic string, parts int32) {
	defer r.auxWG.Done()
	conns := clustertest.NewConns("fetch-" + group)
	defer conns.Close()
	coord := &clustertest.Coordinator{Conns: conns, Seeds: r.c.KafkaAddrs, Group: group}
	for {
		select {
		case <-r.stopAux:
			return
		case <-time.After(150 * time.Millisecond):
		}
		r.fetchOnce(coord, "fetcher-"+group, topic, parts)
	}
}

func (r *run) fetchOnce(coord *clustertest.Coordinator, client, topic string, parts int32) (map[int32]int64, bool) {
	op := &clustertest.Op{Kind: OpFetch, Group: coord.Group, Client: client, Topic: topic, Gen: -1, Start: time.Now()}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = coord.Group
	t := kmsg.NewOffsetFetchRequestTopic()
	t.Topic = topic
	for p := range parts {
		t.Partitions = append(t.Partitions, p)
	}
	req.Topics = []kmsg.OffsetFetchRequestTopic{t}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	res, addr, err := coord.Do(ctx, req)
	cancel()
	op.End, op.Node, op.Err = time.Now(), addr, err
	if err == nil {
		fr := res.(*kmsg.OffsetFetchResponse)
		op.Code = fr.ErrorCode
		if op.Code == 0 {
			op.Offsets = map[int32]int64{}
			for _, rt := range fr.Topics {
				for _, rp := range rt.Partitions {
					if rp.ErrorCode != 0 {
						op.Code = rp.ErrorCode
					}
					op.Offsets[rp.Partition] = rp.Offset
				}
			}
		}
		if op.Code == 14 || op.Code == 15 || op.Code == 16 {
			coord.Forget()
		}
	}
	r.hst.Add(op)
	return op.Offsets, op.OK()
}

// zombieOffsets are the offsets zombie commits send: unique, and far above
// what the members commit.
var zombieOffsets atomic.Int64

// zombie plays a consumer that missed a rebalance: every 1.5 s it commits,
// for one member that moved to a newer generation, one of that member's
// partitions stamped with the member's previous generation. A coordinator
// must refuse it (ILLEGAL_GENERATION); CheckFencing flags one that succeeds.
func (r *run) zombie(g *clustertest.GroupLoad) {
	defer r.auxWG.Done()
	conns := clustertest.NewConns("zombie-" + g.ID)
	defer conns.Close()
	coord := &clustertest.Coordinator{Conns: conns, Seeds: r.c.KafkaAddrs, Group: g.ID}
	for {
		select {
		case <-r.stopAux:
			return
		case <-time.After(1500 * time.Millisecond):
		}
		var st clustertest.MemberState
		var name string
		for _, m := range r.members(g) {
			if s := m.State(); s.Synced && s.Gen >= 2 && len(s.Assigned) > 0 {
				st, name = s, m.Name
				break
			}
		}
		if name == "" {
			continue
		}
		p := st.Assigned[0]
		off := 1_000_000_000 + zombieOffsets.Add(1)
		op := &clustertest.Op{Kind: clustertest.OpCommit, Group: g.ID, Client: "zombie-" + name, MemberID: st.MemberID, Gen: st.Gen - 1,
			Topic: g.Topic, Offsets: map[int32]int64{p: off}, Acked: map[int32]bool{}, Start: time.Now()}
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.Generation, req.MemberID = g.ID, st.Gen-1, st.MemberID
		t := kmsg.NewOffsetCommitRequestTopic()
		t.Topic = g.Topic
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, off
		t.Partitions = []kmsg.OffsetCommitRequestTopicPartition{rp}
		req.Topics = []kmsg.OffsetCommitRequestTopic{t}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, addr, err := coord.Do(ctx, req)
		cancel()
		op.End, op.Node, op.Err = time.Now(), addr, err
		if err == nil {
			for _, rt := range res.(*kmsg.OffsetCommitResponse).Topics {
				for _, rp := range rt.Partitions {
					if rp.ErrorCode == 0 {
						op.Acked[rp.Partition] = true
					} else {
						op.Code = rp.ErrorCode
					}
				}
			}
			if op.Code == 14 || op.Code == 15 || op.Code == 16 {
				coord.Forget()
			}
		}
		r.hst.Add(op)
	}
}

// members returns a copy of g's member list: the nemesis loop changes it.
var membersMu sync.Mutex

func (r *run) members(g *clustertest.GroupLoad) []*clustertest.Member {
	membersMu.Lock()
	defer membersMu.Unlock()
	return slices.Clone(g.Members)
}

// churn crashes or adds one emulated member (between 3 and 5 per group),
// or, one time in four, replaces a member of a member-library group (a
// graceful leave and a new join; in the static group with the same
// instance id).
func (r *run) churn() {
	if r.rng.IntN(4) == 0 {
		r.lgs[r.rng.IntN(len(r.lgs))].churn()
		return
	}
	g := r.w.Groups[r.rng.IntN(len(r.w.Groups))]
	membersMu.Lock()
	defer membersMu.Unlock()
	if len(g.Members) > 3 && (len(g.Members) >= 5 || r.rng.IntN(2) == 0) {
		m := g.Members[r.rng.IntN(len(g.Members))]
		r.w.RemoveMember(g, m)
		r.rec.event(Event{At: time.Now(), Group: g.ID, Client: m.Name, Kind: "crash"})
		return
	}
	m := r.w.AddMember(g)
	r.rec.event(Event{At: time.Now(), Group: g.ID, Client: m.Name, Kind: "add"})
}

// finalFetch reads every group's committed offsets after the heal, and
// records the reads in the history too.
func (r *run) finalFetch(ctx context.Context) []FinalOffset {
	var out []FinalOffset
	type gt struct {
		group, topic string
		parts        int32
	}
	var all []gt
	for _, g := range r.w.Groups {
		all = append(all, gt{g.ID, g.Topic, g.Partitions})
	}
	for _, g := range r.clients {
		gi := g.info()
		all = append(all, gt{gi.ID, gi.Topic, gi.Partitions})
	}
	conns := clustertest.NewConns("final-fetch")
	defer conns.Close()
	for _, g := range all {
		coord := &clustertest.Coordinator{Conns: conns, Seeds: r.c.KafkaAddrs, Group: g.group}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			offs, ok := r.fetchOnce(coord, "final", g.topic, g.parts)
			if ok {
				for p, o := range offs {
					out = append(out, FinalOffset{g.group, g.topic, p, o})
				}
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return out
}

// checkStable waits, after the heal, until every group has exactly one live
// owner per partition and the coordinator describes the membership the
// members see (I5, within 2 x session timeout); every group reaching that
// within rebalance timeout + 5 s is L1.
//
// The clock starts at the heal, or at the last leadership change after it:
// a leader that steps down with no fault in force (heartbeats late on a
// starved machine) is a fault the run did not inject, and the deadlines
// count from its end. Such changes are logged, and the run gives up on
// waiting a minute after the heal whatever happens.
func (r *run) checkStable(ctx context.Context, healed time.Time, live map[string][]Violation) {
	giveUp := healed.Add(time.Minute)
	var last string
	for {
		changes, from := r.rec.leadershipSince(healed)
		i5 := from.Add(2 * r.cfg.SessionTimeout)
		l1 := from.Add(r.cfg.RebalanceTimeout + 5*time.Second)
		note := ""
		if changes > 0 {
			note = fmt.Sprintf(" (%d leadership changes after the heal, the last %v after it)", changes, from.Sub(healed).Round(time.Millisecond))
		}
		ok, why := r.stableNow(ctx)
		if ok {
			at := time.Now()
			if at.After(l1) {
				live["L1"] = append(live["L1"], Violation{"L1", at, fmt.Sprintf("groups stable %v after the heal, more than rebalance timeout + 5s%s", at.Sub(healed).Round(time.Millisecond), note)})
			}
			r.cfg.Logf("groups stable %v after the heal%s", at.Sub(healed).Round(time.Millisecond), note)
			return
		}
		last = why
		if now := time.Now(); now.After(i5) || now.After(giveUp) {
			live["I5"] = append(live["I5"], Violation{"I5", now, "not every partition has exactly one live owner 2 x session timeout after the heal" + note + ": " + last})
			live["L1"] = append(live["L1"], Violation{"L1", now, "rebalances did not complete after the heal" + note + ": " + last})
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (r *run) stableNow(ctx context.Context) (bool, string) {
	views, ok := r.w.Stable()
	if !ok {
		return false, "emulated members not synced in one generation with a full, disjoint assignment"
	}
	for _, g := range r.w.Groups {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		d, _, err := clustertest.DescribeGroup(dctx, g.Coord)
		cancel()
		if err != nil {
			return false, err.Error()
		}
		var ids []string
		for _, m := range d.Members {
			ids = append(ids, m.MemberID)
		}
		slices.Sort(ids)
		if d.State != "Stable" || !slices.Equal(ids, views[g.ID].Members) {
			return false, fmt.Sprintf("%s: coordinator says %s %v, members %v gen %d", g.ID, d.State, ids, views[g.ID].Members, views[g.ID].Gen)
		}
	}
	for _, g := range r.clients {
		if why := g.stable(); why != "" {
			return false, why
		}
	}
	return true, ""
}

// checkConverged waits until every node applied the same index with the
// same FSM hash (I7).
func (r *run) checkConverged(live map[string][]Violation) {
	deadline := time.Now().Add(60 * time.Second)
	var last []string
	for time.Now().Before(deadline) {
		nodes := r.c.Running()
		sts, errs := r.c.StatusOf(nodes, 2*time.Second)
		last = last[:0]
		ok := errors.Join(errs...) == nil && len(sts) == r.cfg.Nodes
		for i, st := range sts {
			if st == nil {
				last = append(last, fmt.Sprintf("%s: %v", nodes[i].ID, errs[i]))
				continue
			}
			last = append(last, fmt.Sprintf("%s applied=%d hash=%s", st.NodeId, st.AppliedIndex, st.FsmHash))
			if ok && (st.FsmHash == "" || st.AppliedIndex != sts[0].AppliedIndex || st.FsmHash != sts[0].FsmHash) {
				ok = false
			}
			// Each shard's replicas too, when the groups live in shards.
			for k, sh := range st.GetShards() {
				if len(st.GetShards()) < 2 || sts[0] == nil || k >= len(sts[0].GetShards()) {
					break
				}
				first := sts[0].GetShards()[k]
				if ok && (sh.GetFsmHash() == "" || sh.GetAppliedIndex() != first.GetAppliedIndex() || sh.GetFsmHash() != first.GetFsmHash()) {
					ok = false
					last = append(last, fmt.Sprintf("%s shard %d applied=%d hash=%s", st.NodeId, k, sh.GetAppliedIndex(), sh.GetFsmHash()))
				}
			}
		}
		if ok {
			r.cfg.Logf("converged: %s", strings.Join(last, ", "))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	live["I7"] = append(live["I7"], Violation{"I7", time.Now(), "nodes did not reach the same FSM hash within 60s: " + strings.Join(last, "; ")})
}

// clientGroup is a group of a real client library's consumers: its
// record entry, its commits switch, its ownership check.
type clientGroup interface {
	info() GroupInfo
	setCommits(on bool)
	stable() string
}

// kgoGroup is a group of franz-go consumers with the cooperative-sticky
// balancer, or of the consumer group protocol (KIP-848, serverSide); their
// callbacks go into the events, their commits into the history.
type kgoGroup struct {
	r          *run
	group      string
	topic      string
	partitions int32
	serverSide bool
	members    []*kgoMember
	commits    atomic.Bool
	wg         sync.WaitGroup
	stop       chan struct{}
}

type kgoMember struct {
	name  string
	cl    *kgo.Client
	mu    sync.Mutex
	owned map[int32]bool
}

func startKgoGroup(ctx context.Context, r *run, group, topic string, partitions int32, n int, serverSide bool, settle time.Duration) (*kgoGroup, error) {
	coord := &clustertest.Coordinator{Conns: clustertest.NewConns("kgo-admin"), Seeds: r.c.KafkaAddrs, Group: group}
	defer coord.Conns.Close()
	if err := clustertest.CreateTopic(ctx, coord, topic, partitions); err != nil {
		return nil, err
	}
	g := &kgoGroup{r: r, group: group, topic: topic, partitions: partitions, serverSide: serverSide, stop: make(chan struct{})}
	var next atomic.Int64
	for i := range n {
		m := &kgoMember{name: fmt.Sprintf("%s-c%d", group, i), owned: map[int32]bool{}}
		cb := func(kind string) func(context.Context, *kgo.Client, map[string][]int32) {
			return func(_ context.Context, cl *kgo.Client, a map[string][]int32) {
				_, gen := cl.GroupMetadata()
				m.mu.Lock()
				for _, p := range a[topic] {
					if kind == "assigned" {
						m.owned[p] = true
					} else {
						delete(m.owned, p)
					}
				}
				m.mu.Unlock()
				r.rec.event(Event{At: time.Now(), Group: group, Client: m.name, Kind: kind, Partitions: slices.Sorted(slices.Values(a[topic])), Gen: gen})
			}
		}
		opts := []kgo.Opt{
			kgo.SeedBrokers(r.c.KafkaAddrs()...),
			kgo.ClientID(m.name),
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(topic),
			kgo.Balancers(kgo.CooperativeStickyBalancer()),
			kgo.SessionTimeout(r.cfg.SessionTimeout),
			kgo.RebalanceTimeout(r.cfg.RebalanceTimeout),
			kgo.HeartbeatInterval(300 * time.Millisecond),
			kgo.DisableAutoCommit(),
			kgo.FetchMaxWait(200 * time.Millisecond),
			kgo.OnPartitionsAssigned(cb("assigned")),
			kgo.OnPartitionsRevoked(cb("revoked")),
			kgo.OnPartitionsLost(cb("lost")),
		}
		if serverSide {
			opts = append(opts, kgo.ServerSideBalancer())
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			g.close()
			return nil, err
		}
		m.cl = cl
		g.members = append(g.members, m)
		g.wg.Add(1)
		go g.loop(m, &next)
	}
	deadline := time.Now().Add(settle)
	for g.stable() != "" {
		if time.Now().After(deadline) {
			r.cfg.Logf("franz-go group did not settle before the faults: %s", g.stable())
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if serverSide {
		if err := g.isConsumerGroup(ctx); err != nil {
			g.close()
			return nil, err
		}
	}
	return g, nil
}

// isConsumerGroup checks that the group runs the consumer group protocol:
// franz-go falls back to the classic one, silently, when the coordinator
// does not offer it.
func (g *kgoGroup) isConsumerGroup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = []string{g.group}
		resp, err := req.RequestWith(ctx, g.members[0].cl)
		if err == nil && len(resp.Groups) == 1 {
			d := resp.Groups[0]
			if d.ErrorCode == 0 && d.Epoch > 0 {
				return nil
			}
			err = fmt.Errorf("%s: ConsumerGroupDescribe error %d", g.group, d.ErrorCode)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is not a consumer-protocol group: %w", g.group, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (g *kgoGroup) setCommits(on bool) { g.commits.Store(on) }

// loop polls (no records come: cohort stores none) and commits the owned
// partitions every 300 ms.
func (g *kgoGroup) loop(m *kgoMember, next *atomic.Int64) {
	defer g.wg.Done()
	last := time.Now()
	for {
		select {
		case <-g.stop:
			return
		default:
		}
		pctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		m.cl.PollFetches(pctx)
		cancel()
		if !g.commits.Load() || time.Since(last) < 300*time.Millisecond {
			continue
		}
		last = time.Now()
		m.mu.Lock()
		parts := slices.Sorted(func(yield func(int32) bool) {
			for p := range m.owned {
				if !yield(p) {
					return
				}
			}
		})
		m.mu.Unlock()
		if len(parts) == 0 {
			continue
		}
		offs := map[string]map[int32]kgo.EpochOffset{g.topic: {}}
		op := &clustertest.Op{Kind: clustertest.OpCommit, Group: g.group, Client: m.name, Gen: -1, Topic: g.topic,
			Offsets: map[int32]int64{}, Acked: map[int32]bool{}, Start: time.Now()}
		for _, p := range parts {
			o := next.Add(1)
			offs[g.topic][p] = kgo.EpochOffset{Epoch: -1, Offset: o}
			op.Offsets[p] = o
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m.cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			op.End = time.Now()
			op.MemberID, op.Gen = req.MemberID, req.Generation
			if err != nil {
				op.Err = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if p.ErrorCode == 0 {
						op.Acked[p.Partition] = true
					} else {
						op.Code = p.ErrorCode
					}
				}
			}
		})
		cancel()
		if op.End.IsZero() {
			op.End = time.Now()
			op.Err = errors.New("commit not sent")
		}
		// kgo stamps the generation itself; the history cannot know which
		// one the coordinator saw, so fencing is not checked on these.
		op.Gen = -1
		g.r.hst.Add(op)
	}
}

func (g *kgoGroup) info() GroupInfo {
	if g.serverSide {
		return GroupInfo{g.group, g.topic, g.partitions, styleConsumerProtocol}
	}
	return GroupInfo{g.group, g.topic, g.partitions, "cooperative"}
}

// styleConsumerProtocol is the style of a group of the consumer group
// protocol (KIP-848).
const styleConsumerProtocol = "consumer-protocol"

// stable returns "" when the consumers own every partition exactly once.
func (g *kgoGroup) stable() string {
	var owners []owned
	for _, m := range g.members {
		m.mu.Lock()
		owners = append(owners, owned{m.name, slices.Collect(maps.Keys(m.owned))})
		m.mu.Unlock()
	}
	return ownsEachOnce(g.group, g.partitions, owners)
}

// owned is what one member holds.
type owned struct {
	name  string
	parts []int32
}

// ownsEachOnce returns "" when the members own every partition of the
// group exactly once, and what is wrong otherwise.
func ownsEachOnce(group string, partitions int32, owners []owned) string {
	owner := map[int32]string{}
	for _, o := range owners {
		for _, p := range o.parts {
			if prev, ok := owner[p]; ok {
				return fmt.Sprintf("%s: partition %d owned by %s and %s", group, p, prev, o.name)
			}
			owner[p] = o.name
		}
	}
	if int32(len(owner)) != partitions {
		return fmt.Sprintf("%s: %d of %d partitions owned", group, len(owner), partitions)
	}
	return ""
}

func (g *kgoGroup) close() {
	if !closeOnce(g.stop) {
		return
	}
	g.wg.Wait()
	for _, m := range g.members {
		m.cl.Close()
	}
}
