package node

// stopOnHalt stops the node when its FSM halts on an entry this version
// cannot apply: serving on would answer from a state the other replicas
// have moved past.
func (n *Node) stopOnHalt() {
	select {
	case <-n.stop:
	case <-n.raft.FSM.Halted():
		n.log.Error("stopping: the replicated log holds an entry this version cannot apply; upgrade this node", "err", n.raft.FSM.HaltErr())
		n.Close()
	}
}
