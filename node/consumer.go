package node

import (
	"errors"
	"fmt"

	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/raftfsm"
)

// Consumer groups (KIP-848): what the group services need from the node.

// consumerConfig is the consumer groups' configuration: Config.Consumer, or
// Kafka's defaults when it was left zero.
func (n *Node) consumerConfig() *coordinator.ConsumerConfig {
	c := n.cfg.Consumer
	if c.SessionTimeout == 0 && c.HeartbeatInterval == 0 && len(c.Assignors) == 0 {
		c = coordinator.DefaultConsumerConfig()
	}
	return &c
}

// consumerGroupsAllowed reports why a consumer group cannot be created in
// rep's shard now: the cluster has not agreed to a log format that carries
// consumer group records yet (a node of an older version is still a
// member). Clients told so fall back to the classic protocol.
func (n *Node) consumerGroupsAllowed(rep *raftfsm.Replica) func() error {
	return func() error {
		if !n.cfg.Kafka.ConsumerProtocol {
			return errors.New("the consumer group protocol is turned off (--group-coordinator-rebalance-protocols classic)")
		}
		if f := rep.FSM.LogFormat(); f < raftfsm.LogFormatConsumer {
			return fmt.Errorf("the consumer group protocol is not available yet: the cluster's log format is %d, and consumer groups need %d, which the cluster reaches once every node runs a version that applies it", f, raftfsm.LogFormatConsumer)
		}
		return nil
	}
}

// topicsView is the catalog's partition counts at one version.
type topicsView struct {
	version    uint64
	partitions map[string]int32
}

// topicPartitions returns the catalog's partition counts and version for
// the consumer groups; the map is built once per catalog version and
// shared.
func (n *Node) topicPartitions() (uint64, map[string]int32) {
	cat := n.raft.Catalog
	if v := n.topics.Load(); v != nil && v.version == cat.Version() {
		return v.version, v.partitions
	}
	version, partitions := cat.Partitions()
	n.topics.Store(&topicsView{version: version, partitions: partitions})
	return version, partitions
}
