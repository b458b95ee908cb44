package clustertest

import (
	"slices"
	"testing"
	"time"
)

// TestCrashedMemberExpiresThroughFailovers crashes one member of a group
// (30 s sessions) and kills the Raft leader every 10 s: each takeover
// carries the members' sessions over, so the crashed member is expired and
// its partitions reassigned within its session timeout plus one failover
// (the kill's election and takeover, and the 6 s grace a takeover gives
// members to reach it), not pushed back by every takeover; the members that
// keep heartbeating see no other rebalance.
func TestCrashedMemberExpiresThroughFailovers(t *testing.T) {
	skipShort(t)
	const session = 30 * time.Second
	c := StartCluster(t, 3)
	cfg := DefaultWorkload()
	cfg.Groups, cfg.Members, cfg.Partitions = 1, 3, 6
	cfg.Member.SessionTimeout, cfg.Member.RebalanceTimeout = session, session
	cfg.Member.HeartbeatInterval = time.Second
	cfg.Member.CommitInterval = time.Second
	_, w, before := stableWorkload(t, c, cfg)
	g := w.Groups[0]
	gen := before[g.ID].Gen
	victim := g.Members[0]
	lastWord := victim.LastOK("heartbeat")
	w.RemoveMember(g, victim)
	crashed := time.Now()
	if since := crashed.Sub(lastWord); since > 2*time.Second || lastWord.IsZero() {
		t.Fatalf("the victim's last heartbeat was %v before the crash", since)
	}
	joins := map[*Member]int64{}
	for _, m := range g.Members {
		joins[m] = m.Joins()
	}

	ids := c.ids()
	var failovers []time.Duration // kill -> a leader again
	var kills []time.Time
	var expired time.Time
	nextKill := crashed.Add(5 * time.Second)
	deadline := crashed.Add(session + 40*time.Second)
	for time.Now().Before(deadline) && expired.IsZero() {
		if time.Now().After(nextKill) {
			leader := c.WaitVoters(ids, 30*time.Second)
			killed := time.Now()
			c.Kill(leader.Index)
			kills = append(kills, killed)
			c.WaitLeader(30 * time.Second)
			failovers = append(failovers, time.Since(killed))
			c.Restart(leader.Index)
			nextKill = killed.Add(10 * time.Second)
		}
		if v, ok := w.Stable(); ok && v[g.ID].Gen > gen {
			expired = time.Now()
			if got := len(v[g.ID].Members); got != 2 {
				t.Fatalf("generation %d has %d members, want the 2 live ones", v[g.ID].Gen, got)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if expired.IsZero() {
		t.Fatalf("the crashed member was not expired within %v of its last heartbeat (%d leader kills, failovers %v)", deadline.Sub(lastWord), len(kills), failovers)
	}
	slices.Sort(failovers)
	worst := failovers[len(failovers)-1]
	// One failover: the slowest kill-to-leader seen, the takeover's grace
	// (min(session, 6s)) and 2 s for the rebalance that follows the expiry.
	bound := session + worst + 6*time.Second + 2*time.Second
	took := expired.Sub(lastWord)
	t.Logf("crashed member expired and its partitions reassigned %v after its last heartbeat (%d leader kills, kill-to-leader %v)", took.Round(time.Millisecond), len(kills), failovers)
	if took > bound {
		t.Errorf("expired %v after the last heartbeat, want within %v", took, bound)
	}
	if len(kills) < 2 {
		t.Errorf("only %d leader kills before the expiry", len(kills))
	}
	v, _ := w.Stable()
	if v[g.ID].Gen != gen+1 {
		t.Errorf("generation %d after the expiry, want %d: the live members saw another rebalance", v[g.ID].Gen, gen+1)
	}
	for _, m := range g.Members {
		if n := m.Joins() - joins[m]; n != 1 {
			t.Errorf("%s joined %d times, want once (for the crashed member's expiry)", m.Name, n)
		}
	}
}
