package clustertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/kafka"
	"github.com/cohort-coord/cohort/kafka/interop/clients"
)

// The failover test with unmodified Kafka clients: one group per client
// family, each of several consumers that commit offsets, on a 3-node
// cluster whose leader is killed (SIGKILL) and restarted again and again,
// and whose followers are restarted too.

// kafkajsRetries is the kafkajs consumers' retry count. kafkajs does not
// look for a new coordinator on a connection error: it keeps dialing the
// dead one, and its failures add up across failovers until, after 5 (its
// default), the consumer crashes, leaves the group and restarts as a new
// member. With a leader killed every 7 s that happened within ten kills, so
// the test's consumers, like an application that expects failovers, allow
// more.
const kafkajsRetries = 20

// librdkafkaBackoffMax is the librdkafka consumers' reconnect.backoff.max.ms
// (Java's default; librdkafka's is 10 s). librdkafka doubles a broker's
// reconnect backoff at every connection attempt and resets it only after
// reconnect.backoff.max.ms without one, so with a leader killed every 7-20 s
// its wait to reconnect to the next coordinator, a node it dialled a few
// seconds before, reached 10 s, and the consumer timed a 10 s session out
// (and lost its partitions) before it got there.
const librdkafkaBackoffMax = 1000

const (
	rcMembers    = 3
	rcPartitions = 6
	// rcSession is the consumers' session timeout. 10 s was too short for
	// the clients' own recovery on this machine (two cores, 15 client
	// processes, three nodes, the race detector): librdkafka and franz-go
	// each took up to 10 s, now and then, to reach the next coordinator
	// after back-to-back leader kills, and librdkafka then timed its own
	// session out and lost its partitions, whatever the coordinator did.
	// Kafka's default is 45 s.
	rcSession = 30 * time.Second
)

var (
	clientsOnce  sync.Once
	clientsSetup *clients.Setup
	clientsErr   error
)

// clientFamilies builds the Go client drivers once and returns every family
// of the interop suite; a family whose library cannot be installed fails
// the test in CI and skips it elsewhere.
func clientFamilies(t *testing.T) []clients.Family {
	t.Helper()
	clientsOnce.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			clientsErr = err
			return
		}
		clientsSetup, clientsErr = clients.NewSetup(root)
	})
	if clientsErr != nil {
		t.Fatal(clientsErr)
	}
	s := clientsSetup
	fams := []clients.Family{s.Franz("cooperative-sticky"), s.Sarama()}
	for _, f := range []func() (clients.Family, error){
		func() (clients.Family, error) { return s.Librdkafka("cooperative-sticky", false) },
		s.KafkaPython,
		s.KafkaJS,
	} {
		fam, err := f()
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal(err)
			}
			t.Skip(err)
		}
		fams = append(fams, fam)
	}
	return fams
}

// clientGroup is one family's group and its consumers.
type clientGroup struct {
	fam   clients.Family
	name  string
	topic string
	coord *Coordinator
	procs []*clients.Proc

	gen      int32               // generation when the group first settled
	baseline []int               // reports per consumer then
	owned    [][]int32           // what each consumer owned then
	mu       sync.Mutex          // guards the commit record below
	acked    map[int32]int64     // highest acknowledged offset per partition
	tried    map[int64]bool      // every offset ever sent
	sentAt   map[int64]time.Time // when each round (by its base) was sent
	ackTimes []time.Time         // when commits were acknowledged
	failed   int                 // commits answered with an error
	sent     int                 // commit requests sent
}

// groupShape is how many consumers a family's group runs, with which
// session timeout and extra environment.
type groupShape struct {
	members int
	session time.Duration
	env     []string
	prefix  string // before the family's name in the group's name
}

// rcShape is the failover tests' groups: rcMembers consumers, rcSession.
var rcShape = groupShape{members: rcMembers, session: rcSession}

func startClientGroup(t *testing.T, c *Cluster, conns *Conns, fam clients.Family, shape groupShape) *clientGroup {
	t.Helper()
	g := &clientGroup{fam: fam, name: "group-" + shape.prefix + fam.Name, topic: "topic-" + shape.prefix + fam.Name,
		acked: map[int32]int64{}, tried: map[int64]bool{}, sentAt: map[int64]time.Time{}}
	g.coord = &Coordinator{Conns: conns, Seeds: c.KafkaAddrs, Group: g.name}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := CreateTopic(ctx, g.coord, g.topic, rcPartitions); err != nil {
		t.Fatal(err)
	}
	for i := range shape.members {
		id := fmt.Sprintf("%s-%d", fam.Name, i)
		env := []string{"KAFKAJS_LOG=info", "KAFKAJS_RETRIES=" + strconv.Itoa(kafkajsRetries), "RECONNECT_BACKOFF_MAX_MS=" + strconv.Itoa(librdkafkaBackoffMax)}
		cfg := clients.Config{Bootstrap: c.KafkaAddrs(), Group: g.name, Topic: g.topic, ClientID: id, Partitions: rcPartitions, Session: shape.session, Env: append(env, shape.env...)}
		if dir := os.Getenv("COHORT_CLUSTER_LOG_DIR"); dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			cfg.StderrPath = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+id+".log")
		}
		p, err := fam.Start(id, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if !p.Exited() {
				p.Kill()
			}
		})
		g.procs = append(g.procs, p)
	}
	return g
}

// described is a group as DescribeGroups shows it: generation, state and
// each member's partitions of the group's topic.
type describedGroup struct {
	state   string
	gen     int32
	members map[string][]int32
}

func (g *clientGroup) describe(ctx context.Context) (describedGroup, error) {
	d, _, err := DescribeGroup(ctx, g.coord)
	if err != nil {
		return describedGroup{}, err
	}
	out := describedGroup{state: d.State, gen: -1, members: map[string][]int32{}}
	if gen, ok := kafka.GenerationFromTags(d.UnknownTags); ok {
		out.gen = gen
	}
	for _, m := range d.Members {
		var ps []int32
		if len(m.MemberAssignment) > 0 {
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(m.MemberAssignment); err != nil {
				return describedGroup{}, fmt.Errorf("member %s assignment: %w", m.MemberID, err)
			}
			for _, tp := range a.Topics {
				if tp.Topic == g.topic {
					ps = append(ps, tp.Partitions...)
				}
			}
		}
		slices.Sort(ps)
		out.members[m.MemberID] = ps
	}
	return out, nil
}

// settled checks that the group is Stable, each partition has exactly one
// owner, and every consumer's own view (its last callback) is one member's
// assignment.
func (g *clientGroup) settled(d describedGroup) string {
	return clients.Settled(d.state, d.gen, d.members, rcPartitions, g.procs)
}

func (g *clientGroup) waitSettled(t *testing.T, timeout time.Duration) describedGroup {
	t.Helper()
	deadline := time.Now().Add(timeout)
	why := ""
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := g.describe(ctx)
		cancel()
		if err != nil {
			why = err.Error()
		} else if why = g.settled(d); why == "" {
			return d
		}
		time.Sleep(200 * time.Millisecond)
	}
	var tails []string
	for _, p := range g.procs {
		tails = append(tails, fmt.Sprintf("%s reports %v; stderr: %s", p.Name, p.Reports(), p.StderrTail()))
	}
	t.Fatalf("%s not settled within %v: %s\n%s", g.name, timeout, why, strings.Join(tails, "\n"))
	return describedGroup{}
}

// commitRound asks every consumer to commit base+p for its partitions and
// records what was acknowledged.
func (g *clientGroup) commitRound(base int64) {
	g.mu.Lock()
	g.sentAt[base] = time.Now()
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range g.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.mu.Lock()
			g.sent++
			for q := range int64(rcPartitions) {
				g.tried[base+q] = true
			}
			g.mu.Unlock()
			m, err := p.Request("commit "+strconv.FormatInt(base, 10), "committed_own", 20*time.Second)
			now := time.Now()
			g.mu.Lock()
			defer g.mu.Unlock()
			if err != nil {
				g.failed++
				return
			}
			if !g.fam.SyncCommits {
				return
			}
			own := m["committed_own"].(map[string]any)
			if len(own) > 0 {
				g.ackTimes = append(g.ackTimes, now)
			}
			for ps, v := range own {
				q, _ := strconv.Atoi(ps)
				if off := int64(v.(float64)); off > g.acked[int32(q)] {
					g.acked[int32(q)] = off
				}
			}
		}()
	}
	wg.Wait()
}

// checkCommits fails t unless every acknowledged commit of g reads back
// from its coordinator: each partition's committed offset is at least the
// highest acknowledged one, and one that was sent. A family that
// acknowledges commits must have had one acknowledged.
func (g *clientGroup) checkCommits(ctx context.Context, t *testing.T) {
	t.Helper()
	got, _, err := FetchOffsets(ctx, g.coord, g.topic, rcPartitions)
	if err != nil {
		t.Fatalf("%s: fetch offsets: %v", g.name, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for p, want := range g.acked {
		if got[p] < want {
			t.Errorf("%s partition %d: committed offset %d, but %d was acknowledged", g.name, p, got[p], want)
		}
		if !g.tried[got[p]] {
			t.Errorf("%s partition %d: committed offset %d was never sent", g.name, p, got[p])
		}
	}
	if len(g.acked) == 0 && g.fam.SyncCommits {
		t.Errorf("%s: no commit acknowledged", g.name)
	}
}

// firstAckAfter is when the first commit after t was acknowledged.
func (g *clientGroup) firstAckAfter(t time.Time) (time.Duration, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, at := range g.ackTimes {
		if at.After(t) {
			return at.Sub(t), true
		}
	}
	return 0, false
}

// startSettledGroups starts a group of every family and waits until each
// settled, recording its generation and what each consumer owns then.
func startSettledGroups(t *testing.T, c *Cluster, fams []clients.Family, clientID string, shape groupShape) []*clientGroup {
	t.Helper()
	conns := NewConns(clientID)
	t.Cleanup(conns.Close)
	var groups []*clientGroup
	for _, f := range fams {
		groups = append(groups, startClientGroup(t, c, conns, f, shape))
	}
	for _, g := range groups {
		d := g.waitSettled(t, 90*time.Second)
		g.gen = d.gen
		for _, p := range g.procs {
			r, _ := p.Last()
			g.baseline = append(g.baseline, len(p.Reports()))
			g.owned = append(g.owned, r.Owned)
		}
		t.Logf("%s settled at generation %d: %v", g.name, d.gen, d.members)
	}
	return groups
}

// commitLoops has every consumer of every group commit every 500 ms until
// the returned function is called (which waits for the rounds in flight).
func commitLoops(groups []*clientGroup) (stop func()) {
	done := make(chan struct{})
	var loops sync.WaitGroup
	for _, g := range groups {
		loops.Add(1)
		go func() {
			defer loops.Done()
			for round := int64(1); ; round++ {
				select {
				case <-done:
					return
				case <-time.After(500 * time.Millisecond):
				}
				g.commitRound(round * 1000)
			}
		}()
	}
	return func() {
		close(done)
		loops.Wait()
	}
}

type failoverRun struct {
	kills, followerRestarts int
	takeover                bool
	// sharded runs a cluster of 16 shards and kills, each time, the node
	// that leads the shards of the most client groups; the others' groups
	// must not notice, and the killed node's shards move back to it (planned
	// moves, which no client may notice either) once it returns.
	sharded bool
}

// TestFailoverRealClients: every family's group keeps its generation and
// its members see no revoke or lost callback (beyond those a client makes
// on its own, reported per family) through leader kills and follower
// restarts, and no acknowledged commit is lost.
func TestFailoverRealClients(t *testing.T) {
	skipShort(t)
	run := failoverRun{kills: envInt(t, "COHORT_FAILOVER_KILLS", 10), followerRestarts: envInt(t, "COHORT_FAILOVER_FOLLOWER_RESTARTS", 5), takeover: true}
	checkFailover(t, runFailover(t, run))
}

// checkFailover fails for every family whose group rebalanced, saw a
// callback it did not make on its own, or ended owning other partitions.
func checkFailover(t *testing.T, res []familyResult) {
	t.Helper()
	for _, r := range res {
		if r.rebalances != 0 {
			t.Errorf("%s: %d rebalances (generation %d -> %d)", r.fam, r.rebalances, r.genBefore, r.genAfter)
		}
		if !r.selfRestarts && r.callbacks != 0 {
			t.Errorf("%s: %d revoke/lost/assign callbacks after the group settled", r.fam, r.callbacks)
		}
		if r.moved != 0 {
			t.Errorf("%s: %d consumers own other partitions than before the failovers", r.fam, r.moved)
		}
		if r.followerCallbacks != 0 {
			t.Errorf("%s: %d revoke/lost/assign callbacks while followers restarted", r.fam, r.followerCallbacks)
		}
	}
}

// TestFailoverRealClientsSharded: the same on a 3-node cluster of 16
// shards, where a node crash stops only the groups of the shards it led,
// and its return moves shard leaders back under live groups.
func TestFailoverRealClientsSharded(t *testing.T) {
	skipShort(t)
	checkFailover(t, runFailover(t, failoverRun{kills: envInt(t, "COHORT_FAILOVER_KILLS", 4), takeover: true, sharded: true}))
}

// TestFailoverRealClientsControl runs the same with the takeover window
// off (Kafka's rules) and expects rebalances: it shows the test can fail.
// It runs when COHORT_FAILOVER_CONTROL=1.
func TestFailoverRealClientsControl(t *testing.T) {
	skipShort(t)
	if os.Getenv("COHORT_FAILOVER_CONTROL") != "1" {
		t.Skip("set COHORT_FAILOVER_CONTROL=1 to run the negative control")
	}
	run := failoverRun{kills: envInt(t, "COHORT_FAILOVER_KILLS", 10), followerRestarts: 0, takeover: false}
	res := runFailover(t, run)
	total := 0
	for _, r := range res {
		total += r.rebalances
	}
	if total == 0 {
		t.Fatal("no rebalance with the takeover window off: the test cannot tell")
	}
}

// busiestShardLeader waits until shard leaders are spread evenly and
// returns the node that leads the shards of the most groups.
func busiestShardLeader(t *testing.T, c *Cluster, groups []*clientGroup) *Node {
	t.Helper()
	waitBalanced(t, c, 90*time.Second)
	nodes := c.Running()
	sts, _ := c.StatusOf(nodes, 2*time.Second)
	led := map[int]int{} // node index -> groups whose shard it leads
	for _, g := range groups {
		k := shardOfGroup(g.name)
		for i, st := range sts {
			if st != nil && st.GetShards()[k].GetState() == "Leader" {
				led[i]++
			}
		}
	}
	best := 0
	for i := range nodes {
		if led[i] > led[best] {
			best = i
		}
	}
	t.Logf("%s leads the shards of %d of %d groups", nodes[best].ID, led[best], len(groups))
	return nodes[best]
}

type familyResult struct {
	fam                 string
	rebalances          int
	genBefore, genAfter int32
	callbacks           int  // callbacks that revoked, lost or added partitions
	notices             int  // every callback, including those that changed nothing
	followerCallbacks   int  // callbacks while only followers restarted
	moved               int  // consumers that own other partitions at the end
	selfRestarts        bool // the family restarts its session on its own
	failover            []time.Duration
	commitsSent         int
	commitsFailed       int
}

func runFailover(t *testing.T, run failoverRun) []familyResult {
	fams := clientFamilies(t)
	opts := []func(*Options){func(o *Options) {
		o.Args = append(o.Args, "--group-takeover-window="+strconv.FormatBool(run.takeover), "--log-level", "debug")
	}}
	var c *Cluster
	if run.sharded {
		// Sixteen Raft groups on a loaded two-core machine see an election
		// by themselves now and then with 500 ms timeouts: an unplanned
		// failover on top of the planned kills (patientRaft).
		c = shardedCluster(t, 3, append(opts, patientRaft)...)
		waitBalanced(t, c, 90*time.Second)
	} else {
		c = StartCluster(t, 3, opts...)
	}
	groups := startSettledGroups(t, c, fams, "failover-test", rcShape)
	// Commit rounds every 500 ms from every consumer, through everything.
	stopCommits := commitLoops(groups)

	var kills []time.Time
	for i := range run.kills {
		leader := c.WaitLeader(30 * time.Second)
		if run.sharded {
			leader = busiestShardLeader(t, c, groups)
		}
		at := time.Now()
		c.Kill(leader.Index)
		kills = append(kills, at)
		next := c.WaitLeader(30 * time.Second)
		t.Logf("kill %d at %s: %s killed, %s leads after %v", i+1, at.Format("15:04:05.000"), leader.ID, next.ID, time.Since(at).Round(time.Millisecond))
		time.Sleep(3 * time.Second)
		c.Restart(leader.Index)
		c.WaitConverged(30 * time.Second)
		if run.sharded {
			waitBalanced(t, c, 90*time.Second)
		}
		// A quiet window: the next fault comes once every family that
		// acknowledges its commits has had one acknowledged since this
		// kill, so faults do not pile onto a client still recovering.
		quiet := time.Now().Add(30 * time.Second)
		for _, g := range groups {
			for g.fam.SyncCommits && time.Now().Before(quiet) {
				if _, ok := g.firstAckAfter(at); ok {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		time.Sleep(time.Second)
	}
	// Every group settles again before the followers restart: from here on
	// no client's coordinator connection dies, so even the families that
	// restart their own session must see no callback.
	for _, g := range groups {
		g.waitSettled(t, 60*time.Second)
	}
	followers := time.Now()
	for i := range run.followerRestarts {
		leader := c.WaitLeader(30 * time.Second)
		f := (leader.Index + 1 + i%2) % len(c.Nodes)
		c.Kill(f)
		time.Sleep(2 * time.Second)
		c.Restart(f)
		c.WaitConverged(30 * time.Second)
		t.Logf("follower restart %d: %s", i+1, c.Node(f).ID)
		time.Sleep(time.Second)
	}
	time.Sleep(2 * time.Second)
	stopCommits()

	var results []familyResult
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, g := range groups {
		res := familyResult{fam: g.fam.Name, genBefore: g.gen, commitsSent: g.sent, commitsFailed: g.failed, selfRestarts: g.fam.Name == "sarama"}
		d := g.waitSettled(t, 60*time.Second)
		res.genAfter = d.gen
		if d.gen != g.gen {
			res.rebalances = int(d.gen - g.gen)
		}
		for i, p := range g.procs {
			reps := p.Reports()
			prev := g.owned[i]
			for _, r := range reps[g.baseline[i]:] {
				t.Logf("%s: %s callback at %s: owns %v, generation %d", p.Name, r.Event, r.At.Format("15:04:05.000"), r.Owned, r.Gen)
				res.notices++
				if !slices.Equal(r.Owned, prev) {
					// A callback that revoked, lost or added partitions.
					res.callbacks++
					if r.At.After(followers) {
						res.followerCallbacks++
					}
				}
				prev = r.Owned
				if r.Gen >= 0 && r.Gen != int64(g.gen) && res.rebalances == 0 {
					res.rebalances = 1
				}
			}
			if last := reps[len(reps)-1]; !slices.Equal(last.Owned, g.owned[i]) {
				t.Logf("%s owned %v before the failovers and %v after", p.Name, g.owned[i], last.Owned)
				res.moved++
			}
		}
		if res.rebalances != 0 || res.moved != 0 || res.followerCallbacks != 0 || (!res.selfRestarts && res.callbacks != 0) {
			// What the clients said about it (their error callbacks and logs).
			for _, p := range g.procs {
				logs := p.Logs()
				t.Logf("%s: last log lines of %d:\n  %s", p.Name, len(logs), strings.Join(logs[max(0, len(logs)-30):], "\n  "))
			}
		}
		for _, k := range kills {
			if d, ok := g.firstAckAfter(k); ok {
				res.failover = append(res.failover, d)
			}
		}
		g.checkCommits(ctx, t)
		results = append(results, res)
	}
	t.Logf("%d leader kills, %d follower restarts, takeover window %v", run.kills, run.followerRestarts, run.takeover)
	t.Logf("%-13s %10s %10s %8s %9s %8s %12s %12s", "family", "rebalances", "callbacks", "notices", "commits", "failed", "failover p50", "failover p99")
	for _, r := range results {
		slices.Sort(r.failover)
		p50, p99 := percentile(r.failover, 0.5).Round(time.Millisecond), percentile(r.failover, 0.99).Round(time.Millisecond)
		t.Logf("%-13s %10d %10d %8d %9d %8d %12v %12v", r.fam, r.rebalances, r.callbacks, r.notices, r.commitsSent, r.commitsFailed, p50, p99)
	}
	return results
}
