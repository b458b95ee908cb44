package chaos

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	clustertest "github.com/cohort-coord/cohort/cluster-test"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
)

// nemesisLoop injects faults until end: each fault is held for a while and
// then recovered, followed by a quiet window in which the workload may
// also change its membership.
func (r *run) nemesisLoop(start, end time.Time) {
	stopProgress := make(chan struct{})
	defer close(stopProgress)
	if r.cfg.Progress != nil {
		go func() {
			for {
				select {
				case <-stopProgress:
					return
				case <-time.After(time.Second):
				}
				faults, _ := r.rec.counts()
				r.cfg.Progress(Progress{Elapsed: time.Since(start), Total: end.Sub(start), Faults: faults,
					Ops: len(r.hst.Ops()), Leader: r.rec.lastLeader(), Active: r.active.Load().(string)})
			}
		}()
	}
	r.quiet()
	for time.Now().Before(end) {
		kind := r.cfg.Nemeses[r.rng.IntN(len(r.cfg.Nemeses))]
		f := r.inject(kind, end)
		if f.Kind != "" {
			r.rec.fault(f)
			r.cfg.Logf("%6.1fs %s %s %v (leader was %s) %s", f.Start.Sub(r.begin).Seconds(), f.Kind, f.Detail, f.Targets, f.Leader, f.Note)
		}
		r.active.Store("")
		if time.Now().Before(end) {
			r.quiet()
		}
	}
}

// quiet waits Quiet plus up to Quiet more, and sometimes crashes or adds a
// member halfway.
func (r *run) quiet() {
	d := r.cfg.Quiet + time.Duration(r.rng.Int64N(int64(r.cfg.Quiet)+1))
	time.Sleep(d / 2)
	if r.rng.IntN(3) == 0 {
		r.churn()
	}
	time.Sleep(d - d/2)
}

// hold returns a random duration in [lo, hi].
func (r *run) hold(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.rng.Int64N(int64(hi-lo)+1))
}

func (r *run) leaderNode() *clustertest.Node {
	id := r.rec.lastLeader()
	for _, n := range r.c.Running() {
		if n.ID == id && !r.isPaused(n.Index) {
			return n
		}
	}
	return r.c.Leader()
}

func (r *run) followers(leader *clustertest.Node) []*clustertest.Node {
	var out []*clustertest.Node
	for _, n := range r.c.Running() {
		if leader == nil || n.ID != leader.ID {
			out = append(out, n)
		}
	}
	return out
}

func ids(ns []*clustertest.Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.ID)
	}
	return out
}

// inject runs one fault of kind to its recovery and returns it ("" kind
// when it could not be injected, as with no leader known).
func (r *run) inject(kind string, end time.Time) Fault {
	leader := r.leaderNode()
	if leader == nil {
		time.Sleep(500 * time.Millisecond)
		return Fault{}
	}
	f := Fault{Kind: kind, Leader: leader.ID, Start: time.Now()}
	fol := r.followers(leader)
	r.active.Store(kind)
	switch kind {
	case "kill":
		var victims []*clustertest.Node
		switch r.rng.IntN(3) {
		case 0:
			f.Detail, victims = "leader", []*clustertest.Node{leader}
		case 1:
			f.Detail, victims = "follower", []*clustertest.Node{fol[r.rng.IntN(len(fol))]}
		default:
			if len(fol) < r.cfg.Nodes/2 {
				f.Detail, victims = "leader", []*clustertest.Node{leader}
				break
			}
			// A majority: the leader and enough followers.
			f.Detail = "majority"
			victims = append(victims, leader)
			for _, i := range r.rng.Perm(len(fol))[:r.cfg.Nodes/2] {
				victims = append(victims, fol[i])
			}
		}
		f.Targets = ids(victims)
		f.Start = time.Now()
		for _, v := range victims {
			r.c.Kill(v.Index)
		}
		time.Sleep(r.hold(time.Second, 3*time.Second))
		for _, v := range victims {
			r.c.Restart(v.Index)
		}
	case "pause":
		victim := leader
		if r.rng.IntN(2) == 0 {
			victim = fol[r.rng.IntN(len(fol))]
			f.Detail = "follower"
		} else {
			f.Detail = "leader"
		}
		// Longer than the Raft election timeout, or longer than the
		// members' session timeout.
		d := 3 * electionTimeout
		if r.rng.IntN(2) == 0 {
			d, f.Detail = r.cfg.SessionTimeout+time.Second, f.Detail+" long"
		} else {
			f.Detail += " short"
		}
		f.Targets = []string{victim.ID}
		f.Start = time.Now()
		r.setPaused(victim.Index, true)
		victim.Cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(d)
		victim.Cmd.Process.Signal(syscall.SIGCONT)
		r.setPaused(victim.Index, false)
	case "partition":
		all := r.net.IDs()
		others := ids(fol)
		switch r.rng.IntN(4) {
		case 0:
			f.Detail = "isolated-leader"
			r.net.Partition([]string{leader.ID}, others)
		case 1:
			// Minority/majority with the leader on a random side.
			perm := r.rng.Perm(len(all))
			k := len(all) / 2
			var a, b []string
			for i, j := range perm {
				if i < k {
					a = append(a, all[j])
				} else {
					b = append(b, all[j])
				}
			}
			f.Detail = fmt.Sprintf("minority %v / majority %v", a, b)
			r.net.Partition(a, b)
		case 2:
			// Bridge: the leader and one follower cannot talk; the
			// other follower hears both.
			f.Detail = "bridge via " + others[len(others)-1]
			r.net.Partition([]string{leader.ID}, others[:len(others)-1])
		default:
			// One way: the leader hears the followers but they do not
			// hear it.
			f.Detail = "one-way leader->followers cut"
			for _, o := range others {
				r.net.Cut(leader.ID, o)
			}
		}
		f.Targets = all
		f.Start = time.Now()
		time.Sleep(r.hold(2*time.Second, 5*time.Second))
		r.net.Heal()
	case "transfer":
		k := 3 + r.rng.IntN(3)
		f.Detail = fmt.Sprintf("storm of %d", k)
		for i := 0; i < k; i++ {
			l := r.c.Leader()
			if l == nil {
				time.Sleep(300 * time.Millisecond)
				continue
			}
			var to []*clustertest.Node
			for _, n := range r.c.Running() {
				if n.ID != l.ID {
					to = append(to, n)
				}
			}
			target := to[r.rng.IntN(len(to))]
			f.Targets = append(f.Targets, target.ID)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := r.c.Admin.DoOnLeader(ctx, l.RemoteAddr, &clusterpb.TransferLeadershipRequest{NodeId: target.ID})
			cancel()
			if err != nil {
				f.Note += fmt.Sprintf("[transfer to %s: %v] ", target.ID, err)
			}
			time.Sleep(r.hold(300*time.Millisecond, 1500*time.Millisecond))
		}
	case "move":
		// A storm of planned shard leadership moves (what leader
		// placement does), each of a random shard to a random other node.
		k := 3 + r.rng.IntN(4)
		f.Detail = fmt.Sprintf("storm of %d shard moves", k)
		for range k {
			nodes := r.c.Running()
			sts, _ := r.c.StatusOf(nodes, 2*time.Second)
			shards := 0
			for _, st := range sts {
				shards = max(shards, len(st.GetShards()))
			}
			if shards == 0 {
				time.Sleep(300 * time.Millisecond)
				continue
			}
			sh := uint32(r.rng.IntN(shards))
			var from *clustertest.Node
			var to []*clustertest.Node
			for i, st := range sts {
				if st != nil && int(sh) < len(st.GetShards()) && st.GetShards()[sh].GetState() == "Leader" {
					from = nodes[i]
				} else {
					to = append(to, nodes[i])
				}
			}
			if from == nil || len(to) == 0 {
				time.Sleep(300 * time.Millisecond)
				continue
			}
			target := to[r.rng.IntN(len(to))]
			f.Targets = append(f.Targets, fmt.Sprintf("%d:%s", sh, target.ID))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := r.c.Admin.DoOnLeader(ctx, from.RemoteAddr, &clusterpb.TransferLeadershipRequest{NodeId: target.ID, Shard: &sh})
			cancel()
			if err != nil {
				f.Note += fmt.Sprintf("[shard %d to %s: %v] ", sh, target.ID, err)
			}
			time.Sleep(r.hold(300*time.Millisecond, 1500*time.Millisecond))
		}
	case "membership":
		// Remove a voter (the leader one time in three), wipe it and add
		// it back as a new voter with the same id.
		victim := fol[r.rng.IntN(len(fol))]
		f.Detail = "remove follower, re-add"
		if r.rng.IntN(3) == 0 {
			victim, f.Detail = leader, "remove leader, re-add"
		}
		f.Targets = []string{victim.ID}
		f.Start = time.Now()
		if err := r.c.RemoveVoter(victim.Index); err != nil {
			f.Note = "remove: " + err.Error()
			// The answer can be lost while the removal commits (leadership
			// moved; the retry at the new leader says "not a voter"): go on
			// with the re-add when the victim is out.
			if r.isVoter(victim.ID) {
				break
			}
			f.Note += " (removed all the same)"
		}
		var rest []string
		for _, n := range r.c.Running() {
			if n.ID != victim.ID {
				rest = append(rest, n.ID)
			}
		}
		r.c.WaitVoters(rest, 30*time.Second)
		r.c.ExpectExit(victim.Index)
		r.c.Kill(victim.Index)
		if err := os.RemoveAll(victim.DataDir); err != nil {
			f.Note = err.Error()
		}
		time.Sleep(r.hold(time.Second, 2*time.Second))
		r.c.Restart(victim.Index)
		r.c.WaitVoters(r.net.IDs(), 30*time.Second)
	case "snapshot":
		// Cut one follower off while commits go on long enough for the
		// others to snapshot and truncate past it, so it must install a
		// snapshot when the link heals.
		victim := fol[r.rng.IntN(len(fol))]
		f.Detail = "lagging follower"
		f.Targets = []string{victim.ID}
		before := strings.Count(readFile(victim.LogPath), "Installed remote snapshot")
		f.Start = time.Now()
		r.net.Partition([]string{victim.ID}, r.others(victim.ID))
		time.Sleep(r.hold(4*time.Second, 6*time.Second))
		r.net.Heal()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) && strings.Count(readFile(victim.LogPath), "Installed remote snapshot") == before {
			time.Sleep(100 * time.Millisecond)
		}
		if n := strings.Count(readFile(victim.LogPath), "Installed remote snapshot") - before; n > 0 {
			f.Note = "installed a snapshot"
		} else {
			f.Note = "caught up from the log (no snapshot install seen)"
		}
	}
	f.End = time.Now()
	return f
}

func (r *run) others(id string) []string {
	var out []string
	for _, o := range r.net.IDs() {
		if o != id {
			out = append(out, o)
		}
	}
	return out
}

func (r *run) setPaused(i int, on bool) {
	r.rec.mu.Lock()
	if on {
		r.paused[i] = true
	} else {
		delete(r.paused, i)
	}
	r.rec.mu.Unlock()
}

// healAll ends every fault: links healed, paused nodes continued, stopped
// nodes restarted.
func (r *run) healAll() {
	r.net.Heal()
	for i := 0; i < r.cfg.Nodes; i++ {
		n := r.c.Node(i)
		if r.isPaused(i) {
			n.Cmd.Process.Signal(syscall.SIGCONT)
			r.setPaused(i, false)
		}
	}
	for i := 0; i < r.cfg.Nodes; i++ {
		if !r.c.Node(i).Running() {
			r.c.Restart(i)
		}
	}
}

// isVoter reports whether id is a voter as any running node with a leader
// sees the configuration (true when no node answers: nothing is known).
func (r *run) isVoter(id string) bool {
	sts, _ := r.c.StatusOf(r.c.Running(), 2*time.Second)
	for _, st := range sts {
		if st != nil && st.LeaderId != "" {
			return slices.Contains(clustertest.Voters(st), id)
		}
	}
	return true
}
