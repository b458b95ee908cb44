package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/admin"
	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// AdminName is the well-known actor name of the cluster administration API.
const AdminName = admin.ActorName

const adminTimeout = 20 * time.Second

// adminActor serves cluster administration. Raft operations wait on futures,
// so each runs on its own goroutine and answers the sender from there.
//
// Who may send these messages is decided by the native API's transport, not
// here: protoactor remote hands the actor no peer identity, so there is no
// principal to check Cluster ALTER against. With TLS on the native link
// only holders of a certificate from the cluster's CA connect at all (node
// certificates, cohortctl's); without it, whoever reaches --remote-addr
// administers the cluster, security changes included (ScramChange and
// AclChange are forwarded here by followers).
type adminActor struct{ n *Node }

func (a *adminActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *clusterpb.StatusRequest:
		if m.GetRaftOnly() {
			ctx.Respond(a.n.raftStatus())
			return
		}
		ctx.Respond(a.n.status())
	case *clusterpb.JoinRequest:
		a.async(ctx, func() proto.Message { return a.n.join(m) })
	case *clusterpb.AddVoterRequest:
		a.async(ctx, func() proto.Message {
			return a.n.adminResponse(a.n.raft.AddVoter(m.GetNodeId(), m.GetRaftAddr()))
		})
	case *clusterpb.RemoveVoterRequest:
		a.async(ctx, func() proto.Message {
			ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
			defer cancel()
			remove := func() error { return a.n.raft.RemoveVoter(ctx, m.GetNodeId()) }
			if m.GetNodeId() == a.n.raft.ID() && len(a.n.shards) == 1 {
				// Removing the leader hands leadership over first.
				return a.n.adminResponse(a.n.shards[0].withoutLease(remove))
			}
			return a.n.adminResponse(remove())
		})
	case *raftpb.TopicCreate:
		cmd := catalog.CreateTopic{Name: m.GetName(), Partitions: m.GetPartitions()}
		copy(cmd.ID[:], m.GetId())
		a.async(ctx, func() proto.Message { return a.n.onTopicCommand(cmd) })
	case *raftpb.TopicDelete:
		a.async(ctx, func() proto.Message { return a.n.onTopicCommand(catalog.DeleteTopic{Name: m.GetName()}) })
	case *raftpb.TopicGrow:
		cmd := catalog.GrowTopic{Name: m.GetName(), Partitions: m.GetPartitions()}
		copy(cmd.ID[:], m.GetId())
		a.async(ctx, func() proto.Message { return a.n.onTopicCommand(cmd) })
	case *securitypb.ScramChange:
		a.async(ctx, func() proto.Message { return a.n.onSecurityChange(m) })
	case *securitypb.AclChange:
		a.async(ctx, func() proto.Message { return a.n.onSecurityChange(m) })
	case *clusterpb.TransferLeadershipRequest:
		a.async(ctx, func() proto.Message { return a.n.transferLeadership(m) })
	case *clusterpb.BalanceRequest:
		a.async(ctx, func() proto.Message { return a.n.adminResponse(a.n.balanceNow(adminTimeout)) })
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

// adminCode is the typed code of a membership error.
func adminCode(err error) clusterpb.AdminError {
	switch {
	case err == nil:
		return clusterpb.AdminError_ADMIN_ERROR_NONE
	case errors.Is(err, raftfsm.ErrNotLeader), errors.Is(err, coordinator.ErrStoreNotLeader):
		return clusterpb.AdminError_ADMIN_ERROR_NOT_LEADER
	case errors.Is(err, raftfsm.ErrInvalidRequest):
		return clusterpb.AdminError_ADMIN_ERROR_INVALID_REQUEST
	case errors.Is(err, raftfsm.ErrUnknownNode):
		return clusterpb.AdminError_ADMIN_ERROR_UNKNOWN_NODE
	case errors.Is(err, raftfsm.ErrLeadershipMoved):
		return clusterpb.AdminError_ADMIN_ERROR_LEADERSHIP_MOVED
	default:
		return clusterpb.AdminError_ADMIN_ERROR_RAFT
	}
}

func (n *Node) adminResponse(err error) *clusterpb.AdminResponse {
	r := &clusterpb.AdminResponse{LeaderRemoteAddr: n.leaderRemote(), Code: adminCode(err)}
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// join adds a node as a voter (or updates its address) and records its
// addresses. Joining again is a no-op.
func (n *Node) join(m *clusterpb.JoinRequest) *clusterpb.JoinResponse {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if have, want := max(int(m.GetShards()), 1), n.raft.ShardCount(); have != want {
		err := fmt.Errorf("%w: node %s holds %d shard(s) and the cluster %d: a cluster's shard count is fixed when it is bootstrapped; start the node with --shards %d on an empty data dir",
			raftfsm.ErrInvalidRequest, m.GetNodeId(), have, want, want)
		return &clusterpb.JoinResponse{Error: err.Error(), Code: adminCode(err), LeaderRemoteAddr: n.leaderRemote()}
	}
	reg := &raftpb.NodeRegister{NodeId: m.GetNodeId(), RaftAddr: m.GetRaftAddr(), RemoteAddr: m.GetRemoteAddr(), KafkaAddr: m.GetKafkaAddr(), KafkaListeners: m.GetKafkaListeners(), LogFormat: m.GetLogFormat(), Shards: m.GetShards()}
	if err := n.raft.Join(ctx, reg); err != nil {
		return &clusterpb.JoinResponse{Error: err.Error(), Code: adminCode(err), LeaderRemoteAddr: n.leaderRemote()}
	}
	return &clusterpb.JoinResponse{LeaderRemoteAddr: n.remoteAddr}
}

// raftStatus is the node's Raft state in the meta group alone (a read
// barrier's question: no state hash, no members, no shards).
func (n *Node) raftStatus() *clusterpb.StatusResponse {
	st := n.raft.Status()
	return &clusterpb.StatusResponse{NodeId: n.raft.ID(), State: st.State, LeaderId: n.raft.LeaderID(), Term: st.Term,
		AppliedIndex: st.AppliedIndex, CommitIndex: st.CommitIndex}
}

func (n *Node) status() *clusterpb.StatusResponse {
	st := n.raft.Status()
	resp := &clusterpb.StatusResponse{
		NodeId:       n.raft.ID(),
		State:        st.State,
		LeaderId:     n.raft.LeaderID(),
		Term:         st.Term,
		AppliedIndex: st.AppliedIndex,
		CommitIndex:  st.CommitIndex,
		FsmHash:      n.raft.FSM.Hash(),
		LastLogIndex: st.LastLogIndex,
	}
	resp.LastContactMs = -1
	if st.LastContact >= 0 {
		resp.LastContactMs = st.LastContact.Milliseconds()
	}
	resp.LogFormat, resp.AppliesLogFormat = n.raft.FSM.LogFormat(), n.raft.AgreedLogFormat()
	ready := n.Readiness()
	resp.Ready, resp.NotReady = ready.Ready(), ready.Failing()
	servers, err := n.raft.Servers()
	if err != nil {
		resp.Error = err.Error()
		return resp
	}
	for _, s := range servers {
		m := &clusterpb.Member{NodeId: s.ID, RaftAddr: s.Addr, Leader: s.ID == resp.LeaderId}
		if s.Voter {
			m.Suffrage = "voter"
		} else {
			m.Suffrage = "nonvoter"
		}
		if reg, ok := n.raft.FSM.Node(s.ID); ok {
			m.RemoteAddr, m.KafkaAddr = reg.GetRemoteAddr(), reg.GetKafkaAddr()
		}
		resp.Members = append(resp.Members, m)
	}
	for _, gs := range n.shards {
		st := gs.rep.Status()
		groups, _ := gs.rep.FSM.Counts()
		resp.Shards = append(resp.Shards, &clusterpb.ShardStatus{
			Id: uint32(gs.id), LeaderId: gs.rep.LeaderID(), State: st.State, Term: st.Term,
			CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, Groups: uint32(groups), Active: gs.active.Load(),
			FsmHash: gs.rep.FSM.Hash(),
		})
	}
	return resp
}

// transferLeadership moves leadership of a shard (or of the meta group) to
// a node, from its leader.
func (n *Node) transferLeadership(m *clusterpb.TransferLeadershipRequest) *clusterpb.AdminResponse {
	if m.Shard == nil {
		if len(n.shards) == 1 {
			return n.adminResponse(n.shards[0].withoutLease(func() error { return n.raft.TransferLeadership(m.GetNodeId()) }))
		}
		return n.adminResponse(n.raft.TransferLeadership(m.GetNodeId()))
	}
	k := int(m.GetShard())
	if k >= len(n.shards) {
		return n.adminResponse(fmt.Errorf("%w: shard %d: the cluster has %d shard(s)", raftfsm.ErrInvalidRequest, k, len(n.shards)))
	}
	gs := n.shards[k]
	if !gs.rep.IsLeader() {
		r := n.adminResponse(raftfsm.ErrNotLeader)
		if reg, ok := n.raft.FSM.Node(gs.rep.LeaderID()); ok {
			r.LeaderRemoteAddr = reg.GetRemoteAddr()
		}
		return r
	}
	return n.adminResponse(gs.handOver(m.GetNodeId()))
}
