package node

import (
	"errors"

	"github.com/cohort-coord/cohort/raftfsm"
)

// stopOnHalt stops the node when its FSM halts on an entry this version
// cannot apply: serving on would answer from a state the other replicas
// have moved past.
func (n *Node) stopOnHalt() {
	select {
	case <-n.stop:
	case <-n.raft.FSM.Halted():
		err := n.raft.FSM.HaltErr()
		if errors.Is(err, raftfsm.ErrShardCount) {
			n.log.Error("stopping: this node's data dir or version does not match the cluster's shard map; start it on a data dir of the cluster's shard count", "err", err)
		} else {
			n.log.Error("stopping: the replicated log holds an entry this version cannot apply; upgrade this node", "err", err)
		}
		n.Close()
	}
}
