package member_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/assignor"
)

// slowRevoker records into a history like recorder, but its revocations take
// delay and commit an offset for every revoked partition from inside the
// callback, as an application that finishes its work before giving
// partitions up does.
type slowRevoker struct {
	recorder
	delay time.Duration

	mu         sync.Mutex
	commitErrs []error
	revokes    int
}

func (s *slowRevoker) Revoked(ctx context.Context, m *member.Member, ps []assignor.TopicPartitions) {
	time.Sleep(s.delay)
	offsets := map[string]map[int32]int64{}
	for _, t := range ps {
		offsets[t.Topic] = map[int32]int64{}
		for _, p := range t.Partitions {
			offsets[t.Topic][p] = 100 + int64(p)
		}
	}
	var err error
	if len(offsets) > 0 {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = m.Commit(cctx, offsets)
		cancel()
	}
	s.mu.Lock()
	s.revokes++
	s.commitErrs = append(s.commitErrs, err)
	s.mu.Unlock()
	s.h.released(s.name, "revoked", flatten(ps))
}

// slowRevokeTiming: a revoke takes longer than the session timeout and less
// than the rebalance timeout.
const (
	slowSession   = 3 * time.Second
	slowRevoke    = 5 * time.Second
	slowRebalance = 12 * time.Second
)

func slowRevokeOpts() []member.Opt {
	return []member.Opt{
		member.SessionTimeout(slowSession),
		member.HeartbeatInterval(300 * time.Millisecond),
		member.RebalanceTimeout(slowRebalance),
		member.RetryBackoff(50*time.Millisecond, time.Second),
		member.RequestTimeout(5 * time.Second),
		member.Topics("t"),
	}
}

var slowModes = []struct {
	name      string
	balancers []assignor.Balancer
}{
	{"eager", []assignor.Balancer{assignor.Range()}},
	{"cooperative", []assignor.Balancer{assignor.CooperativeSticky()}},
}

// slowRevokeScenario: m0 owns every partition; m1 joins; m0's revoke takes
// longer than its session timeout. m0 keeps its membership (same member id,
// no lost callback), nobody gets m0's partitions before its callback
// returned (the history's overlap check), and the commits made from inside
// the callback are accepted.
func slowRevokeScenario(t *testing.T, g *group) {
	t.Helper()
	want := allPartitions("t", 12)
	slow := &slowRevoker{recorder: recorder{h: g.h, name: "m0"}, delay: slowRevoke}
	m0, err := member.Start(g.system, g.name, append(append([]member.Opt{}, g.base...), member.WithHandler(slow), member.ClientID("m0"))...)
	if err != nil {
		t.Fatal(err)
	}
	cm0 := &cohortMember{n: "m0", m: m0}
	g.members = append(g.members, cm0)
	g.n = 1
	g.settle(want)
	id0 := m0.MemberID()
	g.add()
	g.settle(want)
	if got := m0.MemberID(); got != id0 {
		t.Errorf("m0 is member %q after its slow revoke, was %q: it lost its membership", got, id0)
	}
	slow.mu.Lock()
	defer slow.mu.Unlock()
	if slow.revokes == 0 {
		t.Fatal("m0 never revoked")
	}
	for i, err := range slow.commitErrs {
		if err != nil {
			t.Errorf("commit from inside revoke %d refused: %v", i, err)
		}
	}
	if g.fetch != nil {
		offsets, err := g.fetch()
		if err != nil {
			t.Fatal(err)
		}
		if len(offsets) == 0 {
			t.Error("no committed offsets after the revoke's commits")
		}
		for p, o := range offsets {
			if o != 100+int64(p.partition) {
				t.Errorf("offset of %v is %d, want %d", p, o, 100+int64(p.partition))
			}
		}
	}
	g.h.check(t)
}

// TestSlowRevokeKeepsMembership runs the scenario against a real cohortd
// over both transports.
func TestSlowRevokeKeepsMembership(t *testing.T) {
	c := cohortd(t)
	node := c.Node(0)
	for _, tr := range transports {
		for _, mode := range slowModes {
			t.Run(tr.name+"/"+mode.name, func(t *testing.T) {
				base := append(slowRevokeOpts(), tr.opts(node)...)
				base = append(base, member.Balancers(mode.balancers...))
				g := newGroup(t, c, fmt.Sprintf("slow-%s-%s", tr.name, mode.name), base...)
				slowRevokeScenario(t, g)
			})
		}
	}
}

// TestSlowRevokeKeepsMembershipKfake runs it over the Kafka transport
// against franz-go's kfake.
func TestSlowRevokeKeepsMembershipKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fake Kafka cluster")
	}
	for _, mode := range slowModes {
		t.Run(mode.name, func(t *testing.T) {
			slowRevokeScenario(t, kfakeGroup(t, append(slowRevokeOpts(), member.Balancers(mode.balancers...))...))
		})
	}
}
