package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	member "github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/assignor"
	clustertest "github.com/cohort-coord/cohort/cluster-test"
)

// libGroup is a group of members of cohort's own member library
// (actors/member) over the native API: their callbacks go into the events,
// their commits into the history, and now and then one leaves and a new one
// joins. A dynamic group uses the library's default balancers
// (cooperative-sticky first); a static one gives every member a
// group.instance.id (its slot's, kept by the member that replaces it) and
// the eager range balancer.
type libGroup struct {
	r          *run
	group      string
	topic      string
	partitions int32
	static     bool
	system     *actor.ActorSystem

	mu      sync.Mutex
	members []*libMember
	seq     int
	commits atomic.Bool
	next    atomic.Int64
	wg      sync.WaitGroup
	stop    chan struct{}
}

type libMember struct {
	name string
	slot int
	m    *member.Member
	done chan struct{}
}

// info is the group's entry in the record.
func (g *libGroup) info() GroupInfo {
	style := "library"
	if g.static {
		style = "library-static"
	}
	return GroupInfo{g.group, g.topic, g.partitions, style}
}

func startLibGroup(ctx context.Context, r *run, group, topic string, partitions int32, n int, static bool, settle time.Duration) (*libGroup, error) {
	coord := &clustertest.Coordinator{Conns: clustertest.NewConns("lib-admin"), Seeds: r.c.KafkaAddrs, Group: group}
	defer coord.Conns.Close()
	if err := clustertest.CreateTopic(ctx, coord, topic, partitions); err != nil {
		return nil, err
	}
	// The members run on the process's one protoactor remote, the shared
	// admin client's: a second remote's start would set gRPC's global
	// logger while the first one logs (a data race).
	adm, err := clustertest.SharedAdmin()
	if err != nil {
		return nil, err
	}
	system := adm.System()
	g := &libGroup{r: r, group: group, topic: topic, partitions: partitions, static: static, system: system, stop: make(chan struct{})}
	for slot := range n {
		if err := g.add(slot); err != nil {
			g.close()
			return nil, err
		}
	}
	deadline := time.Now().Add(settle)
	for g.stable() != "" {
		if time.Now().After(deadline) {
			r.cfg.Logf("member-library group did not settle before the faults: %s", g.stable())
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return g, nil
}

// add starts one more member in slot.
func (g *libGroup) add(slot int) error {
	g.mu.Lock()
	name := fmt.Sprintf("%s-m%d", g.group, g.seq)
	g.seq++
	g.mu.Unlock()
	var addrs []string
	for i := range g.r.cfg.Nodes {
		addrs = append(addrs, g.r.c.Node(i).RemoteAddr)
	}
	cb := func(kind string) func(context.Context, *member.Member, []assignor.TopicPartitions) {
		return func(_ context.Context, m *member.Member, tps []assignor.TopicPartitions) {
			ps := partitionsOf(tps, g.topic)
			g.r.rec.event(Event{At: time.Now(), Group: g.group, Client: name, Kind: kind, Partitions: ps, Gen: m.Generation()})
		}
	}
	opts := []member.Opt{
		member.Topics(g.topic),
		member.Partitions(g.topic, g.partitions),
		member.ClientID(name),
		member.WithTransport(member.Native(addrs...)),
		member.SessionTimeout(g.r.cfg.SessionTimeout),
		member.RebalanceTimeout(g.r.cfg.RebalanceTimeout),
		member.HeartbeatInterval(300 * time.Millisecond),
		member.OnAssigned(cb("assigned")),
		member.OnRevoked(cb("revoked")),
		member.OnLost(cb("lost")),
	}
	if g.static {
		opts = append(opts, member.InstanceID(fmt.Sprintf("%s-i%d", g.group, slot)), member.Balancers(assignor.Range()))
	}
	m, err := member.Start(g.system, g.group, opts...)
	if err != nil {
		return err
	}
	lm := &libMember{name: name, slot: slot, m: m, done: make(chan struct{})}
	g.mu.Lock()
	g.members = append(g.members, lm)
	g.mu.Unlock()
	g.r.rec.event(Event{At: time.Now(), Group: g.group, Client: name, Kind: "add"})
	g.wg.Add(1)
	go g.loop(lm)
	return nil
}

// parts returns the member's partitions of topic, sorted.
func (lm *libMember) parts(topic string) []int32 { return partitionsOf(lm.m.Assignment(), topic) }

// partitionsOf returns the partitions of topic in tps, sorted.
func partitionsOf(tps []assignor.TopicPartitions, topic string) []int32 {
	var ps []int32
	for _, tp := range tps {
		if tp.Topic == topic {
			ps = append(ps, tp.Partitions...)
		}
	}
	slices.Sort(ps)
	return ps
}

// churn makes the oldest member leave (it revokes what it owns first) and
// starts a new one in its slot (with its instance id, in a static group).
func (g *libGroup) churn() {
	g.mu.Lock()
	if len(g.members) == 0 {
		g.mu.Unlock()
		return
	}
	lm := g.members[0]
	g.members = g.members[1:]
	g.mu.Unlock()
	close(lm.done)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	err := lm.m.Close(ctx)
	cancel()
	g.r.rec.event(Event{At: time.Now(), Group: g.group, Client: lm.name, Kind: "leave"})
	if err != nil {
		g.r.cfg.Logf("member-library member %s left with: %v", lm.name, err)
	}
	if err := g.add(lm.slot); err != nil {
		g.r.cfg.Logf("member-library member did not start: %v", err)
	}
}

func (g *libGroup) setCommits(on bool) { g.commits.Store(on) }

// loop commits the member's partitions every 300 ms while commits are on.
func (g *libGroup) loop(lm *libMember) {
	defer g.wg.Done()
	t := time.NewTicker(300 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-lm.done:
			return
		case <-t.C:
		}
		if !g.commits.Load() {
			continue
		}
		parts := lm.parts(g.topic)
		if len(parts) == 0 {
			continue
		}
		offs := map[string]map[int32]int64{g.topic: {}}
		op := &clustertest.Op{Kind: clustertest.OpCommit, Group: g.group, Client: lm.name, Gen: -1, Topic: g.topic,
			MemberID: lm.m.MemberID(), Offsets: map[int32]int64{}, Acked: map[int32]bool{}, Start: time.Now()}
		for _, p := range parts {
			o := g.next.Add(1)
			offs[g.topic][p] = o
			op.Offsets[p] = o
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := lm.m.Commit(ctx, offs)
		cancel()
		op.End = time.Now()
		switch {
		case err == nil:
			for _, p := range parts {
				op.Acked[p] = true
			}
		case errors.Is(err, member.ErrRebalanceInProgress):
			// Refused by the member itself: never sent.
			continue
		default:
			// The library folds refusals and lost answers into one error:
			// an unknown outcome either way.
			op.Err = err
		}
		g.r.hst.Add(op)
	}
}

// stable returns "" when the members own every partition exactly once.
func (g *libGroup) stable() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var owners []owned
	for _, lm := range g.members {
		owners = append(owners, owned{lm.name, lm.parts(g.topic)})
	}
	return ownsEachOnce(g.group, g.partitions, owners)
}

func (g *libGroup) close() {
	if !closeOnce(g.stop) {
		return
	}
	g.wg.Wait()
	g.mu.Lock()
	ms := g.members
	g.members = nil
	g.mu.Unlock()
	for _, lm := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		lm.m.Close(ctx)
		cancel()
	}
}
