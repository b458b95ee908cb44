package member_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/cohort-coord/cohort/actors"
	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/assignor"
	clustertest "github.com/cohort-coord/cohort/cluster-test"
	"github.com/cohort-coord/cohort/internal/testmember"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// participant is a group member under test: a cohort member or a kgo client.
type participant interface {
	name() string
	memberID() string
	owned() []tp
	settled() bool
}

type cohortMember struct {
	n string
	m *member.Member
}

func (c *cohortMember) name() string     { return c.n }
func (c *cohortMember) memberID() string { return c.m.MemberID() }
func (c *cohortMember) owned() []tp      { return flatten(c.m.Assignment()) }
func (c *cohortMember) settled() bool    { return c.m.Phase().String() == "Stable" }

func allPartitions(topic string, n int32) []tp {
	out := make([]tp, n)
	for i := range out {
		out[i] = tp{topic, int32(i)}
	}
	return out
}

// describer answers DescribeGroups as member id -> assigned partitions.
type describer func() (state string, members map[string][]tp, err error)

func nativeDescriber(system *actor.ActorSystem, remoteAddr, group string) describer {
	cl := actors.NewClient(system, actor.NewPID(remoteAddr, actors.RouterName))
	return func() (string, map[string][]tp, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := cl.Call(ctx, &pb.DescribeGroupRequest{GroupId: group})
		if err != nil {
			return "", nil, err
		}
		d := res.(*pb.DescribeGroupResponse)
		if d.GetErrorCode() != 0 {
			return "", nil, fmt.Errorf("describe: code %d", d.GetErrorCode())
		}
		out := map[string][]tp{}
		for _, m := range d.GetMembers() {
			a, err := assignor.DecodeAssignment(m.GetAssignment())
			if err != nil && len(m.GetAssignment()) > 0 {
				return "", nil, err
			}
			out[m.GetMemberId()] = flatten(a.Topics)
		}
		return d.GetState(), out, nil
	}
}

func sortTPs(ps []tp) []tp {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b tp) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return int(a.partition - b.partition)
	})
	return ps
}

// settle waits until the group is stable: every participant stable, every
// partition owned by exactly one of them, the history agreeing with what
// each holds, no callback for a while, and DescribeGroups agreeing too. It
// returns the time it took.
func settle(t testing.TB, h *history, ps []participant, want []tp, describe describer, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		why = settledWhy(h, ps, want, describe)
		if why == "" {
			return time.Since(start)
		}
	}
	t.Fatalf("group did not settle within %v: %s", timeout, why)
	return 0
}

func settledWhy(h *history, ps []participant, want []tp, describe describer) string {
	h.mu.Lock()
	quiet := time.Since(h.last) > 500*time.Millisecond
	h.mu.Unlock()
	if !quiet {
		return "callbacks still running"
	}
	byHistory := h.owned()
	seen := map[tp]string{}
	for _, p := range ps {
		if !p.settled() {
			return p.name() + " not stable"
		}
		own := sortTPs(p.owned())
		if fmt.Sprint(own) != fmt.Sprint(sortTPs(byHistory[p.name()])) {
			return fmt.Sprintf("%s holds %v but its callbacks say %v", p.name(), own, byHistory[p.name()])
		}
		for _, x := range own {
			if o, ok := seen[x]; ok {
				return fmt.Sprintf("%v held by %s and %s", x, o, p.name())
			}
			seen[x] = p.name()
		}
	}
	for _, x := range want {
		if _, ok := seen[x]; !ok {
			return fmt.Sprintf("%v has no owner", x)
		}
	}
	if len(seen) != len(want) {
		return fmt.Sprintf("%d partitions owned, want %d", len(seen), len(want))
	}
	if describe == nil {
		return ""
	}
	state, desc, err := describe()
	if err != nil {
		return err.Error()
	}
	if state != "Stable" {
		return "group state " + state
	}
	if len(desc) != len(ps) {
		return fmt.Sprintf("DescribeGroups lists %d members, want %d", len(desc), len(ps))
	}
	for _, p := range ps {
		d, ok := desc[p.memberID()]
		if !ok {
			return fmt.Sprintf("DescribeGroups does not list %s (%s)", p.name(), p.memberID())
		}
		// A cooperative member holds the assignment of the last round; the
		// coordinator's copy is the same once the group is stable.
		if fmt.Sprint(sortTPs(d)) != fmt.Sprint(sortTPs(p.owned())) {
			return fmt.Sprintf("DescribeGroups gives %s %v, it holds %v", p.name(), sortTPs(d), sortTPs(p.owned()))
		}
	}
	return ""
}

// cohortd starts one real cohortd process for the tests of this package.
func cohortd(t *testing.T, args ...string) *clustertest.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts cohortd")
	}
	return clustertest.StartCluster(t, 1, func(o *clustertest.Options) {
		o.Args = append(o.Args, "--default-partitions", "12")
		o.Args = append(o.Args, args...)
	})
}

type transportCase struct {
	name string
	opts func(n *clustertest.Node) []member.Opt
}

var transports = []transportCase{
	{"native", func(n *clustertest.Node) []member.Opt {
		return []member.Opt{member.WithTransport(member.Native(n.RemoteAddr)), member.Partitions("t", 12)}
	}},
	{"kafka", func(n *clustertest.Node) []member.Opt {
		return []member.Opt{member.WithTransport(member.Kafka(n.KafkaAddr))}
	}},
}

// timing is the members' timeouts for tests (testmember.Timing).
func timing() []member.Opt { return testmember.Timing() }

// group is a set of cohort members of one group under test.
type group struct {
	t        testing.TB
	h        *history
	system   *actor.ActorSystem
	name     string
	base     []member.Opt
	members  []*cohortMember
	others   []participant
	n        int
	describe describer
	fetch    func() (map[tp]int64, error)
}

func newGroup(t *testing.T, c *clustertest.Cluster, name string, base ...member.Opt) *group {
	system := c.Admin.System()
	g := newGroupOn(t, system, nativeDescriber(system, c.Node(0).RemoteAddr, name), name, base...)
	g.fetch = nativeFetcher(system, c.Node(0).RemoteAddr, name)
	return g
}

func newGroupOn(t testing.TB, system *actor.ActorSystem, describe describer, name string, base ...member.Opt) *group {
	g := &group{t: t, h: newHistory(t), system: system, name: name, base: base, describe: describe}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, m := range g.members {
			m.m.Close(ctx)
		}
	})
	return g
}

func (g *group) add(opts ...member.Opt) *cohortMember {
	g.t.Helper()
	return g.addSlow(50*time.Millisecond, opts...)
}

// addSlow adds a member whose revocations take revokeDelay.
func (g *group) addSlow(revokeDelay time.Duration, opts ...member.Opt) *cohortMember {
	g.t.Helper()
	name := fmt.Sprintf("m%d", g.n)
	g.n++
	all := append(append(append([]member.Opt{}, g.base...), member.WithHandler(&recorder{h: g.h, name: name, revokeDelay: revokeDelay}), member.ClientID(name)), opts...)
	m, err := member.Start(g.system, g.name, all...)
	if err != nil {
		g.t.Fatal(err)
	}
	cm := &cohortMember{n: name, m: m}
	g.members = append(g.members, cm)
	return cm
}

func (g *group) remove(cm *cohortMember) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cm.m.Close(ctx); err != nil {
		g.t.Fatalf("close %s: %v", cm.n, err)
	}
	g.members = slices.DeleteFunc(g.members, func(x *cohortMember) bool { return x == cm })
}

func (g *group) participants() []participant {
	var ps []participant
	for _, m := range g.members {
		ps = append(ps, m)
	}
	return append(ps, g.others...)
}

func (g *group) settle(want []tp) time.Duration {
	g.t.Helper()
	return settle(g.t, g.h, g.participants(), want, g.describe, 60*time.Second)
}

// TestMembersAgainstCohortd runs several members over each transport, eager
// and cooperative, through joins, a close, an explicit rebalance and commits.
func TestMembersAgainstCohortd(t *testing.T) {
	c := cohortd(t)
	node := c.Node(0)
	want := allPartitions("t", 12)
	for _, tr := range transports {
		for _, mode := range modes {
			t.Run(tr.name+"/"+mode.name, func(t *testing.T) {
				base := append(timing(), tr.opts(node)...)
				base = append(base, member.Topics("t"))
				if mode.balancers != nil {
					base = append(base, member.Balancers(mode.balancers...))
				}
				g := newGroup(t, c, "g-"+tr.name+"-"+mode.name, base...)
				memberScenario(t, g, want)
				g.h.check(t)
			})
		}
	}
}

// memberScenario runs members of g through joins, a close, an explicit
// rebalance and commits, checking the group after each step.
func memberScenario(t *testing.T, g *group, want []tp) {
	for range 3 {
		g.add()
	}
	d := g.settle(want)
	t.Logf("3 members settled in %v", d)
	g.add()
	g.add()
	t.Logf("5 members settled in %v", g.settle(want))
	g.remove(g.members[1])
	t.Logf("4 members settled in %v", g.settle(want))

	follower := g.members[len(g.members)-1]
	gen := follower.m.Generation()
	if err := follower.m.EnforceRebalance("test"); err != nil {
		t.Fatalf("enforce rebalance: %v", err)
	}
	g.settle(want)
	if follower.m.Generation() <= gen {
		t.Fatalf("generation %d after EnforceRebalance, was %d", follower.m.Generation(), gen)
	}

	// Every member commits what it owns.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range g.members {
		offsets := map[string]map[int32]int64{}
		for _, p := range m.owned() {
			if offsets[p.topic] == nil {
				offsets[p.topic] = map[int32]int64{}
			}
			offsets[p.topic][p.partition] = int64(100 + p.partition)
		}
		if err := m.m.Commit(ctx, offsets); err != nil {
			t.Fatalf("%s commit: %v", m.n, err)
		}
	}
	if g.fetch != nil {
		got, err := g.fetch()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range want {
			if got[p] != int64(100+p.partition) {
				t.Errorf("committed offset of %v is %d, want %d", p, got[p], 100+p.partition)
			}
		}
	}
	g.h.check(t)
}

// nativeFetcher reads a group's committed offsets over the native API.
func nativeFetcher(system *actor.ActorSystem, remoteAddr, group string) func() (map[tp]int64, error) {
	cl := actors.NewClient(system, actor.NewPID(remoteAddr, actors.RouterName))
	return func() (map[tp]int64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := cl.Call(ctx, &pb.OffsetFetchRequest{GroupId: group, AllTopics: true})
		if err != nil {
			return nil, err
		}
		out := map[tp]int64{}
		for _, t := range res.(*pb.OffsetFetchResponse).GetTopics() {
			for _, p := range t.GetPartitions() {
				out[tp{t.GetName(), p.GetPartition()}] = p.GetOffset()
			}
		}
		return out, nil
	}
}

var modes = []struct {
	name      string
	balancers []assignor.Balancer
}{
	{"default", nil}, // [cooperative-sticky, range]: eager by Java's rule without a guard
	{"cooperative", []assignor.Balancer{assignor.CooperativeSticky()}},
	{"range", []assignor.Balancer{assignor.Range()}},
}
