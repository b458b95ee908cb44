package raftfsm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// Membership errors. The rules below return them wrapped with %w, so
// callers (the cluster administration API) tell them apart with errors.Is.
var (
	// ErrNotLeader: only the leader changes the configuration.
	ErrNotLeader = errors.New("not the leader")
	// ErrInvalidRequest: a required field is missing.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrUnknownNode: the node is not in the cluster configuration.
	ErrUnknownNode = errors.New("unknown node")
	// ErrLeadershipMoved: leadership was handed to another node before the
	// change (removing the leader); send it again to the new leader.
	ErrLeadershipMoved = errors.New("leadership moved")
)

// membershipTimeout bounds one configuration change.
const membershipTimeout = 20 * time.Second

// Join adds a node as a voter (or updates its Raft address) and records its
// addresses and log format in the registry. Joining again with the same id
// and address is a no-op. A node that applies only a lower log format than
// the cluster's is refused (ErrIncompatibleNode): it would stop at the
// first entry it cannot read. Leader only.
func (n *Node) Join(ctx context.Context, reg *raftpb.NodeRegister) error {
	if err := n.join(ctx, reg); err != nil {
		return err
	}
	n.RaiseLogFormat(ctx)
	return nil
}

func (n *Node) join(ctx context.Context, reg *raftpb.NodeRegister) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if reg.GetNodeId() == "" || reg.GetRaftAddr() == "" {
		return fmt.Errorf("%w: node id and raft addr are required", ErrInvalidRequest)
	}
	n.formatMu.Lock()
	defer n.formatMu.Unlock()
	// After a barrier every entry this leader's log holds is applied: an
	// earlier leader's LOG_FORMAT entry that may still commit shows.
	if err := n.Barrier(membershipTimeout); err != nil {
		return raftError(err)
	}
	if have, want := registeredFormat(reg), n.FSM.LogFormat(); have < want {
		return fmt.Errorf("%w: %w: node %s applies log formats up to %d and the cluster writes format %d: run a newer cohortd on it",
			ErrInvalidRequest, ErrIncompatibleNode, reg.GetNodeId(), have, want)
	}
	servers, err := n.Servers()
	if err != nil {
		return err
	}
	present := slices.Contains(servers, Server{ID: reg.GetNodeId(), Addr: reg.GetRaftAddr(), Voter: true})
	if !present {
		if err := n.AddVoter(reg.GetNodeId(), reg.GetRaftAddr()); err != nil {
			return err
		}
		n.cfg.Logger.Info("voter added", "node", reg.GetNodeId(), "raft_addr", reg.GetRaftAddr())
	}
	return n.register(ctx, reg)
}

// AddVoter adds a voter (or changes its address). Leader only.
func (n *Node) AddVoter(id, addr string) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if id == "" || addr == "" {
		return fmt.Errorf("%w: node id and raft addr are required", ErrInvalidRequest)
	}
	return raftError(n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, membershipTimeout).Error())
}

// RemoveVoter removes a voter and forgets its registry entry. Removing the
// leader hands leadership to another voter first and fails with
// ErrLeadershipMoved: the new leader then commits the removal, so the
// cluster keeps a leader throughout. Leader only.
func (n *Node) RemoveVoter(ctx context.Context, id string) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if id == "" {
		return fmt.Errorf("%w: node id is required", ErrInvalidRequest)
	}
	if id == n.ID() {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			return fmt.Errorf("transfer leadership before removing the leader: %w", raftError(err))
		}
		return fmt.Errorf("%w: send the removal again to the new leader", ErrLeadershipMoved)
	}
	if !slices.Contains(n.Voters(), id) {
		return fmt.Errorf("%w: node %q is not a voter of the cluster", ErrUnknownNode, id)
	}
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, membershipTimeout).Error(); err != nil {
		return raftError(err)
	}
	return n.Unregister(ctx, id)
}

// raftError marks raft's "not the leader" answers with ErrNotLeader.
func raftError(err error) error {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	}
	return err
}
