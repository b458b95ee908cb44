package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// AdminName is the well-known actor name of the cluster administration API.
const AdminName = "cluster"

const adminTimeout = 20 * time.Second

// adminActor serves cluster administration. Raft operations wait on futures,
// so each runs on its own goroutine and answers the sender from there.
type adminActor struct{ n *Node }

func (a *adminActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *clusterpb.StatusRequest:
		ctx.Respond(a.n.status())
	case *clusterpb.JoinRequest:
		a.async(ctx, func() proto.Message { return a.n.join(m) })
	case *clusterpb.AddVoterRequest:
		a.async(ctx, func() proto.Message {
			return a.n.leaderOnly(func() error {
				return a.n.raft.Raft.AddVoter(raft.ServerID(m.GetNodeId()), raft.ServerAddress(m.GetRaftAddr()), 0, adminTimeout).Error()
			})
		})
	case *clusterpb.RemoveVoterRequest:
		a.async(ctx, func() proto.Message { return a.n.leaderOnly(func() error { return a.n.removeVoter(m.GetNodeId()) }) })
	case *raftpb.TopicCreate:
		cmd := catalog.CreateTopic{Name: m.GetName(), Partitions: m.GetPartitions()}
		copy(cmd.ID[:], m.GetId())
		a.async(ctx, func() proto.Message { return a.n.onTopicCommand(cmd) })
	case *raftpb.TopicDelete:
		a.async(ctx, func() proto.Message { return a.n.onTopicCommand(catalog.DeleteTopic{Name: m.GetName()}) })
	case *clusterpb.TransferLeadershipRequest:
		a.async(ctx, func() proto.Message { return a.n.leaderOnly(func() error { return a.n.transfer(m.GetNodeId()) }) })
	}
}

func (a *adminActor) async(ctx actor.Context, f func() proto.Message) {
	sender, root := ctx.Sender(), ctx.ActorSystem().Root
	if sender == nil {
		return
	}
	go func() { root.Send(sender, f()) }()
}

// leaderRemote returns the native API address of the current leader.
func (n *Node) leaderRemote() string {
	if reg, ok := n.raft.FSM.Node(n.raft.LeaderID()); ok {
		return reg.GetRemoteAddr()
	}
	return ""
}

func (n *Node) leaderOnly(f func() error) *clusterpb.AdminResponse {
	if !n.raft.IsLeader() {
		return &clusterpb.AdminResponse{Error: "not the leader", LeaderRemoteAddr: n.leaderRemote()}
	}
	if err := f(); err != nil {
		return &clusterpb.AdminResponse{Error: err.Error(), LeaderRemoteAddr: n.leaderRemote()}
	}
	return &clusterpb.AdminResponse{LeaderRemoteAddr: n.leaderRemote()}
}

// join adds a node as a voter (or updates its address) and records its
// addresses. Joining again is a no-op.
func (n *Node) join(m *clusterpb.JoinRequest) *clusterpb.JoinResponse {
	if !n.raft.IsLeader() {
		return &clusterpb.JoinResponse{Error: "not the leader", LeaderRemoteAddr: n.leaderRemote()}
	}
	if m.GetNodeId() == "" || m.GetRaftAddr() == "" {
		return &clusterpb.JoinResponse{Error: "node id and raft addr are required"}
	}
	f := n.raft.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return &clusterpb.JoinResponse{Error: err.Error()}
	}
	present := false
	for _, s := range f.Configuration().Servers {
		if s.ID == raft.ServerID(m.GetNodeId()) && s.Address == raft.ServerAddress(m.GetRaftAddr()) && s.Suffrage == raft.Voter {
			present = true
		}
	}
	if !present {
		if err := n.raft.Raft.AddVoter(raft.ServerID(m.GetNodeId()), raft.ServerAddress(m.GetRaftAddr()), 0, adminTimeout).Error(); err != nil {
			return &clusterpb.JoinResponse{Error: err.Error(), LeaderRemoteAddr: n.leaderRemote()}
		}
		n.log.Info("voter added", "node", m.GetNodeId(), "raft_addr", m.GetRaftAddr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	reg := &raftpb.NodeRegister{NodeId: m.GetNodeId(), RaftAddr: m.GetRaftAddr(), RemoteAddr: m.GetRemoteAddr(), KafkaAddr: m.GetKafkaAddr()}
	if err := n.raft.Register(ctx, reg); err != nil {
		return &clusterpb.JoinResponse{Error: err.Error(), LeaderRemoteAddr: n.leaderRemote()}
	}
	return &clusterpb.JoinResponse{LeaderRemoteAddr: n.remoteAddr}
}

func (n *Node) removeVoter(id string) error {
	if id == "" {
		return errors.New("node id is required")
	}
	if id == n.raft.ID() {
		// Removing the leader: hand leadership over first so the cluster
		// keeps a leader that can commit the removal.
		if err := n.raft.Raft.LeadershipTransfer().Error(); err != nil {
			return fmt.Errorf("transfer leadership before removing the leader: %w", err)
		}
		return errors.New("leadership transferred; send the removal again to the new leader")
	}
	if !slices.Contains(n.voters(), id) {
		return fmt.Errorf("node %q is not a voter of the cluster", id)
	}
	if err := n.raft.Raft.RemoveServer(raft.ServerID(id), 0, adminTimeout).Error(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	return n.raft.Unregister(ctx, id)
}

func (n *Node) transfer(id string) error {
	if id == "" {
		return n.raft.Raft.LeadershipTransfer().Error()
	}
	f := n.raft.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == raft.ServerID(id) {
			return n.raft.Raft.LeadershipTransferToServer(s.ID, s.Address).Error()
		}
	}
	return fmt.Errorf("node %q is not in the cluster", id)
}

func (n *Node) status() *clusterpb.StatusResponse {
	r := n.raft.Raft
	stats := r.Stats()
	num := func(k string) uint64 { v, _ := strconv.ParseUint(stats[k], 10, 64); return v }
	resp := &clusterpb.StatusResponse{
		NodeId:       n.raft.ID(),
		State:        r.State().String(),
		LeaderId:     n.raft.LeaderID(),
		Term:         num("term"),
		AppliedIndex: r.AppliedIndex(),
		CommitIndex:  num("commit_index"),
		FsmHash:      n.raft.FSM.Hash(),
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		resp.Error = err.Error()
		return resp
	}
	for _, s := range f.Configuration().Servers {
		m := &clusterpb.Member{NodeId: string(s.ID), RaftAddr: string(s.Address), Leader: string(s.ID) == resp.LeaderId}
		if s.Suffrage == raft.Voter {
			m.Suffrage = "voter"
		} else {
			m.Suffrage = "nonvoter"
		}
		if reg, ok := n.raft.FSM.Node(string(s.ID)); ok {
			m.RemoteAddr, m.KafkaAddr = reg.GetRemoteAddr(), reg.GetKafkaAddr()
		}
		resp.Members = append(resp.Members, m)
	}
	return resp
}
