package raftfsm

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Replica is this node's copy of one Raft group: the Raft instance, the FSM
// it applies to, the group-commit store that proposes group writes, the log
// it reads entries back from, and the channel that tells leadership
// changes. It is the unit the rest of cohort drives (activation on
// leadership, the leader lease, FindCoordinator, leadership transfers)
// without seeing hashicorp/raft. Today a node runs one replica, which also
// holds the topic catalog and the node registry (Node); a sharded node runs
// one per shard.
type Replica struct {
	raft *raft.Raft
	// FSM is the replicated state this replica applies.
	FSM *FSM
	// Store proposes group writes through this replica's log.
	Store    *Store
	id       string
	logStore raft.LogStore // the log file itself, not its cache (Holds)
	leaderCh <-chan bool
	held     heldCache // Holds
	timeout  time.Duration
	shard    int // which shard of the node's groups it holds (0 with one)

	logs      replicaLog
	transport *raft.NetworkTransport
	health    peerHealth // PeerSettled
}

// Shard is the shard of the cluster's groups this replica holds.
func (r *Replica) Shard() int { return r.shard }

// close stops the replica's store and Raft, and closes its transport and
// log.
func (r *Replica) close() error {
	if r.Store != nil {
		r.Store.Close()
	}
	r.stopWatchingPeers()
	err := r.raft.Shutdown().Error()
	r.transport.Close()
	r.logs.Close()
	return err
}

func (r *Replica) raftOrNil() *raft.Raft {
	if r == nil {
		return nil
	}
	return r.raft
}

// Status is a replica's Raft state at one moment.
type Status struct {
	// State is Follower, Candidate, Leader or Shutdown.
	State             string
	Term              uint64
	CommitIndex       uint64
	AppliedIndex      uint64
	LastSnapshotIndex uint64
	// LastLogIndex is the index of the last entry in the replica's log.
	LastLogIndex uint64
	// LastContact is how long ago a follower last heard from its leader:
	// 0 on the leader, negative when it has heard from none.
	LastContact time.Duration
}

// Server is a member of a replica's Raft configuration.
type Server struct {
	ID, Addr string
	Voter    bool
}

// ID returns this node's id in the group.
func (r *Replica) ID() string { return r.id }

// Leadership receives true when this replica becomes leader and false when
// it stops being leader.
func (r *Replica) Leadership() <-chan bool { return r.leaderCh }

// IsLeader reports whether this replica leads now.
func (r *Replica) IsLeader() bool { return r.raft.State() == raft.Leader }

// LeaderID returns the current leader's node id, "" when unknown.
func (r *Replica) LeaderID() string {
	_, id := r.raft.LeaderWithID()
	return string(id)
}

// LastLeaderContact is when this replica, as a follower, last heard from a
// leader (zero when it has heard from none since it started).
func (r *Replica) LastLeaderContact() time.Time { return r.raft.LastContact() }

// HeartbeatTimeout returns the Raft heartbeat timeout in force: a follower
// that has not heard from its leader for that long starts an election.
func (r *Replica) HeartbeatTimeout() time.Duration {
	return r.raft.ReloadableConfig().HeartbeatTimeout
}

// Barrier waits until every entry this leader's log held when it was called
// is applied, or timeout passes. Leader only.
func (r *Replica) Barrier(timeout time.Duration) error {
	return r.raft.Barrier(timeout).Error()
}

// VerifyLeader confirms with a quorum that this replica still leads: it
// returns nil once a round of heartbeats sent after the call was answered
// by a quorum.
func (r *Replica) VerifyLeader() error { return r.raft.VerifyLeader().Error() }

// AppliedIndex is the index of the last entry handed to the FSM (see Holds
// for the entries the FSM has applied).
func (r *Replica) AppliedIndex() uint64 { return r.raft.AppliedIndex() }

// LastIndex is the index of the last entry in this replica's log.
func (r *Replica) LastIndex() uint64 { return r.raft.LastIndex() }

// Propose appends one encoded command entry (an Envelope) to the log and
// waits until it is applied, or ctx ends. Leader only.
func (r *Replica) Propose(ctx context.Context, entry []byte) error {
	timeout := r.timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	f := r.raft.Apply(entry, timeout)
	if err := f.Error(); err != nil {
		return storeError(err)
	}
	if res, ok := f.Response().(*ApplyResult); ok && res.Err != nil {
		return res.Err
	}
	return nil
}

// Status returns the replica's Raft state, term and indexes.
func (r *Replica) Status() Status {
	stats := r.raft.Stats()
	num := func(k string) uint64 { v, _ := strconv.ParseUint(stats[k], 10, 64); return v }
	return Status{
		State:             r.raft.State().String(),
		Term:              num("term"),
		CommitIndex:       num("commit_index"),
		AppliedIndex:      r.raft.AppliedIndex(),
		LastSnapshotIndex: num("last_snapshot_index"),
		LastLogIndex:      num("last_log_index"),
		LastContact:       lastContact(r.raft),
	}
}

// lastContact is Status.LastContact.
func lastContact(r *raft.Raft) time.Duration {
	if r.State() == raft.Leader {
		return 0
	}
	last := r.LastContact()
	if last.IsZero() {
		return -1
	}
	return time.Since(last)
}

// Servers returns the members of the latest configuration.
func (r *Replica) Servers() ([]Server, error) {
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var out []Server
	for _, s := range f.Configuration().Servers {
		out = append(out, Server{ID: string(s.ID), Addr: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out, nil
}

// Voters returns the ids of the voters in the latest configuration.
func (r *Replica) Voters() []string {
	servers, err := r.Servers()
	if err != nil {
		return nil
	}
	var ids []string
	for _, s := range servers {
		if s.Voter {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

// TransferLeadership hands leadership to the node id, or to the most
// up-to-date voter when id is empty. Leader only.
func (r *Replica) TransferLeadership(id string) error {
	if !r.IsLeader() {
		return ErrNotLeader
	}
	if id == "" {
		return raftError(r.raft.LeadershipTransfer().Error())
	}
	servers, err := r.Servers()
	if err != nil {
		return err
	}
	for _, s := range servers {
		if s.ID == id {
			return raftError(r.raft.LeadershipTransferToServer(raft.ServerID(s.ID), raft.ServerAddress(s.Addr)).Error())
		}
	}
	return fmt.Errorf("%w: node %q is not in the cluster", ErrUnknownNode, id)
}

// peerHealth is what a leading replica saw of its peers' heartbeats:
// hashicorp/raft reports a peer whose heartbeats fail, and when they
// resume. It is cleared on every leader change (a view from an earlier
// term says nothing now).
type peerHealth struct {
	mu      sync.Mutex
	failing map[string]time.Time // peers whose heartbeats fail, since when
	since   map[string]time.Time // when the peer's heartbeats last resumed
	seen    map[string]time.Time // when PeerSettled was first asked of the peer
	reset   time.Time            // the last leader change
	obs     *raft.Observer
	done    chan struct{}
}

func (r *Replica) watchPeers() {
	ch := make(chan raft.Observation, 64)
	h := &r.health
	h.failing, h.since, h.seen, h.reset, h.done = map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}, time.Now(), make(chan struct{})
	h.obs = raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.LeaderObservation:
			return true
		}
		return false
	})
	r.raft.RegisterObserver(h.obs)
	go func() {
		for {
			select {
			case <-h.done:
				return
			case o := <-ch:
				h.mu.Lock()
				switch d := o.Data.(type) {
				case raft.FailedHeartbeatObservation:
					if _, ok := h.failing[string(d.PeerID)]; !ok {
						h.failing[string(d.PeerID)] = time.Now()
					}
				case raft.ResumedHeartbeatObservation:
					delete(h.failing, string(d.PeerID))
					h.since[string(d.PeerID)] = time.Now()
				case raft.LeaderObservation:
					clear(h.failing)
					clear(h.since)
					clear(h.seen)
					h.reset = time.Now()
				}
				h.mu.Unlock()
			}
		}
	}()
}

func (r *Replica) stopWatchingPeers() {
	if r.health.obs != nil {
		r.raft.DeregisterObserver(r.health.obs)
		close(r.health.done)
	}
}

// PeerUnreachable reports whether this replica has known for at least
// after that node id cannot be reached: as leader, its heartbeats to id
// have failed that long; as a follower of id, it has not heard from it for
// that long. A replica with no view of id (a follower of another leader)
// says false.
func (r *Replica) PeerUnreachable(id string, after time.Duration) bool {
	if id == r.id {
		return false
	}
	if r.IsLeader() {
		h := &r.health
		h.mu.Lock()
		defer h.mu.Unlock()
		since, failing := h.failing[id]
		return failing && time.Since(since) >= after
	}
	if r.LeaderID() != id {
		return false
	}
	last := r.LastLeaderContact()
	return !last.IsZero() && time.Since(last) >= after
}

// PeerSettled reports whether this replica, as leader, has seen peer id
// answer its heartbeats for at least settle: none failed since the last
// leader change, since they last resumed, or since it was first asked
// about the peer (a node that just joined), settle or more ago. A peer
// that just came back is not settled until it kept up for that long.
func (r *Replica) PeerSettled(id string, settle time.Duration) bool {
	h := &r.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, failing := h.failing[id]; failing {
		return false
	}
	now := time.Now()
	seen, ok := h.seen[id]
	if !ok {
		seen = now
		h.seen[id] = now
	}
	since := h.reset
	for _, t := range []time.Time{h.since[id], seen} {
		if t.After(since) {
			since = t
		}
	}
	return now.Sub(since) >= settle
}
