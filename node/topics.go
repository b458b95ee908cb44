package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/kafka"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// catalogErrors names the catalog's errors on the wire between nodes, so a
// forwarded topic command fails on the follower exactly as on the leader.
var catalogErrors = map[string]error{
	"topic_exists":       catalog.ErrTopicExists,
	"unknown_topic":      catalog.ErrUnknownTopic,
	"invalid_topic":      catalog.ErrInvalidTopic,
	"invalid_partitions": catalog.ErrInvalidPartitions,
	"unsupported":        catalog.ErrUnsupported,
}

func catalogErrorName(err error) string {
	for name, e := range catalogErrors {
		if errors.Is(err, e) {
			return name
		}
	}
	return err.Error()
}

// proposeTopic applies a catalog command: through the log on the leader,
// forwarded to the leader from any other node (Kafka clients may create
// topics through any broker).
func (n *Node) proposeTopic(ctx context.Context, cmd catalog.Command) error {
	if n.raft.IsLeader() {
		return n.raft.ProposeTopic(ctx, cmd)
	}
	addr := n.leaderRemote()
	if addr == "" {
		return fmt.Errorf("no leader to forward the topic change to: %w", coordinator.ErrStoreNotLeader)
	}
	var msg proto.Message
	switch c := cmd.(type) {
	case catalog.CreateTopic:
		msg = &raftpb.TopicCreate{Name: c.Name, Id: c.ID[:], Partitions: c.Partitions}
	case catalog.DeleteTopic:
		msg = &raftpb.TopicDelete{Name: c.Name}
	case catalog.GrowTopic:
		msg = &raftpb.TopicGrow{Name: c.Name, Id: c.ID[:], Partitions: c.Partitions}
	default:
		return fmt.Errorf("unknown catalog command %T", cmd)
	}
	timeout := adminTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	res, err := n.system.Root.RequestFuture(actor.NewPID(addr, AdminName), msg, timeout).Result()
	if err != nil {
		return fmt.Errorf("forward topic change to the leader: %w", coordinator.ErrStoreTimeout)
	}
	r, ok := res.(*clusterpb.AdminResponse)
	if !ok {
		return fmt.Errorf("unexpected answer %T", res)
	}
	if r.GetError() == "" {
		// Wait until the change reached this node, so a Metadata request
		// that follows sees it.
		for ctx.Err() == nil && !n.catalogHas(cmd) {
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	}
	if e, ok := catalogErrors[r.GetError()]; ok {
		return e
	}
	return errors.New(r.GetError())
}

func (n *Node) catalogHas(cmd catalog.Command) bool {
	switch c := cmd.(type) {
	case catalog.CreateTopic:
		_, ok := n.raft.Catalog.Get(c.Name)
		return ok
	case catalog.DeleteTopic:
		_, ok := n.raft.Catalog.Get(c.Name)
		return !ok
	case catalog.GrowTopic:
		t, ok := n.raft.Catalog.Get(c.Name)
		return !ok || t.Partitions >= c.Partitions
	}
	return true
}

// onTopicCommand applies a topic command forwarded by another node.
func (n *Node) onTopicCommand(cmd catalog.Command) *clusterpb.AdminResponse {
	if !n.raft.IsLeader() {
		return &clusterpb.AdminResponse{Error: "not the leader", LeaderRemoteAddr: n.leaderRemote()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if err := n.raft.ProposeTopic(ctx, cmd); err != nil {
		return &clusterpb.AdminResponse{Error: catalogErrorName(err)}
	}
	return &clusterpb.AdminResponse{}
}

// brokers lists every registered node as a Kafka broker, and the leader as
// controller, for Metadata. A node that has not caught up lists the nodes
// its log knew of (see registered): clients drop their connections to the
// brokers a Metadata answer leaves out. A node this one knows to be
// unreachable (peerDown) is left out, as Kafka leaves out a fenced broker:
// clients that cache a group's coordinator (sarama, kafkajs) look for it
// again only once its broker is gone from Metadata.
func (n *Node) brokers(listener string) ([]kafka.Broker, int32) {
	var out []kafka.Broker
	seen := false
	for _, reg := range n.registered() {
		if n.peerDown(reg.GetNodeId()) {
			continue
		}
		b, ok := brokerOf(reg.GetNodeId(), kafkaAddrOf(reg, listener))
		if !ok {
			continue
		}
		seen = seen || reg.GetNodeId() == n.raft.ID()
		out = append(out, b)
	}
	if !seen {
		if b, ok := brokerOf(n.raft.ID(), kafkaAddrOf(n.self(), listener)); ok {
			out = append(out, b)
		}
	}
	controller := int32(-1)
	if id := n.raft.LeaderID(); id != "" {
		controller = KafkaNodeID(id)
	}
	return out, controller
}

func brokerOf(id, addr string) (kafka.Broker, bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return kafka.Broker{}, false
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return kafka.Broker{}, false
	}
	return kafka.Broker{NodeID: KafkaNodeID(id), Host: host, Port: int32(p)}, true
}

// topicLag bounds how long a shard leader waits for a topic it does not
// know yet: a topic created through another node reaches this node's
// catalog when the meta group's next entries are applied here, normally
// within a heartbeat.
const topicLag = 250 * time.Millisecond

// awaitTopic waits up to topicLag for topic to appear in this node's
// catalog, unless this node leads the meta group (its catalog is the
// newest there is).
func (n *Node) awaitTopic(topic string) bool {
	if n.raft.IsLeader() {
		return false
	}
	deadline := time.Now().Add(topicLag)
	for time.Now().Before(deadline) {
		if _, ok := n.raft.Catalog.Get(topic); ok {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// readBarrierWait bounds a Metadata answer's read barrier: a follower whose
// leader does not answer in that time (it just failed) answers from what
// it has.
const readBarrierWait = 500 * time.Millisecond

// readBarrier waits until this node's catalog holds every meta group entry
// the leader had committed when asked, and reports whether it does. A
// Metadata answer waits for it, so a follower never shows a topic older
// than a client saw acknowledged through another node: a topic grown on
// the leader shows its new partitions on every node once CreatePartitions
// returned. A follower asks the leader for its commit index (a native API
// round trip, no state hashed) and waits until it has applied that index,
// normally within the leader's next AppendEntries; the leader waits for
// its own commit index. Asking the leader is cheaper than forwarding the
// Metadata request to it (the answer names this node's brokers and is
// built here) and costs nothing when the follower is current. Without a
// known leader, or an answer within readBarrierWait, the answer is this
// node's state, as a Kafka broker's metadata cache would give it.
func (n *Node) readBarrier(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, readBarrierWait)
	defer cancel()
	var index uint64
	if n.raft.IsLeader() {
		index = n.raft.Status().CommitIndex
	} else {
		addr := n.leaderRemote()
		if addr == "" {
			return false
		}
		res, err := n.system.Root.RequestFuture(actor.NewPID(addr, AdminName), &clusterpb.StatusRequest{RaftOnly: true}, readBarrierWait).Result()
		st, ok := res.(*clusterpb.StatusResponse)
		if err != nil || !ok || st.GetState() != "Leader" {
			return false
		}
		index = st.GetCommitIndex()
	}
	for !n.raft.Holds(index) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(2 * time.Millisecond):
		}
	}
	return true
}
