package member_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/assignor"
	clustertest "github.com/cohort-coord/cohort/cluster-test"
	"github.com/cohort-coord/cohort/coordinator"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/shard"
)

// TestMemberFailoverMatrix: the member library over both transports,
// eager and cooperative, three members a group, on a 3-node cluster of one
// shard and of 16, through the three ways a group's coordinator goes away:
// SIGKILL, SIGTERM (Ctrl-C) and a planned move of its shard's leadership.
// The four groups sit on one shard, so each event hits all of them. After
// every event each member must heartbeat successfully again within its
// session, in the generation it had, with no lost or revoked callback, and
// every acknowledged commit must read back at the end. The members run
// cohort-members' timing (session 10 s, heartbeat 1 s) and the library's
// default request timeout, as an application would.
func TestMemberFailoverMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3-node clusters")
	}
	for _, shards := range []int{1, 16} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) { failoverMatrix(t, shards) })
	}
}

// matrixGroup is one group of the matrix: a transport and a balancer.
type matrixGroup struct {
	transport, mode string
	g               *group
	seen            *heartbeatLog
}

// heartbeatLog records, per member, when a heartbeat last succeeded.
type heartbeatLog struct {
	mu       sync.Mutex
	last     map[string]time.Time // client id -> last successful heartbeat
	notCoord int                  // heartbeats answered NOT_COORDINATOR
}

func (l *heartbeatLog) notCoordinator() {
	l.mu.Lock()
	l.notCoord++
	l.mu.Unlock()
}

func (l *heartbeatLog) notCoordinators() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.notCoord
}

func (l *heartbeatLog) ok(name string) {
	l.mu.Lock()
	l.last[name] = time.Now()
	l.mu.Unlock()
}

func (l *heartbeatLog) since(name string, t time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.last[name]
	if !ok || !at.After(t) {
		return 0, false
	}
	return at.Sub(t), true
}

// watched wraps a transport so that the test sees every successful
// heartbeat of member name.
func watched(tf member.TransportFactory, log *heartbeatLog, name string) member.TransportFactory {
	return func(env member.TransportEnv) (member.Transport, error) {
		tr, err := tf(env)
		if err != nil {
			return nil, err
		}
		return &watchedTransport{Transport: tr, log: log, name: name}, nil
	}
}

type watchedTransport struct {
	member.Transport
	log  *heartbeatLog
	name string
}

func (w *watchedTransport) Send(req any, done func(any, error)) {
	if _, ok := req.(*pb.HeartbeatRequest); !ok {
		w.Transport.Send(req, done)
		return
	}
	w.Transport.Send(req, func(res any, err error) {
		if r, ok := res.(*pb.HeartbeatResponse); ok && err == nil {
			switch r.GetErrorCode() {
			case 0:
				w.log.ok(w.name)
			case coordinator.ErrNotCoordinator:
				w.log.notCoordinator()
			}
		}
		done(res, err)
	})
}

// sameShardGroups returns n group ids that all map to one shard of shards.
func sameShardGroups(prefix string, n, shards int) []string {
	var out []string
	want := shard.Of(prefix+"-0", shards)
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if shard.Of(id, shards) == want {
			out = append(out, id)
		}
	}
	return out
}

// coordinatorOf returns the running node that coordinates group: the
// leader of its shard, or the Raft leader of a one-shard cluster.
func coordinatorOf(t *testing.T, c *clustertest.Cluster, group string, shards int) *clustertest.Node {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		sts, _ := c.StatusOf(c.Running(), 2*time.Second)
		for i, st := range sts {
			if st == nil {
				continue
			}
			if shards > 1 {
				sh := st.GetShards()[shard.Of(group, shards)]
				if sh.GetState() == "Leader" && sh.GetActive() {
					return c.Running()[i]
				}
			} else if st.GetState() == "Leader" {
				return c.Running()[i]
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no node coordinates %s", group)
	return nil
}

// waitShardsReplicated waits until every running node follows or leads
// every shard at the same applied index as the shard's active leader.
func waitShardsReplicated(t *testing.T, c *clustertest.Cluster, shards int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		sts, _ := c.StatusOf(c.Running(), 2*time.Second)
		ready := 0
		for id := range shards {
			var leaderApplied uint64
			var applied []uint64
			for _, st := range sts {
				for _, sh := range st.GetShards() {
					if sh.GetId() != uint32(id) || sh.GetLeaderId() == "" {
						continue
					}
					applied = append(applied, sh.GetAppliedIndex())
					if sh.GetState() == "Leader" && sh.GetActive() {
						leaderApplied = sh.GetAppliedIndex()
					}
				}
			}
			if leaderApplied > 0 && len(applied) == len(sts) && slices.Min(applied) == leaderApplied {
				ready++
			}
		}
		if ready == shards {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d shards replicated on every node within 60s", ready, shards)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func failoverMatrix(t *testing.T, shards int) {
	c := clustertest.StartCluster(t, 3, func(o *clustertest.Options) {
		if shards > 1 {
			o.Args = append(o.Args, "--shards", fmt.Sprint(shards), "--shard-move-interval", "1s")
		}
	})
	var remotes, kafkas []string
	for _, n := range c.Nodes {
		remotes = append(remotes, n.RemoteAddr)
		kafkas = append(kafkas, n.KafkaAddr)
	}
	const partitions = 12
	createTopic(t, kafkas, "t", partitions)
	want := allPartitions("t", partitions)
	system := c.Admin.System()

	if shards > 1 {
		// A node joins every shard a moment after it joins the cluster: a
		// kill before then could take a shard's only caught-up voter.
		waitShardsReplicated(t, c, shards)
	}
	names := sameShardGroups(fmt.Sprintf("matrix-%d", shards), 4, shards)
	var groups []*matrixGroup
	for i, tr := range []string{"native", "kafka"} {
		for j, mode := range []string{"eager", "cooperative"} {
			id := names[2*i+j]
			balancer := assignor.Range()
			if mode == "cooperative" {
				balancer = assignor.CooperativeSticky()
			}
			mg := &matrixGroup{transport: tr, mode: mode, seen: &heartbeatLog{last: map[string]time.Time{}}}
			mg.g = newGroupOn(t, system, nil, id,
				member.SessionTimeout(10*time.Second),
				member.HeartbeatInterval(time.Second),
				member.RebalanceTimeout(20*time.Second),
				member.Topics("t"),
				member.Partitions("t", partitions),
				member.Balancers(balancer))
			mg.g.base = append(mg.g.base, debugLog()...)
			for k := range 3 {
				tf := member.Native(remotes...)
				if tr == "kafka" {
					tf = member.Kafka(kafkas...)
				}
				mg.g.add(member.WithTransport(watched(tf, mg.seen, fmt.Sprintf("m%d", k))))
			}
			groups = append(groups, mg)
		}
	}
	for _, mg := range groups {
		mg.g.settle(want)
	}
	gens := map[string]int32{}
	changes := map[*matrixGroup]int{}
	for _, mg := range groups {
		for _, m := range mg.g.members {
			gens[mg.g.name+"/"+m.n] = m.m.Generation()
		}
		mg.g.h.mu.Lock()
		changes[mg] = mg.g.h.changes
		mg.g.h.mu.Unlock()
	}

	// Every member commits a rising offset for what it owns, all along.
	acked := map[string]map[tp]int64{}
	var mu sync.Mutex
	var okCommits int
	failedCommits := map[string]int{} // transport -> failed commits
	firstFailure := map[string]string{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, mg := range groups {
		acked[mg.g.name] = map[tp]int64{}
		for _, m := range mg.g.members {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next := int64(1); ctx.Err() == nil; next++ {
					owned := m.owned()
					offsets := map[string]map[int32]int64{"t": {}}
					for _, p := range owned {
						offsets[p.topic][p.partition] = next
					}
					cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
					err := m.m.Commit(cctx, offsets)
					ccancel()
					mu.Lock()
					switch {
					case err == nil:
						okCommits++
						for _, p := range owned {
							acked[mg.g.name][p] = next
						}
					case !errors.Is(err, context.Canceled):
						if failedCommits[mg.transport] == 0 {
							firstFailure[mg.transport] = err.Error()
						}
						failedCommits[mg.transport]++
					}
					mu.Unlock()
					select {
					case <-ctx.Done():
					case <-time.After(200 * time.Millisecond):
					}
				}
			}()
		}
	}
	defer func() { cancel(); wg.Wait() }()

	var firstHeartbeat []time.Duration
	for _, event := range []string{"SIGKILL", "SIGTERM", "move"} {
		coord := coordinatorOf(t, c, names[0], shards)
		var to *clustertest.Node
		for _, n := range c.Running() {
			if n != coord {
				to = n
				break
			}
		}
		notCoord := map[*matrixGroup]int{}
		for _, mg := range groups {
			notCoord[mg] = mg.seen.notCoordinators()
		}
		at := time.Now()
		switch event {
		case "SIGKILL":
			c.Kill(coord.Index)
		case "SIGTERM":
			c.Stop(coord.Index)
		case "move":
			req := &clusterpb.TransferLeadershipRequest{NodeId: to.ID}
			if shards > 1 {
				k := uint32(shard.Of(names[0], shards))
				req.Shard = &k
			}
			tctx, tcancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, err := c.Admin.DoOnLeader(tctx, coord.RemoteAddr, req)
			tcancel()
			if err != nil {
				t.Fatalf("move %s's coordinator %s to %s: %v", names[0], coord.ID, to.ID, err)
			}
		}
		// Every member heartbeats successfully again, within its session.
		var times []time.Duration
		checkNotCoord := func() {
			// A planned move of a shard is forwarded: a native member is
			// never told NOT_COORDINATOR (a Kafka-transport member may be,
			// by a FindCoordinator answer that was already stale). A
			// one-shard cluster does not forward: its members are told
			// and find the new leader.
			for _, mg := range groups {
				n := mg.seen.notCoordinators() - notCoord[mg]
				t.Logf("%s of %s: %s/%s heartbeats answered NOT_COORDINATOR: %d", event, coord.ID, mg.transport, mg.mode, n)
				if event == "move" && shards > 1 && mg.transport == "native" && n > 0 {
					t.Errorf("move of %s: %s/%s members were answered NOT_COORDINATOR %d times", coord.ID, mg.transport, mg.mode, n)
				}
			}
		}
		for _, mg := range groups {
			var own []time.Duration
			for _, m := range mg.g.members {
				deadline := time.Now().Add(15 * time.Second)
				for {
					if d, ok := mg.seen.since(m.n, at); ok {
						own = append(own, d.Round(time.Millisecond))
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s %s/%s %s: no successful heartbeat within 15s of the %s of %s", mg.g.name, mg.transport, mg.mode, m.n, event, coord.ID)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			t.Logf("%s of %s: %s/%s members heartbeat again after %v", event, coord.ID, mg.transport, mg.mode, own)
			times = append(times, own...)
		}
		slices.Sort(times)
		t.Logf("%s of %s (coordinator of the groups): first successful heartbeat after p50 %v, max %v",
			event, coord.ID, times[len(times)/2].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond))
		firstHeartbeat = append(firstHeartbeat, times...)
		checkNotCoord()
		if event != "move" {
			c.Restart(coord.Index)
			c.WaitConverged(60 * time.Second)
		}
		// Let commits and (with shards) the leaders' placement run on.
		time.Sleep(3 * time.Second)
		checkMatrixKept(t, groups, gens, changes, event)
	}
	cancel()
	wg.Wait()

	slices.Sort(firstHeartbeat)
	p99 := firstHeartbeat[(len(firstHeartbeat)*99+99)/100-1]
	t.Logf("first successful heartbeat after the event, all events: p50 %v, p99 %v, max %v (%d members × 3 events)",
		firstHeartbeat[len(firstHeartbeat)/2].Round(time.Millisecond), p99.Round(time.Millisecond),
		firstHeartbeat[len(firstHeartbeat)-1].Round(time.Millisecond), len(firstHeartbeat)/3)

	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkas...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, mg := range groups {
		fctx, fcancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err := adm.FetchOffsets(fctx, mg.g.name)
		fcancel()
		if err != nil {
			t.Fatalf("fetch %s's offsets: %v", mg.g.name, err)
		}
		for p, o := range acked[mg.g.name] {
			got, ok := res.Lookup(p.topic, p.partition)
			if !ok || got.At < o {
				t.Errorf("%s %v: committed offset %d, but %d was acknowledged", mg.g.name, p, got.At, o)
			}
		}
	}
	t.Logf("%d commits acknowledged across the three events; failed: %v, the first of each: %v", okCommits, failedCommits, firstFailure)
	for _, mg := range groups {
		mg.g.h.check(t)
	}
}

// checkMatrixKept fails the test when a member changed generation or any
// group saw a callback since the groups settled.
func checkMatrixKept(t *testing.T, groups []*matrixGroup, gens map[string]int32, changes map[*matrixGroup]int, event string) {
	t.Helper()
	for _, mg := range groups {
		for _, m := range mg.g.members {
			if g := m.m.Generation(); g != gens[mg.g.name+"/"+m.n] {
				t.Errorf("after the %s: %s (%s, %s) %s in generation %d, was %d", event, mg.g.name, mg.transport, mg.mode, m.n, g, gens[mg.g.name+"/"+m.n])
			}
		}
		mg.g.h.mu.Lock()
		n, lost := mg.g.h.changes-changes[mg], len(mg.g.h.lost)
		mg.g.h.mu.Unlock()
		if n != 0 || lost != 0 {
			t.Errorf("after the %s: %s (%s, %s) saw %d callbacks (%d lost)", event, mg.g.name, mg.transport, mg.mode, n, lost)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// debugLog logs every member answer at debug level with COHORT_MEMBER_DEBUG.
func debugLog() []member.Opt {
	if os.Getenv("COHORT_MEMBER_DEBUG") == "" {
		return nil
	}
	return []member.Opt{member.Logger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))}
}
