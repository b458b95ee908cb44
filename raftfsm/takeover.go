package raftfsm

import (
	"errors"
	"net"
	"slices"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// A follower tells a stalled leader from a dead one by its Raft port.
//
// The heartbeat timeout has to outlast a stall (a GC pause, a stalled disk,
// a VM's stolen time, SIGSTOP): a leader that stops for longer than it is
// deposed when it resumes, although nothing failed. But a leader whose
// process died is then replaced only after the same timeout, and a crash
// is the failure clients meet most. The two look alike to Raft (no
// heartbeats) and differ at the port: the kernel of a stopped process
// still accepts connections on its listener, while a dead process's port
// refuses them at once. So a follower that has not heard from its shard's
// leader for LeaderProbeAfter dials the leader's Raft address, directly
// (never through Config.PeerAddrs, which may route through a proxy that
// refuses on its own), and when the connection is refused it starts the
// election at once, as a leadership transfer's target does (a TimeoutNow
// to itself: the others grant their vote although they still know the old
// leader). A leader that is merely slow or cut off, or a host that is down
// (the dial times out), is left to the heartbeat timeout.
//
// Of the surviving voters one goes first, a different one per shard so
// that the dead node's shards spread over the survivors; each other voter
// waits probeStagger more per place in line, so they do not split the
// vote, and takes over if the first could not win (its log was behind).
//
// An election forced this way may end the old leader's term before its
// lease (node/lease.go) ran out, were the refusal a lie (a firewall that
// resets connections to a live node): ForcedElectionAt tells the new leader
// when it forced one, so it waits out a lease before answering from its
// state.

// DefaultLeaderProbeAfter is Config.LeaderProbeAfter's default: longer than
// an idle shard's gap between heartbeats at the default timings (a
// tenth to a fifth of the heartbeat timeout), so an idle cluster seldom
// dials, and short enough that a crash is noticed well inside a second.
const DefaultLeaderProbeAfter = 300 * time.Millisecond

// probeStagger is how much longer each surviving voter after the first in a
// shard's line waits before it forces an election of its own.
const probeStagger = 300 * time.Millisecond

// probeEvery is how often a node looks for silent leaders.
const probeEvery = 50 * time.Millisecond

// probeDialTimeout bounds a probe's dial: a refusal comes back at once; a
// dial that takes longer (a host down, a partition) is not a refusal.
const probeDialTimeout = 250 * time.Millisecond

// ForcedElectionAt is when this replica last forced an election because its
// leader's port refused connections (zero if it never did).
func (r *Replica) ForcedElectionAt() time.Time {
	ns := r.forcedAt.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// electNow makes this follower a candidate at once, as the target of a
// leadership transfer: a TimeoutNow sent to itself.
func (r *Replica) electNow() error {
	if r.raft.State() != raft.Follower {
		return nil
	}
	r.forcedAt.Store(time.Now().UnixNano())
	req := &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersionMax,
		ID:              []byte(r.id),
		Addr:            r.transport.EncodePeer(raft.ServerID(r.id), r.addr),
	}}
	var resp raft.TimeoutNowResponse
	return r.transport.TimeoutNow(raft.ServerID(r.id), r.addr, req, &resp)
}

// silentLeader returns the leader this follower has not heard from for at
// least after, with its configured address, and for how long.
func (r *Replica) silentLeader(after time.Duration) (id string, addr raft.ServerAddress, silent time.Duration, ok bool) {
	if r.raft.State() != raft.Follower {
		return "", "", 0, false
	}
	a, lid := r.raft.LeaderWithID()
	if lid == "" || string(lid) == r.id {
		return "", "", 0, false
	}
	last := r.raft.LastContact()
	if last.IsZero() {
		return "", "", 0, false
	}
	silent = time.Since(last)
	if silent < after {
		return "", "", 0, false
	}
	return string(lid), a, silent, true
}

// placeInLine is this node's place among the voters of r other than dead
// that may force an election after dead crashed: shard k's line starts
// k places further along the sorted voters, so the dead node's shards
// spread over the survivors.
func (r *Replica) placeInLine(dead string) (int, bool) {
	var alive []string
	for _, id := range r.Voters() {
		if id != dead {
			alive = append(alive, id)
		}
	}
	slices.Sort(alive)
	i := slices.Index(alive, r.id)
	if i < 0 {
		return 0, false
	}
	return (i + len(alive) - r.shard%len(alive)) % len(alive), true
}

// refused reports whether a TCP dial to addr was refused: nothing listens
// there, the process behind it is gone.
func refused(addr raft.ServerAddress) bool {
	c, err := net.DialTimeout("tcp", string(addr), probeDialTimeout)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// watchCrashedLeaders forces an election in every shard whose leader's
// port refuses connections, until stop is closed.
func (n *Node) watchCrashedLeaders(after time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		n.probeSilentLeaders(after)
	}
}

func (n *Node) probeSilentLeaders(after time.Duration) {
	type silentShard struct {
		r      *Replica
		leader string
		silent time.Duration
	}
	var silent []silentShard
	dead := map[raft.ServerAddress]bool{}
	for _, r := range n.replicas() {
		id, addr, d, ok := r.silentLeader(after)
		if !ok {
			continue
		}
		if _, probed := dead[addr]; !probed {
			dead[addr] = refused(addr)
		}
		if dead[addr] {
			silent = append(silent, silentShard{r, id, d})
		}
	}
	for _, s := range silent {
		place, ok := s.r.placeInLine(s.leader)
		if !ok || s.silent < after+time.Duration(place)*probeStagger {
			continue
		}
		n.cfg.Logger.Warn("leader's Raft port refuses connections: starting an election now", "shard", s.r.shard, "leader", s.leader, "silent", s.silent.Round(time.Millisecond))
		if err := s.r.electNow(); err != nil {
			n.cfg.Logger.Warn("start an election", "shard", s.r.shard, "err", err)
		}
	}
}

// replicas are every Raft group of the node: the meta group's, then the
// shards' (the meta replica once when it holds the groups).
func (n *Node) replicas() []*Replica {
	out := []*Replica{n.Replica}
	for _, r := range n.shards {
		if r != n.Replica {
			out = append(out, r)
		}
	}
	return out
}
