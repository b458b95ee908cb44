package node

import "time"

// peerDown reports whether this node knows node id to be unreachable: one
// of its Raft replicas, as leader, has failed to heartbeat id, or, as
// id's follower, has not heard from it, for peerDownAfter. A node that
// only follows other leaders has no view and says false. A pause shorter
// than that (a GC pause, a stalled disk) does not count: clients drop their
// connections to a broker that Metadata leaves out.
func (n *Node) peerDown(id string) bool {
	if id == n.raft.ID() {
		return false
	}
	after := peerDownAfter(n.raft.HeartbeatTimeout())
	if n.raft.PeerUnreachable(id, after) {
		return true
	}
	for _, gs := range n.shards {
		if gs.rep.PeerUnreachable(id, after) {
			return true
		}
	}
	return false
}

// peerDownAfter is how long a peer must be out of reach before Metadata
// leaves it out: twice the Raft heartbeat timeout, a second at least.
func peerDownAfter(heartbeatTimeout time.Duration) time.Duration {
	return max(2*heartbeatTimeout, time.Second)
}
