package member_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cohort-coord/cohort/actors/member"
)

// TestStaticMembership: a static member restarted with its instance id within
// its session timeout gets its partitions back without a rebalance; a second
// instance with a running member's id fences it, and the fenced one reports
// its partitions lost and stops with ErrFenced.
func TestStaticMembership(t *testing.T) {
	c := cohortd(t)
	node := c.Node(0)
	want := allPartitions("t", 12)
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			base := append(timing(), tr.opts(node)...)
			base = append(base, member.Topics("t"))
			g := newGroup(t, c, "static-"+tr.name, base...)
			byInstance := map[string]*cohortMember{}
			for i := range 3 {
				id := fmt.Sprintf("s%d", i)
				byInstance[id] = g.add(member.InstanceID(id))
			}
			g.settle(want)
			gen := g.members[0].m.Generation()
			before := map[string]string{}
			for _, m := range g.members {
				before[m.m.MemberID()] = fmt.Sprint(sortTPs(m.owned()))
			}
			old := byInstance["s1"]
			oldOwned := fmt.Sprint(sortTPs(old.owned()))
			g.h.mu.Lock()
			changes := g.h.changes
			g.h.mu.Unlock()

			// Restart s1 within its session timeout.
			g.remove(old) // a static member does not leave
			restarted := g.add(member.InstanceID("s1"))
			g.settle(want)
			if got := fmt.Sprint(sortTPs(restarted.owned())); got != oldOwned {
				t.Errorf("restarted s1 owns %s, before the restart %s", got, oldOwned)
			}
			for _, m := range g.members {
				if m.m.Generation() != gen {
					t.Errorf("%s: generation %d after a static restart, was %d (a rebalance)", m.n, m.m.Generation(), gen)
				}
				if m != restarted && fmt.Sprint(sortTPs(m.owned())) != before[m.m.MemberID()] {
					t.Errorf("%s: owns %v after the restart, was %s", m.n, sortTPs(m.owned()), before[m.m.MemberID()])
				}
			}
			g.h.mu.Lock()
			if d := g.h.changes - changes; d != 2 {
				t.Errorf("%d partition changes around the restart, want 2 (s1 revoked, s1 assigned)", d)
			}
			g.h.mu.Unlock()
			g.h.check(t)

			// A second instance s2 while s2 runs: the old one is fenced.
			fenced := byInstance["s2"]
			fencedOwned := len(fenced.owned())
			g.add(member.InstanceID("s2"))
			select {
			case <-fenced.m.Done():
			case <-time.After(15 * time.Second):
				t.Fatalf("the fenced member did not stop: phase %v generation %d", fenced.m.Phase(), fenced.m.Generation())
			}
			err := fenced.m.Err()
			if !errors.Is(err, member.ErrFenced) || !errors.Is(err, kerr.FencedInstanceID) {
				t.Fatalf("fenced member stopped with %v", err)
			}
			t.Logf("fenced member stopped: %v", err)
			g.h.mu.Lock()
			lost := g.h.lost
			g.h.mu.Unlock()
			if fencedOwned > 0 && (len(lost) != 1 || lost[0][:len(fenced.n)] != fenced.n) {
				t.Errorf("lost callbacks %v, want one of %s", lost, fenced.n)
			}
			if err := fenced.m.EnforceRebalance("x"); !errors.Is(err, member.ErrIllegalState) {
				t.Errorf("EnforceRebalance after fencing: %v", err)
			}
		})
	}
}
