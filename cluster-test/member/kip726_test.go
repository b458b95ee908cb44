package member_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/membership"
)

func balancersOf(spec string) []assignor.Balancer {
	var bs []assignor.Balancer
	for _, name := range strings.Split(spec, ",") {
		b, ok := assignor.ByName(name)
		if !ok {
			panic("no balancer " + name)
		}
		bs = append(bs, b)
	}
	return bs
}

// TestKIP726RollingPaths bounces a group of 6 members one at a time through
// the upgrade and downgrade paths of KIP-726, checking after every restart
// that the group settles with exactly one owner per partition, and over the
// whole path that no partition was ever owned by two members at once.
func TestKIP726RollingPaths(t *testing.T) {
	c := cohortd(t)
	node := c.Node(0)
	want := allPartitions("t", 12)
	const cs, rng, both = "cooperative-sticky", "range", "cooperative-sticky,range"
	paths := []struct {
		name  string
		steps []string // the first is what the group starts with
	}{
		{"two-bounce-upgrade", []string{rng, both, cs}},
		{"single-bounce-upgrade", []string{rng, both}},
		{"downgrade", []string{cs, both, rng}},
		{"back-and-forth-twice", []string{rng, both, cs, both, rng, both, cs, both, rng}},
	}
	for _, tr := range transports {
		for _, path := range paths {
			t.Run(tr.name+"/"+path.name, func(t *testing.T) {
				if tr.name == "kafka" && path.name == "back-and-forth-twice" {
					t.Skip("the long path runs over the native transport only")
				}
				base := append(timing(), tr.opts(node)...)
				base = append(base, member.Topics("t"))
				g := newGroup(t, c, "kip726-"+tr.name+"-"+path.name, base...)
				for range 6 {
					g.add(member.Balancers(balancersOf(path.steps[0])...))
				}
				g.settle(want)
				startGen := g.members[0].m.Generation()
				start := time.Now()
				for _, step := range path.steps[1:] {
					for range 6 {
						// Restart the oldest member with the new list.
						g.remove(g.members[0])
						g.add(member.Balancers(balancersOf(step)...))
						g.settle(want)
					}
					t.Logf("bounced to [%s]: protocol %s, generation %d", step, g.members[0].m.Protocol(), g.members[0].m.Generation())
				}
				last := path.steps[len(path.steps)-1]
				wantProtocol := strings.Split(last, ",")[0]
				if got := g.members[0].m.Protocol(); got != wantProtocol {
					t.Errorf("protocol after the path %q, want %q", got, wantProtocol)
				}
				rebalances := g.members[0].m.Generation() - startGen
				t.Logf("PATH %s over %s: %d restarts, %d rebalances, settled in %v", path.name, tr.name,
					6*(len(path.steps)-1), rebalances, time.Since(start).Round(time.Millisecond))
				g.h.check(t)
			})
		}
	}
}

// exclusiveTransport makes the member believe its coordinator enforces
// exclusive ownership (the guard), so that it follows the protocol of the
// selected assignor, as it will against a cohortd with the guard.
type exclusiveTransport struct{ member.Transport }

func (e exclusiveTransport) Send(req any, done func(any, error)) {
	e.Transport.Send(req, func(res any, err error) {
		if f, ok := res.(*membership.CoordinatorFound); ok {
			f.Exclusive = true
		}
		done(res, err)
	})
}

func forceExclusive(f member.TransportFactory) member.TransportFactory {
	return func(env member.TransportEnv) (member.Transport, error) {
		tr, err := f(env)
		if err != nil {
			return nil, err
		}
		return exclusiveTransport{tr}, nil
	}
}

// TestDowngradeWindow shows why the member follows the selected assignor
// only when the coordinator enforces exclusive ownership, and that cohortd's
// ownership guard closes the window. Two [cooperative-sticky, range]
// members own the group's partitions under cooperative-sticky; a [range]
// member joins, so the group selects range (eager). A member following the
// selected protocol kept its partitions through JoinGroup and must revoke
// them before SyncGroup; the leader revokes at once and syncs, and a
// coordinator without the guard hands the new member its assignment while
// the slow member still revokes: two owners. With Java's rule (what the
// member does against a coordinator that does not advertise the guard) the
// [cooperative-sticky, range] members run eager, revoke before they join,
// and the join phase waits for the slow one: no overlap. With the guard on
// (cohortd's default, which the member learns from the coordinator) the
// member follows the selected protocol and the guard withholds what the
// slow member still owns: no overlap either.
func TestDowngradeWindow(t *testing.T) {
	want := allPartitions("t", 12)
	for _, tc := range []struct {
		name     string
		guardOff bool
		forced   bool // follow the selected protocol whatever the coordinator says
		overlap  bool
	}{
		{name: "guard-off/java-rule", guardOff: true},
		{name: "guard-off/follow-selected", guardOff: true, forced: true, overlap: true},
		{name: "guard-on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			if tc.guardOff {
				args = append(args, "--group-ownership-guard=false")
			}
			c := cohortd(t, args...)
			node := c.Node(0)
			tf := member.Native(node.RemoteAddr)
			if tc.forced {
				tf = forceExclusive(tf)
			}
			g := newGroup(t, c, "window", append(timing(), member.WithTransport(tf), member.Partitions("t", 12), member.Topics("t"))...)
			both := member.Balancers(assignor.CooperativeSticky(), assignor.Range())
			g.addSlow(0, both) // the leader revokes at once
			g.settle(want)
			g.addSlow(2*time.Second, both)
			g.settle(want)
			if p := g.members[0].m.Protocol(); p != "cooperative-sticky" {
				t.Fatalf("protocol %q", p)
			}
			g.add(member.Balancers(assignor.Range()))
			g.settle(want)
			if p := g.members[0].m.Protocol(); p != "range" {
				t.Fatalf("protocol %q after the downgrade", p)
			}
			g.h.mu.Lock()
			overlaps := len(g.h.overlaps)
			g.h.mu.Unlock()
			if !tc.overlap {
				g.h.check(t)
				return
			}
			// The window of a guard-less coordinator: it must show.
			if overlaps == 0 {
				t.Fatal("no overlap: the downgrade window of a guard-less coordinator did not show")
			}
			t.Logf("guard-less coordinator, member following the selected protocol: %d partitions owned twice", overlaps)
		})
	}
}
